#!/usr/bin/python3
"""PyTorch (GPU) peer of `ktune bench e2e --backend cuda`: the same CS336 model.

The model is cs336_model.py's, started from the weights and run on the batch
that `ktune bench e2e --save-batch FILE` wrote (safetensors: the parameters
under their state-dict names, `tokens` and `targets` I32 (batch, context),
the model config in the metadata). Modes, as ktune's:
  eager     the attention scores materialised, per-tensor AdamW (foreach off)
  compiled  torch.compile, scaled_dot_product_attention, fused AdamW
            (--compile-mode reduce-overhead: forward and backward replayed as
            CUDA graphs, the peer of `ktune bench e2e --graph`)
and precisions fp32 (TF32 off), tf32 (TF32 matmuls) and bf16 (autocast).
With --recompute each block runs under torch.utils.checkpoint (non-reentrant):
its activations recomputed in the backward, the peer of `ktune bench e2e
--recompute`.
Each phase (forward, which waits for the loss as ktune's does; backward;
AdamW) is timed with CUDA events; mean and sample std over the trials after
the warm-ups, in the seeds' columns (markdown, or --json), the most device
memory in use after a step as ktune counts it (the drop in the driver's free
memory since the start; the allocator's own peak beside, as
allocated_peak_bytes), and the loss of the first forward (on the starting
weights). With --ktune-json it prints ktune's rows beside and checks that
ktune's first loss matches this one within the dtype's tolerance (exit 1
when not).

    ktune bench e2e --backend cuda --mode compiled --model small --ctx 256 --batch 4 \\
        --with-optimizer --save-batch b.safetensors --json-out k.json
    python3 bench/peers/torch_e2e.py --batch-file b.safetensors --mode compiled --dtype f32 \\
        --with-optimizer --ktune-json k.json
"""
import argparse
import datetime
import json
import math
import os
import statistics
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stamps  # noqa: E402

