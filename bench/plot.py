#!/usr/bin/python3
"""Draws the JSON that ktune's benchmarks write (--json-out) as a figure.

    bench/plot.py OUT.{png,svg,pdf} FILE.json [FILE.json ...]

The files are of one benchmark, which picks the figure:
  adam       `ktune bench adam`: ms per step against elements per tensor, a
             panel per tensor count, a line per implementation (ktune's eager
             chain, per-tensor fused and fused multi-tensor kernels), and
             bench/peers/torch_adam.py --json-out's PyTorch forms beside
  attention  `ktune bench attention`: seed 003's table as forward and
             backward ms against the sequence length, a line per head dim
             (flash solid, eager dashed); the leaderboard and d 128 cases
             as bars
  e2e        `ktune bench e2e` (one run, or --sweep's twelve) and
             bench/peers/torch_e2e.py: a bar per run and phase, median ms
             with p20-p80 of the trials (files without their samples: no
             spread drawn); files side by side
  ops        `ktune bench ops`: a panel per op, fused and eager over the
             floor for each model shape, the families' 1.5x target drawn
  train      `ktune train --metrics` (JSON Lines, a record a step) or
             `ktune train --json`: the loss and validation loss against the
             step, and the learning rate, gradient norm and tokens per second
             where recorded;
             a line per file (runs side by side)
The title names the device, date and git revision of the first file (for
`train`, the files). Bad
input gets one line and exit 2, and nothing is written. Needs matplotlib
(Debian: python3-matplotlib); ktune itself does not.
"""
import json
import math
import os
import sys
import tempfile

KINDS = ("adam", "attention", "e2e", "ops", "train")


class BadInput(Exception):
    pass


def training_run(path, data):
    """A `train` record of a training run's steps: `ktune train --json`'s object, or --metrics' lines."""
    steps = data.get("steps") if isinstance(data, dict) and "benchmark" not in data else data
    if isinstance(data, dict) and "steps" not in data and isinstance(data.get("step"), int) and "loss" in data:
        steps = [data]  # --metrics of a one-step run: one line, which reads as one JSON object
    if not isinstance(steps, list) or not steps or not all(
            isinstance(s, dict) and "benchmark" not in s and isinstance(s.get("step"), int) and "loss" in s
            for s in steps):
        return None
    return {"benchmark": "train", "file": os.path.basename(path), "steps": steps}


def json_lines(path, text):
    """The records of a JSON Lines file. A last line cut short (no newline:
    a run still writing, or killed mid-line) is left out with a warning."""
    lines = text.split("\n")
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except ValueError as e:
            if number == len(lines):
                print(f"plot: {path}: line {number} is cut short (a run still writing, or killed); left out",
                      file=sys.stderr)
                continue
            raise ValueError(f"line {number}: {str(e).splitlines()[0]}")
    return records


def load(paths):
    """(kind, [record, ...]) of the files; a --sweep file is a list of e2e runs."""
    records = []
    for path in paths:
        try:
            with open(path) as f:
                text = f.read()
            try:
                data = json.loads(text)
            except ValueError:  # JSON Lines, as `train --metrics` writes: a record a line
                data = json_lines(path, text)
        except (OSError, ValueError) as e:
            raise BadInput(f"{path}: not a readable JSON file ({str(e).splitlines()[0]})")
        run = training_run(path, data)
        if run:
            records.append(run)
            continue
        for r in data if isinstance(data, list) else [data]:
            if not isinstance(r, dict) or r.get("benchmark") not in KINDS:
                raise BadInput(f"{path}: not the JSON of a ktune benchmark (one of {', '.join(KINDS)}, "
                               "from --json-out)")
            records.append(r)
    if not records:
        raise BadInput("no benchmark results in the files given")
    kinds = sorted({r["benchmark"] for r in records})
    if len(kinds) > 1:
        raise BadInput(f"the files hold different benchmarks ({', '.join(kinds)}); plot one at a time")
    return kinds[0], records


def stamp(r):
    if r.get("benchmark") == "train":
        return r["file"]
    device = r.get("device", "unknown device")
    date = r.get("date", "")[:10]
    revision = r.get("git_revision")
    return f"{device}, {date}" + (f", git {revision}" if revision else "")


def grid(plt, n, width=4.2, height=3.2):
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


# ktune's three AdamW forms: (JSON keys, the first of files written before it was renamed, label). All are ktune's
# kernels; PyTorch's names (_single_tensor_adam, compiled_single_tensor_adam) are not theirs.
ADAM_IMPLS = [(("eager_chain_ms", "single_tensor_eager_ms"), "ktune eager chain (adamw_eager)"),
              (("per_tensor_fused_ms", "compiled_single_tensor_ms"), "ktune per-tensor fused (adamw_single)"),
              (("fused_ms",), "ktune fused multi-tensor (adamw)")]
# PyTorch's, from bench/peers/torch_adam.py --json-out: its own names.
TORCH_ADAM_IMPLS = [(("single_tensor_adam_ms",), "PyTorch _single_tensor_adam"),
                    (("compiled_single_tensor_adam_ms",), "PyTorch compiled_single_tensor_adam"),
                    (("fused_adam_ms",), "PyTorch _fused_adam")]


