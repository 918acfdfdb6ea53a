#!/usr/bin/python3
"""PyTorch (eager, CPU) peer of `ktune bench e2e --backend cpu`: the same CS336
model (cs336_model.py), the same flags and threads, the same timing (forward,
backward, optimizer separately; mean and sample std over trials after
warm-up), printed in the seeds' 004 columns. With --ktune PATH it also runs
`PATH bench e2e` with the same flags, alternating the two round by round
(--rounds N: ktune's process, then torch's, N times, the trials split evenly
between the rounds; one round by default) so that both see the same machine
load, and prints both rows and the ratio.

    /usr/bin/python3 bench/peers/torch_cpu_e2e.py --model small --ctx 128 --batch 1 \
        --threads 2 --warmup 1 --trials 5 --ktune build/cli/ktune
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# cs336_model.SIZES' names; torch (and the model) are imported by run_torch, so --help needs neither.
MODELS = ("small", "medium", "large", "xl", "2.7B", "tiny")


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="cpu", choices=["cpu"])
    p.add_argument("--model", default="small", choices=MODELS)
    for flag in ("--d-model", "--d-ff", "--layers", "--heads", "--vocab"):
        p.add_argument(flag, type=int, default=0)
    p.add_argument("--ctx", type=int, default=128)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--forward-only", action="store_true")
    mode.add_argument("--with-optimizer", action="store_true")
    p.add_argument("--json", action="store_true", help="JSON on stdout")
    p.add_argument("--ktune", help="ktune executable to run beside, alternating round by round (--rounds)")
    p.add_argument("--rounds", type=int, default=1,
                   help="with --ktune: alternate ktune and torch this many times (trials split evenly)")
    return p.parse_args()


def stats(v):
    if not v:
        return None
    return {"mean_ms": statistics.mean(v), "std_ms": statistics.stdev(v) if len(v) > 1 else None}


def run_torch(a, trials):
    import torch
    from cs336_model import SIZES, TransformerLM, loss_fn

    torch.set_num_threads(a.threads)
    vocab, d, d_ff, layers, heads = SIZES[a.model]
    vocab, d, d_ff = a.vocab or vocab, a.d_model or d, a.d_ff or d_ff
    layers, heads = a.layers or layers, a.heads or heads
    torch.manual_seed(0)
    model = TransformerLM(vocab, d, d_ff, layers, heads, context_length=a.ctx)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01) if a.with_optimizer else None
    tokens = torch.randint(0, vocab, (a.batch, a.ctx))
    targets = torch.randint(0, vocab, (a.batch, a.ctx))
    fwd, bwd, fb, optim, step = [], [], [], [], []
    for i in range(a.warmup + trials):
        t0 = time.perf_counter()
        if a.forward_only:
            with torch.no_grad():
                loss_fn(model, tokens, targets)
        else:
            loss = loss_fn(model, tokens, targets)
        t1 = time.perf_counter()
        if not a.forward_only:
            model.zero_grad(set_to_none=True)
            loss.backward()
        t2 = time.perf_counter()
        if opt:
            opt.step()
        t3 = time.perf_counter()
        if i < a.warmup:
            continue
        fwd.append((t1 - t0) * 1e3)
        if not a.forward_only:
            bwd.append((t2 - t1) * 1e3)
            fb.append((t2 - t0) * 1e3)
        if opt:
            optim.append((t3 - t2) * 1e3)
            step.append((t3 - t0) * 1e3)
    return {"backend": "torch-cpu " + torch.__version__, "model": a.model, "context_length": a.ctx,
            "batch_size": a.batch, "threads": a.threads, "num_warmups": a.warmup, "num_trials": trials,
            "forward": stats(fwd), "backward": stats(bwd), "forward_backward": stats(fb),
            "optimizer": stats(optim), "step": stats(step), "_raw": {"forward": fwd, "backward": bwd,
                                                                    "forward_backward": fb, "optimizer": optim,
                                                                    "step": step}}


def run_ktune(a, trials):
    cmd = [a.ktune, "bench", "e2e", "--backend", "cpu", "--model", a.model, "--ctx", str(a.ctx), "--batch",
           str(a.batch), "--warmup", str(a.warmup), "--trials", str(trials), "--threads", str(a.threads), "--json"]
    for flag in ("d_model", "d_ff", "layers", "heads", "vocab"):
        if getattr(a, flag):
            cmd += ["--" + flag.replace("_", "-"), str(getattr(a, flag))]
    if a.forward_only:
        cmd.append("--forward-only")
    if a.with_optimizer:
        cmd.append("--with-optimizer")
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    out["backend"] = "ktune-cpu"
    return out


def merge(runs):
    """Pools rounds: mean of the round means, std of all trials (weighted by round)."""
    if len(runs) == 1:
        return runs[0]
    out = dict(runs[0])
    for phase in ("forward", "backward", "forward_backward", "optimizer", "step"):
        ps = [r[phase] for r in runs if r.get(phase)]
        if not ps:
            continue
        n = out["num_trials"]
        mean = statistics.mean(p["mean_ms"] for p in ps)
        if n * len(ps) < 2:  # one trial in all: no sample std
            out[phase] = {"mean_ms": mean, "std_ms": None}
            continue
        # A round of one trial has no std (None) and adds none: (n - 1) times it is 0.
        var = sum((n - 1) * (p["std_ms"] or 0.0) ** 2 + n * (p["mean_ms"] - mean) ** 2 for p in ps) / (n * len(ps) - 1)
        out[phase] = {"mean_ms": mean, "std_ms": var ** 0.5}
    out["num_trials"] = runs[0]["num_trials"] * len(runs)
    return out


def row(r):
    def sec(phase, key):
        p = r.get(phase)
        return f"{p[key] / 1e3:.6f}" if p and p.get(key) is not None else "-"
    cells = [r["backend"], str(r["batch_size"]), r["model"], str(r["context_length"]), str(r["threads"]),
             sec("forward", "mean_ms"), sec("forward", "std_ms"), sec("backward", "mean_ms"), sec("backward", "std_ms"),
             sec("forward_backward", "mean_ms"), sec("forward_backward", "std_ms"),
             sec("optimizer", "mean_ms"), sec("optimizer", "std_ms")]
    return "| " + " | ".join(cells) + " | ok |"


def main():
    a = parse()
    rounds = max(1, a.rounds) if a.ktune else 1
    trials = max(1, a.trials // rounds)
    torch_runs, ktune_runs = [], []
    for _ in range(rounds):
        if a.ktune:
            ktune_runs.append(run_ktune(a, trials))
        torch_runs.append(run_torch(a, trials))
    results = [merge(torch_runs)] + ([merge(ktune_runs)] if a.ktune else [])
    for r in results:
        r.pop("_raw", None)
    ratio = {}
    if a.ktune:
        t, k = results
        for phase in ("forward", "backward", "forward_backward", "optimizer"):
            if t.get(phase) and k.get(phase):
                ratio[phase] = k[phase]["mean_ms"] / t[phase]["mean_ms"]
    if a.json:
        print(json.dumps({"rows": results, "ktune_over_torch": ratio}, indent=2))
        return
    print("| device | batch_size | model | context_length | threads | fwd avg (sec) | fwd std (sec) | back avg (sec) "
          "| back std (sec) | fws & back avg (sec) | fws & back std (sec) | optimizer avg (sec) "
          "| optimizer std (sec) | status |")
    print("|:--|--:|:--|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|:--|")
    for r in results:
        print(row(r))
    if ratio:
        print("\nktune / torch time: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratio.items()))


if __name__ == "__main__":
    main()
