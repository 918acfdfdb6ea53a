#!/usr/bin/env python3
"""PyTorch peer of `ktune bench adam` (seeds 000/001) on the same GPU.

Times one AdamW step over N parameter tensors of M elements with PyTorch's
single-tensor eager implementation (foreach=False: the per-tensor loop the
seeds' _single_tensor_adam names; PyTorch's default is foreach=True), the
torch.compile'd single-tensor step, and the fused multi-tensor kernel
(fused=True), fp32. Each step
is timed as `ktune bench adam` times its launches (tuner/cuda/timing.cpp):
CUDA events around one step, the L2 flushed (a buffer of twice its size
written) before each repetition, 3 warm-ups, at least 10 repetitions and more
until 50 ms are measured (at most 200), median. Prints the seeds' table.

On both sides the events enclose everything the step issues from the host
after the flush: where the host takes longer to issue a step than the GPU to
run it (PyTorch's Python step() dispatch on the small rows, ktune's eager
launches), the time includes the GPU waiting for it.

--json-out writes the rows with the stamps ktune's JSON has (device, date,
git revision, NVIDIA driver), for bench/plot.py.
"""
import argparse
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stamps  # noqa: E402
import timing  # noqa: E402

torch = None  # imported by main(): --help needs no torch
SETTINGS = ("fp32; AdamW lr 1e-3, weight decay 0.01; _single_tensor_adam and compiled_single_tensor_adam with "
            "foreach=False (PyTorch's default is foreach=True), _fused_adam with fused=True")


def method_text(n_bytes):
    return timing.method_text(n_bytes, "one optimizer step") + "; the time includes host dispatch the GPU waits for"


def make(n, numel, **kw):
    params = [torch.randn(numel, device="cuda", requires_grad=True) for _ in range(n)]
    for p in params:
        p.grad = torch.randn_like(p)
    return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, **kw)


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tensors", default="1,2,4,8,16,32")
    ap.add_argument("--numel", default="16384,65536,262144,1048576,4194304")
    ap.add_argument("--json-out", help="also write the rows as JSON to this file (bench/plot.py draws it)")
    return ap.parse_args(argv)


def report(rows, device, method):
    """The JSON of a run: PyTorch's three forms per row, under PyTorch's names, and the stamps."""
    return {"benchmark": "adam", "backend": f"torch {torch.__version__}", "device": device,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "git_revision": stamps.git_revision(), "nvidia_driver": stamps.nvidia_driver(),
            "cuda_runtime": torch.version.cuda, "settings": SETTINGS, "method": method, "rows": rows}


def main(argv=None):
    global torch
    args = parse(argv)
    import torch as imported
    import torch._dynamo
    torch = imported
    flush = timing.flush_buffer()
    device = torch.cuda.get_device_name()
    print(f"PyTorch {torch.__version__} on {device}, NVIDIA driver {stamps.nvidia_driver() or 'unknown'}, "
          f"git {stamps.git_revision()}; {SETTINGS}\n")
    print("| Num Params | Param Size | compiled_single_tensor_adam | _single_tensor_adam | _fused_adam |")
    print("|---|---|---|---|---|")
    rows = []
    for numel in map(int, args.numel.split(",")):
        for n in map(int, args.tensors.split(",")):
            eager = make(n, numel, foreach=False)
            fused = make(n, numel, fused=True)
            compiled_opt = make(n, numel, foreach=False)
            # Each row's step compiled afresh: past dynamo's recompile limit (8) the same function would run
            # eagerly and the compiled column would time eager steps.
            torch._dynamo.reset()
            compiled = torch.compile(compiled_opt.step)
            t_eager, s_eager = timing.median_ms(eager.step, flush)
            t_comp, s_comp = timing.median_ms(compiled, flush)
            t_fused, s_fused = timing.median_ms(fused.step, flush)
            print(f"| {n} | {numel} | {t_comp:.4f} ms/iter | {t_eager:.4f} ms/iter | {t_fused:.4f} ms/iter |",
                  flush=True)
            rows.append({"tensors": n, "numel": numel, "dtype": "f32", "compiled_single_tensor_adam_ms": t_comp,
                         "single_tensor_adam_ms": t_eager, "fused_adam_ms": t_fused,
                         "compiled_single_tensor_adam_samples_ms": s_comp, "single_tensor_adam_samples_ms": s_eager,
                         "fused_adam_samples_ms": s_fused})
    method = method_text(flush.numel())
    print(f"\n{method}")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(report(rows, device, method), f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