def adam_value(row, keys):
    return next((row[k] for k in keys if row.get(k)), None)


def plot_adam(plt, records):
    # (row, the implementations its record's backend names) for every row of every file
    rows = [(row, TORCH_ADAM_IMPLS if str(r.get("backend", "")).startswith("torch") else ADAM_IMPLS)
            for r in records for row in r["rows"]]
    counts = sorted({row["tensors"] for row, _ in rows})
    fig, axes = grid(plt, len(counts))
    for ax, count in zip(axes, counts):
        for dtype in sorted({row["dtype"] for row, _ in rows}):
            for impls in (ADAM_IMPLS, TORCH_ADAM_IMPLS):
                mine = sorted((row for row, own in rows if row["tensors"] == count and row["dtype"] == dtype
                               and own is impls), key=lambda row: row["numel"])
                for keys, label in impls:
                    points = [(row["numel"], adam_value(row, keys)) for row in mine if adam_value(row, keys)]
                    if points:
                        ax.plot(*zip(*points), marker="o", linestyle="--" if impls is TORCH_ADAM_IMPLS else "-",
                                label=f"{label} ({dtype})")
        ax.set(xscale="log", yscale="log", title=f"{count} tensor{'s' if count != 1 else ''}",
               xlabel="elements per tensor", ylabel="ms per step")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    return fig, "AdamW step"


def plot_attention(plt, records):
    rows = [row for r in records for row in r["rows"]]
    seed = [row for row in rows if row["table"] == "seed003"]
    cases = [row for row in rows if row["table"] != "seed003"]
    fig, axes = grid(plt, (2 if seed else 0) + (1 if cases else 0))
    if seed:
        for ax, phase in zip(axes, ("forward", "backward")):
            for i, d in enumerate(sorted({row["head_dim"] for row in seed})):
                for key, style, label in ((phase, "-", "flash"), ("eager_" + phase, "--", "eager")):
                    points = sorted((row["seq"], row[key]["median_ms"]) for row in seed
                                    if row["head_dim"] == d and row.get(key))
                    if points:
                        ax.plot(*zip(*points), style, marker="o", color=f"C{i}", label=f"{label}, head dim {d}")
            ax.set(xscale="log", yscale="log", title=f"seed 003: {phase}", xlabel="sequence length", ylabel="ms")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
    if cases:
        ax = axes[-1]
        labels = [row["table"] for row in cases]
        x = range(len(cases))
        for i, phase in enumerate(("forward", "backward")):
            ms = [row[phase]["median_ms"] if row.get(phase) else 0 for row in cases]
            ax.bar([v + (i - 0.5) * 0.4 for v in x], ms, 0.4, label=phase)
        ax.set_xticks(list(x), labels, fontsize=8)
        ax.set(title="targets", ylabel="ms")
        ax.legend(fontsize=7)
    return fig, "Attention"


def recompute_label(value):
    """ktune's level ("none", "swiglu", "blocks") or the peer's flag, as a label's suffix."""
    if isinstance(value, str):
        return "" if value == "none" else f", recompute {value}"
    return ", recomputed" if value else ""


def e2e_label(r):
    backend = r.get("backend", "?")
    who = backend if backend.startswith("torch") else f"ktune {backend}"
    extra = (", graphs" if r.get("graphs") else "") + recompute_label(r.get("recompute"))
    return (f"{who} {r.get('mode', '')} {r.get('dtype', '')}{extra}\n{r.get('model', '')} ctx {r['context_length']}, "
            f"warm-up {r.get('num_warmups', '?')}")


def percentile(values, q):
    """Linear interpolation between the closest ranks, as ktune's p20 and p80."""
    v = sorted(values)
    at = q * (len(v) - 1)
    low = math.floor(at)
    return v[low] + (v[min(low + 1, len(v) - 1)] - v[low]) * (at - low)


def spread(phase):
    """(below, above) the median: p20 to p80 of the trials where the file keeps them; else none, not the std
    (a median's bar with a mean's spread would mix two statistics)."""
    if not phase or not phase.get("samples_ms"):
        return 0.0, 0.0
    s, m = phase["samples_ms"], phase["median_ms"]
    return max(0.0, m - percentile(s, 0.2)), max(0.0, percentile(s, 0.8) - m)


def plot_e2e(plt, records):
    phases = [p for p in ("forward", "backward", "optimizer", "step") if any(r.get(p) for r in records)]
    fig, axes = grid(plt, 1, width=max(6.0, 1.1 * len(records) * len(phases) ** 0.5), height=4.5)
    ax = axes[0]
    width = 0.8 / len(phases)
    for i, phase in enumerate(phases):
        ms = [r[phase]["median_ms"] if r.get(phase) else 0 for r in records]
        bars = [spread(r.get(phase)) for r in records]
        ax.bar([j + (i - (len(phases) - 1) / 2) * width for j in range(len(records))], ms, width,
               yerr=[[b[0] for b in bars], [b[1] for b in bars]], capsize=2, label=phase)
    ax.set_xticks(range(len(records)), [e2e_label(r) for r in records], fontsize=7, rotation=30, ha="right")
    values = [r[p]["median_ms"] for r in records for p in phases if r.get(p) and r[p]["median_ms"] > 0]
    if values and max(values) > 20 * min(values):
        ax.set_yscale("log")  # compiled steps beside eager ones, each readable
    ax.set(ylabel="median ms (bars: p20-p80 of the trials, where the file keeps them)",
           title="training step by phase")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7)
    return fig, "End to end"


