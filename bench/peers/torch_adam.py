#!/usr/bin/env python3
"""PyTorch peer of `ktune bench adam` (seeds 000/001) on the same GPU.

Times one AdamW step over N parameter tensors of M elements with PyTorch's
single-tensor eager implementation (foreach=False), the torch.compile'd
single-tensor step, and the fused multi-tensor kernel (fused=True), with CUDA
events, warm-up, and the median of repetitions. Prints the seeds' table.
"""
import argparse
import statistics

import torch


def time_step(step, reps=50, warmup=5):
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def make(n, numel, **kw):
    params = [torch.randn(numel, device="cuda", requires_grad=True) for _ in range(n)]
    for p in params:
        p.grad = torch.randn_like(p)
    return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, **kw)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tensors", default="1,2,4,8,16,32")
    ap.add_argument("--numel", default="16384,65536,262144,1048576,4194304")
    args = ap.parse_args()
    print(f"PyTorch {torch.__version__} on {torch.cuda.get_device_name()}\n")
    print("| Num Params | Param Size | compiled_single_tensor_adam | _single_tensor_adam | _fused_adam |")
    print("|---|---|---|---|---|")
    for numel in map(int, args.numel.split(",")):
        for n in map(int, args.tensors.split(",")):
            eager = make(n, numel, foreach=False)
            fused = make(n, numel, fused=True)
            compiled_opt = make(n, numel, foreach=False)
            compiled = torch.compile(compiled_opt.step)
            t_eager = time_step(eager.step)
            t_comp = time_step(compiled)
            t_fused = time_step(fused.step)
            print(f"| {n} | {numel} | {t_comp:.4f} ms/iter | {t_eager:.4f} ms/iter | {t_fused:.4f} ms/iter |",
                  flush=True)


if __name__ == "__main__":
    main()