PHASES = ("forward", "backward", "forward_backward", "optimizer", "step")
# Relative tolerance of the first loss against ktune's (the dtype's, as the families' checks).
TOLERANCE = {"f32": 1e-5, "tf32": 5e-4, "bf16": 1e-2}
DTYPE_NAME = {"f32": "float32", "tf32": "tf32", "bf16": "bfloat16"}


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                epilog="\n".join(__doc__.splitlines()[1:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch-file", required=True,
                   help="safetensors from `ktune bench e2e --save-batch`: weights, tokens, targets, config")
    p.add_argument("--mode", default="compiled", choices=["eager", "compiled"],
                   help="eager: scores materialised, per-tensor AdamW; compiled: torch.compile, SDPA, fused AdamW")
    p.add_argument("--compile-mode", default="default", choices=["default", "reduce-overhead"],
                   help="torch.compile's mode in compiled mode; reduce-overhead replays CUDA graphs")
    p.add_argument("--dtype", default="f32", choices=list(TOLERANCE),
                   help="f32 (TF32 off), tf32 (TF32 matmuls) or bf16 (autocast)")
    p.add_argument("--warmup", type=int, default=1, help="warm-up steps, not timed")
    p.add_argument("--trials", type=int, default=10, help="timed steps")
    passes = p.add_mutually_exclusive_group()
    passes.add_argument("--forward-only", action="store_true", help="time the forward pass only")
    passes.add_argument("--with-optimizer", action="store_true", help="also time the AdamW step")
    p.add_argument("--recompute", action="store_true",
                   help="each block under torch.utils.checkpoint: activations recomputed in the backward")
    p.add_argument("--json", action="store_true", help="JSON on stdout")
    p.add_argument("--json-out", help="also write the result as JSON to this file")
    p.add_argument("--ktune-json", nargs="+", default=[],
                   help="`ktune bench e2e --json-out` files: their rows beside, and the loss check")
    a = p.parse_args(argv)
    if a.warmup < 0 or a.trials < 1:
        p.error(f"--warmup must be >= 0 and --trials >= 1, got {a.warmup} and {a.trials}")
    if a.compile_mode != "default" and a.mode != "compiled":
        p.error("--compile-mode is torch.compile's: it needs --mode compiled")
    return a


def read_safetensors(path):
    """{name: (dtype, shape, buffer)} and the metadata of a safetensors file (no torch needed).

    The file is read once into one writable buffer and every tensor is a view
    of it: at the 2.7B size the file holds 14 GB of weights, and each copy
    (a slice of bytes, a bytearray per tensor) would add as much host memory.
    """
    raw = bytearray(os.path.getsize(path))
    with open(path, "rb") as f:
        if f.readinto(raw) != len(raw):
            raise ValueError(f"{path}: shorter than its size on disk")
    if len(raw) < 8:
        raise ValueError(f"{path}: not a safetensors file (shorter than its header length)")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError(f"{path}: header length {n} runs past the end of the file")
    header = json.loads(bytes(raw[8:8 + n]))
    metadata = header.pop("__metadata__", {})
    data = memoryview(raw)[8 + n:]
    tensors = {}
    for name, t in header.items():
        begin, end = t["data_offsets"]
        if not 0 <= begin <= end <= len(data):
            raise ValueError(f"{path}: tensor {name} lies outside the file")
        tensors[name] = (t["dtype"], list(t["shape"]), data[begin:end])
    return tensors, metadata


def model_config(metadata):
    """(vocab, d_model, d_ff, layers, heads, theta) from ktune's weights metadata."""
    try:
        return (int(metadata["vocab_size"]), int(metadata["d_model"]), int(metadata["d_ff"]),
                int(metadata["num_layers"]), int(metadata["num_heads"]), float(metadata.get("rope_theta", 10000)))
    except KeyError as e:
        raise ValueError(f"the batch file's metadata lacks {e}: write it with `ktune bench e2e --save-batch`")


def summary(samples):
    """Mean and sample std (n-1) in milliseconds, the median, and every trial, or None when not measured."""
    if not samples:
        return None
    return {"mean_ms": statistics.mean(samples), "std_ms": statistics.stdev(samples) if len(samples) > 1 else None,
            "median_ms": statistics.median(samples), "samples_ms": list(samples)}


def medians(r):
    """A line of the row's phase medians (ms): one slow trial moves a mean, not these."""
    cells = [f"{name} {r[p]['median_ms']:.3f}" for p, name in
             (("forward", "forward"), ("backward", "backward"), ("optimizer", "optimizer"), ("step", "step"))
             if r.get(p) and "median_ms" in r[p]]
    return f"{r['backend']}: " + (", ".join(cells) if cells else "-")


def settings(mode, dtype):
    """What PyTorch ran with, where it is not PyTorch's default: printed beside the table and kept in the JSON."""
    adamw = ("AdamW foreach=False (the per-tensor loop, as ktune's eager mode; PyTorch's default is foreach=True)"
             if mode == "eager" else "AdamW fused=True")
    attention = "the scores materialised" if mode == "eager" else "scaled_dot_product_attention"
    tf32 = "TF32 matmuls on" if dtype == "tf32" else "TF32 off (PyTorch's default)"
    return f"{adamw}; {attention}; {tf32}" + ("; bf16 autocast" if dtype == "bf16" else "")


def loss_check(ktune_loss, torch_loss, dtype):
    """(ok, relative difference) of ktune's first loss against PyTorch's; a loss that is not a number (NaN, which
    ktune's JSON writes as null) fails, with no difference."""
    if not isinstance(ktune_loss, (int, float)) or not math.isfinite(ktune_loss) or not math.isfinite(torch_loss):
        return False, None
    rel = abs(ktune_loss - torch_loss) / max(abs(torch_loss), 1e-30)
    return rel <= TOLERANCE[dtype], rel


def recompute_label(value):
    """ktune's level ("none", "swiglu", "blocks") or the peer's flag, as a suffix of the mode."""
    if isinstance(value, str):
        return "" if value == "none" else f", recompute {value}"
    return ", recomputed" if value else ""


def row(r):
    """One row in seed 004's columns (seconds), with the mode, dtype, peak memory and loss."""
    def sec(phase, key):
        p = r.get(phase)
        return f"{p[key] / 1e3:.6f}" if p and p.get(key) is not None else "-"
    peak = r.get("device_peak_bytes")
    mode = r.get("mode", "-") + (" (CUDA graphs)" if r.get("graphs") else "") + recompute_label(r.get("recompute"))
    cells = [r["backend"], mode, r.get("dtype", "-"), str(r["batch_size"]), r["model"],
             str(r["context_length"])]
    for phase in ("forward", "backward", "forward_backward", "optimizer", "step"):
        cells += [sec(phase, "mean_ms"), sec(phase, "std_ms")]
    loss = f"{r['loss']:.6f}" if r.get("loss") is not None else "NaN" if "loss" in r else "-"  # NaN: null in JSON
    cells += [f"{peak / 2**30:.2f} GiB" if peak is not None else "-", loss]
    return "| " + " | ".join(cells) + " |"


def table(rows):
    head = ("| device | mode | dtype | batch_size | model | context_length | fwd avg (sec) | fwd std (sec) "
            "| back avg (sec) | back std (sec) | fws & back avg (sec) | fws & back std (sec) "
            "| optimizer avg (sec) | optimizer std (sec) | step avg (sec) | step std (sec) | peak memory | loss |")
    return "\n".join([head, "|:--|:--|:--|--:|:--|--:|" + "--:|" * 12] + [row(r) for r in rows])


def run(a):
    import torch  # only here: --help and the helpers above need no torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from cs336_model import TransformerLM, loss_fn

    if not torch.cuda.is_available():
        raise SystemExit("torch_e2e.py: PyTorch sees no CUDA device")
    tensors, metadata = read_safetensors(a.batch_file)
    vocab, d_model, d_ff, layers, heads, theta = model_config(metadata)
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = a.dtype == "tf32"
    torch.backends.cudnn.allow_tf32 = a.dtype == "tf32"

    def tensor(name):
        dtype, shape, raw = tensors[name]
        t = {"F32": torch.float32, "I32": torch.int32}[dtype]
        return torch.frombuffer(raw, dtype=t).reshape(shape)  # a view of the file's buffer

    # Device memory in use is counted as ktune counts it: the drop in the driver's free memory from here (the
    # context made, nothing allocated) to after a step, its largest value.
    free_at_start = torch.cuda.mem_get_info(dev)[0]
    in_use = 0
    tokens = tensor("tokens").long().to(dev)
    targets = tensor("targets").long().to(dev)
    batch, ctx = tokens.shape
    # The RoPE tables and the causal mask are built once, for this context, and moved to the device with the
    # weights: no forward builds or copies them.
    # Built on the meta device: the random initialisation the weights would replace took 10 s of a 2-core host
    # at small, and grows with the parameters; the weights are then the file's tensors themselves.
    with torch.device("meta"):
        model = TransformerLM(vocab, d_model, d_ff, layers, heads, theta, context_length=ctx)
    model.recompute = a.recompute
    state = {name: tensor(name) for name in model.state_dict()}
    model.load_state_dict(state, assign=True)
    model.rebuild_tables("cpu")
    model.to(dev)
    if a.mode == "compiled":
        for block in model.layers:
            block.attn.sdpa = True
        step_loss = torch.compile(lambda t, y: loss_fn(model, t, y), mode=a.compile_mode)
    else:
        step_loss = lambda t, y: loss_fn(model, t, y)  # noqa: E731
    opt = None
    if a.with_optimizer:  # ktune's AdamwHyper defaults
        kind = {"fused": True} if a.mode == "compiled" else {"foreach": False}
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, **kind)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.dtype == "bf16")

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    samples = {p: [] for p in PHASES}
    first_loss = None
    for i in range(a.warmup + a.trials):
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        ev[0].record()
        if a.forward_only:
            with torch.no_grad(), autocast:
                value = step_loss(tokens, targets).item()
        else:
            with autocast:
                loss = step_loss(tokens, targets)
            value = loss.item()  # waits for the loss, as ktune's forward does
        ev[1].record()
        if not a.forward_only:
            model.zero_grad(set_to_none=True)
            loss.backward()
        ev[2].record()
        if opt:
            opt.step()
        ev[3].record()
        torch.cuda.synchronize()
        in_use = max(in_use, free_at_start - torch.cuda.mem_get_info(dev)[0])
        if first_loss is None:
            first_loss = value
        if i < a.warmup:
            continue
        samples["forward"].append(ev[0].elapsed_time(ev[1]))
        if not a.forward_only:
            samples["backward"].append(ev[1].elapsed_time(ev[2]))
            samples["forward_backward"].append(ev[0].elapsed_time(ev[2]))
        if opt:
            samples["optimizer"].append(ev[2].elapsed_time(ev[3]))
            samples["step"].append(ev[0].elapsed_time(ev[3]))
    mode = a.mode if a.compile_mode == "default" else f"{a.mode} ({a.compile_mode})"
    result = {"benchmark": "e2e", "backend": f"torch {torch.__version__}", "mode": mode,
              "dtype": DTYPE_NAME[a.dtype], "device": torch.cuda.get_device_name(dev),
              "cuda_runtime": torch.version.cuda, "nvidia_driver": stamps.nvidia_driver(),
              "git_revision": stamps.git_revision(), "settings": settings(a.mode, a.dtype),
              "clock": "CUDA events on the stream",
              "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
              "model": metadata.get("model", "custom"), "d_model": d_model, "d_ff": d_ff, "num_layers": layers,
              "num_heads": heads, "vocab_size": vocab, "context_length": ctx, "batch_size": batch,
              "num_warmups": a.warmup, "num_trials": a.trials,
              "passes": "forward" if a.forward_only else "step" if opt else "forward_backward",
              "recompute": a.recompute,
              "loss": first_loss, "device_peak_bytes": in_use,
              "allocated_peak_bytes": torch.cuda.max_memory_allocated(dev)}
    for p in PHASES:
        result[p] = summary(samples[p])
    return result