def plot_ops(plt, records):
    from matplotlib import ticker
    rows = [row for r in records for row in r["rows"]]
    ops = list(dict.fromkeys(row["family"] for row in rows))
    # No floor (the emulation: no copy bandwidth, floor_ms null): the times themselves, host wall time.
    floor = all(row.get("floor_ms") for row in rows)
    fig, axes = grid(plt, len(ops))
    for ax, op in zip(axes, ops):
        mine = [row for row in rows if row["family"] == op]
        x = range(len(mine))
        for i, (key, label) in enumerate((("fused_ms", "ktune fused"), ("eager_ms", "eager chain"))):
            ax.bar([v + (i - 0.5) * 0.4 for v in x], [row[key] / (row["floor_ms"] if floor else 1) for row in mine],
                   0.4, label=label)
        if floor:
            ax.axhline(1.5, color="k", linestyle="--", linewidth=0.8, label="1.5x the floor")
        # context_length; results written before it was named so hold context
        ticks = [f"{row['model']} {row.get('context_length', row.get('context'))}" for row in mine]
        ax.set_xticks(list(x), ticks, fontsize=6, rotation=45, ha="right")
        ax.set(yscale="log", title=op, ylabel="time / floor" if floor else "ms (no floor: host emulation)")
        if not floor:
            ax.grid(True, axis="y", which="both", alpha=0.3)
            continue
        ax.set_ylim(bottom=0.8)  # the floor is 1: every bar starts below it
        ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 1.5, 2.0, 3.0, 5.0)))
        ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%gx"))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
        ax.tick_params(axis="y", which="both", labelsize=7)
        ax.grid(True, axis="y", which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    if not floor:
        return fig, "Ops, eager and fused (no copy bandwidth, so no floor)"
    return fig, "Ops, eager and fused, over the floor (bytes / copy bandwidth + an empty launch)"


def plot_train(plt, records):
    def series(r, key):
        points = [(s["step"], s[key]) for s in r["steps"] if s.get(key) is not None]
        return [p[0] for p in points], [p[1] for p in points]

    panels = [("loss", "loss")] + [(key, label) for key, label in (("lr", "learning rate"), ("grad_norm",
                                   "gradient norm (before clipping)"), ("tokens_per_s", "tokens per second"))
                                   if any(s.get(key) is not None for r in records for s in r["steps"])]
    fig, axes = grid(plt, len(panels))
    for ax, (key, label) in zip(axes, panels):
        for r in records:
            name = r["file"] if len(records) > 1 else ""
            line, = ax.plot(*series(r, key), label=f"{name} train".strip() if key == "loss" else name or None)
            if key == "loss":
                x, y = series(r, "val_loss")
                if x:
                    ax.plot(x, y, "o--", color=line.get_color(), label=f"{name} validation".strip())
        ax.set(xlabel="step", ylabel=label, title=label)
        if key in ("loss", "grad_norm"):
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        if key == "loss" or len(records) > 1:
            ax.legend(fontsize=7)
    return fig, "Training: the loss against the step"


def main(argv):
    if len(argv) < 2 or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    out, paths = argv[0], argv[1:]
    try:
        extension = os.path.splitext(out)[1].lower()
        if extension not in (".png", ".svg", ".pdf"):
            raise BadInput(f"{out}: the figure's name must end in .png, .svg or .pdf")
        folder = os.path.dirname(os.path.abspath(out))
        if not os.path.isdir(folder):
            raise BadInput(f"{out}: its folder {folder} does not exist")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise BadInput(f"{out}: its folder {folder} is not writable")
        kind, records = load(paths)
        try:
            import matplotlib
        except ImportError:
            raise BadInput("matplotlib is not installed (Debian: apt-get install python3-matplotlib)")
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        try:
            fig, title = globals()["plot_" + kind](plt, records)
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
            raise BadInput(f"{paths[0]}: a {kind} result without the fields this figure needs ({e!r})")
    except BadInput as e:
        print(f"plot: {e}", file=sys.stderr)
        return 2
    names = ", ".join(stamp(r) for r in records) if kind == "train" else stamp(records[0])
    fig.suptitle(f"{title}\n{names}", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=extension)
    except OSError as e:  # the folder went away or became unwritable since the check
        print(f"plot: {out}: cannot write there ({e.strerror})", file=sys.stderr)
        return 2
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=120)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as open() would have made it, not mkstemp's 0600
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    print(f"{out}: {kind}, {len(records)} result{'s' if len(records) != 1 else ''} from {len(paths)} "
          f"file{'s' if len(paths) != 1 else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