def main(argv=None):
    a = parse(argv)
    result = run(a)
    ktune_rows = []
    for path in a.ktune_json:
        with open(path) as f:
            k = json.load(f)
        k["backend"] = "ktune " + k.get("backend", "?")
        ktune_rows.append((path, k))
    checks = []
    for path, k in ktune_rows:
        ok, rel = loss_check(k["loss"], result["loss"], a.dtype)
        checks.append({"file": path, "ktune_loss": k["loss"], "torch_loss": result["loss"],
                       "relative_difference": rel, "tolerance": TOLERANCE[a.dtype], "ok": ok})
    ktune_rows = [k for _, k in ktune_rows]
    out = {"torch": result, "ktune": ktune_rows, "loss_checks": checks}
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(result, f, indent=2)
    if a.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"# End-to-end: ktune and PyTorch on {result['device']} ({result['date']})\n")
        print(f"{result['backend']}, NVIDIA driver {result['nvidia_driver'] or 'unknown'}, CUDA "
              f"{result['cuda_runtime']}, git {result['git_revision']}; {result['settings']}\n")
        print(table(ktune_rows + [result]))
        print("\npeak memory: the most device memory in use after a step, counted alike on both sides as the drop in "
              "the driver's free memory (cuMemGetInfo) since the run started (kernels' modules, workspaces and a "
              f"caching allocator's reserve included); PyTorch's allocator alone peaked at "
              f"{result['allocated_peak_bytes'] / 2**30:.2f} GiB of tensors (torch.cuda.max_memory_allocated)")
        print("\nmedians of the trials (ms):\n")
        for r in ktune_rows + [result]:
            print(f"- {medians(r)}")
        for c in checks:
            verdict = "ok" if c["ok"] else "MISMATCH"
            number = lambda v, spec: "not a number" if v is None else format(v, spec)  # noqa: E731
            print(f"\nfirst loss ({c['file']}): ktune {number(c['ktune_loss'], '.6f')}, torch "
                  f"{number(c['torch_loss'], '.6f')}, relative difference {number(c['relative_difference'], '.2e')} "
                  f"(tolerance {c['tolerance']:.0e}): {verdict}")
    return 0 if all(c["ok"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
