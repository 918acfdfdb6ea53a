#!/usr/bin/env python3
"""PyTorch peer of `ktune bench attention` on the same GPU.

The same cases: seed 003's table (batch 8, one head, head dim x sequence
length; forward ms, backward ms, memory after forward), the CS336 leaderboard
case (batch 1, 16 heads, head dim 64, seq 16384, bf16, causal, forward +
backward) and the causal forward at head dim 128, seq 16384 (--tables picks
among the three, as ktune's option does), each with:
  eager     attention written out, the (seq, seq) scores materialised
  compiled  torch.compile of the eager function (one, over every case: static shapes for the first, then
            dynamic ones, as torch.compile makes them)
  flash     scaled_dot_product_attention, flash backend (FlashAttention-2)
  cudnn     scaled_dot_product_attention, cuDNN backend
  efficient scaled_dot_product_attention, memory-efficient backend
Times as `ktune bench attention` times its launches (tuner/cuda/timing.cpp,
bench/peers/timing.py): CUDA events around one call, the L2 flushed before
each repetition, warm-ups, at least --reps repetitions and more until 50 ms
are measured, median; the backward is timed alone (a retained graph,
gradients cleared between calls). A causal mask of the eager function is
built once per case, outside the timed calls, as ktune's eager attention
masks inside its softmax kernel.
TFLOP/s counts a causal mask as half the square and the backward as 2.5 x
the forward, as ktune does. A backend that refuses a case (the flash backend
takes no fp32; eager runs out of memory at long sequences) prints "-".
f32 matmuls run without TF32 (PyTorch's default, the seed's baseline, and
ktune's eager f32 attention); --tf32 turns TF32 on, as ktune's f32 flash
kernels use the tf32 matrix units. The header line says which.
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import timing  # noqa: E402

DTYPES = ("f32", "bf16", "f16")
IMPL_NAMES = ("eager", "compiled", "flash", "cudnn", "efficient")
TABLES = ("seed003", "leaderboard", "causal_fwd_d128")


def implementations():
    """The implementations by name; torch is imported here alone, so the parser needs none."""
    global torch
    import torch
    import torch._functorch.config
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def written_out(q, k, v, causal, mask=None):
        """Attention with its scores materialised; a causal mask built here unless given."""
        scale = 1.0 / math.sqrt(q.shape[-1])
        s = torch.matmul(q, k.transpose(-2, -1)) * scale
        if causal:
            if mask is None:
                n = q.shape[-2]
                mask = torch.ones(n, n, device=q.device, dtype=torch.bool).triu(1)
            s = s.masked_fill(mask, float("-inf"))
        return torch.matmul(torch.softmax(s, dim=-1), v)

    masks = {}  # eager's causal mask of one sequence length, built on its first call (a warm-up), not timed after

    def eager_attention(q, k, v, causal):
        n = q.shape[-2]
        if causal and (n, q.device) not in masks:
            masks.clear()  # one length at a time: seq 16384's is 256 MiB
            masks[(n, q.device)] = torch.ones(n, n, device=q.device, dtype=torch.bool).triu(1)
        return written_out(q, k, v, causal, masks[(n, q.device)] if causal else None)

    eager_attention.masks = masks  # measure() frees the mask after eager's case, before the others' memory
    def sdpa(backend):
        def run(q, k, v, causal):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        return run

    # The backward is timed again and again on one graph (retain_graph=True), which a compiled graph that
    # donates its saved buffers to the backward refuses: from the second shape on (compiled with dynamic shapes)
    # every case read as refused.
    if hasattr(torch._functorch.config, "donated_buffer"):
        torch._functorch.config.donated_buffer = False

    return {
        "eager": eager_attention,
        "compiled": torch.compile(written_out),  # one function for every case, as a script compiles it
        "flash": sdpa(SDPBackend.FLASH_ATTENTION),
        "cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
        "efficient": sdpa(SDPBackend.EFFICIENT_ATTENTION),
    }


def measure(name, impl, batch, heads, d, seq, dtype, causal, backward, flush, reps, warmup):
    """(forward ms, backward ms or None, MiB allocated after the forward) or None if implementation `name` refuses."""
    torch.cuda.empty_cache()
    try:
        # (batch, seq, heads, d) in memory, seen as (batch, heads, seq, d): as the model's attention views its
        # projections, and as ktune's kernels read q, k and v, with no transposing copy.
        leaves = [torch.randn((batch, seq, heads, d), device="cuda", dtype=dtype, requires_grad=backward)
                  for _ in range(3)]
        q, k, v = (t.transpose(1, 2) for t in leaves)
        fwd, _ = timing.median_ms(lambda: impl(q, k, v, causal), flush, reps, warmup)
        torch.cuda.synchronize()
        out = impl(q, k, v, causal)  # kept with its graph: what the backward needs stays allocated
        torch.cuda.synchronize()
        memory = (torch.cuda.memory_allocated() - flush.numel()) / 2**20  # the L2 flush's buffer is the peer's
        bwd = None
        if backward:
            grad = torch.randn_like(out)

            def step():
                for t in leaves:
                    t.grad = None
                out.backward(grad, retain_graph=True)

            bwd, _ = timing.median_ms(step, flush, reps, warmup)
        return fwd, bwd, memory
    # Refused or out of memory. The out-of-memory error is a RuntimeError; its
    # name torch.OutOfMemoryError exists from PyTorch 2.5 on, and looking it
    # up on an older one would end the run at the first refusal.
    except RuntimeError as e:
        print(f"<!-- {name}: {str(e).splitlines()[0][:120]} -->")
        return None
    finally:
        getattr(impl, "masks", {}).clear()  # eager's cached mask, not counted in the next implementation's memory


def flops(batch, heads, d, seq, causal):
    f = 4.0 * batch * heads * seq * seq * d
    return f / 2 if causal else f


def fmt(v, spec=".4f"):
    return "-" if v is None else format(v, spec)


def names(allowed, what):
    """An argparse type: a comma-separated list of `allowed` names."""
    def parse(text):
        chosen = [t for t in text.split(",") if t]
        for t in chosen:
            if t not in allowed:
                raise argparse.ArgumentTypeError(f"unknown {what} '{t}': one of {', '.join(allowed)}")
        return chosen

    return parse


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tables", type=names(TABLES, "table"), default=list(TABLES),
                    help="which cases, comma-separated: " + ", ".join(TABLES))
    ap.add_argument("--dims", default="16,32,64,128")
    ap.add_argument("--seqs", default="256,1024,4096,8192,16384")
    ap.add_argument("--dtype", default="f32", choices=sorted(DTYPES), help="dtype of the seed 003 table")
    ap.add_argument("--causal", action="store_true", help="causal mask in the seed 003 table")
    ap.add_argument("--impls", type=names(IMPL_NAMES, "implementation"), default=list(IMPL_NAMES),
                    help="which, comma-separated: " + ", ".join(IMPL_NAMES))
    ap.add_argument("--tf32", action="store_true",
                    help="f32 matmuls on the TF32 units (as ktune's f32 flash); default off, as PyTorch's default "
                         "and the seed's baseline")
    ap.add_argument("--reps", type=int, default=timing.MIN_REPS,
                    help="at least this many repetitions, more until 50 ms are measured (at most 200)")
    ap.add_argument("--warmup", type=int, default=timing.WARMUP)
    return ap.parse_args(argv)


def main(argv=None):
    args = parse(argv)
    IMPLS = implementations()
    impls = args.impls
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    tf32 = ("f32 matmuls on TF32 (--tf32, as ktune's f32 flash)" if args.tf32
            else "f32 matmuls without TF32 (PyTorch's default, as the seed's baseline and ktune's eager f32)")
    flush = timing.flush_buffer()
    print(f"PyTorch {torch.__version__} on {torch.cuda.get_device_name()}; "
          f"{timing.method_text(flush.numel(), 'one call', args.reps, args.warmup)}; {tf32}\n")

    dtype = getattr(torch, {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}[args.dtype])
    if "seed003" in args.tables:
        print(f"Seed 003: batch 8, one head, {args.dtype}{', causal' if args.causal else ''}; "
              "forward ms / backward ms / MiB allocated after the forward"
              f"{' (eager: its (seq, seq) bool causal mask included)' if args.causal else ''}\n")
        print("| d_model | seq_len | " + " | ".join(f"{i} fwd | {i} bwd | {i} MiB" for i in impls) + " |")
        print("|--:|--:|" + "--:|--:|--:|" * len(impls))
        for d in map(int, args.dims.split(",")):
            for seq in map(int, args.seqs.split(",")):
                cells = []
                for name in impls:
                    r = measure(name, IMPLS[name], 8, 1, d, seq, dtype, args.causal, True, flush, args.reps,
                                args.warmup)
                    cells += ["-", "-", "-"] if r is None else [fmt(r[0]), fmt(r[1]), fmt(r[2], ".2f")]
                print(f"| {d} | {seq} | " + " | ".join(cells) + " |", flush=True)
        print()
    cases = [c for c in (("leaderboard", "bf16, 1 x 16 heads, d 64, seq 16384, causal", 1, 16, 64, 16384, True),
                         ("causal_fwd_d128", "bf16, 1 x 16 heads, d 128, seq 16384, causal", 1, 16, 128, 16384, False))
             if c[0] in args.tables]
    if not cases:
        return
    print("| case | impl | forward ms | forward TFLOP/s | backward ms | backward TFLOP/s | fwd+bwd ms | "
          "fwd+bwd TFLOP/s |")
    print("|:--|:--|--:|--:|--:|--:|--:|--:|")
    for table, what, batch, heads, d, seq, backward in cases:
        label = f"{table} ({what})"
        for name in impls:
            r = measure(name, IMPLS[name], batch, heads, d, seq, torch.bfloat16, True, backward, flush, args.reps,
                        args.warmup)
            f = flops(batch, heads, d, seq, True)
            if r is None:
                print(f"| {label} | {name} | - | - | - | - | - | - |", flush=True)
                continue
            fwd, bwd, _ = r
            total = fwd + bwd if bwd is not None else None
            print(f"| {label} | {name} | {fwd:.4f} | {f / fwd / 1e9:.1f} | {fmt(bwd)} | "
                  f"{fmt(None if bwd is None else 2.5 * f / bwd / 1e9, '.1f')} | {fmt(total)} | "
                  f"{fmt(None if total is None else 3.5 * f / total / 1e9, '.1f')} |", flush=True)


if __name__ == "__main__":
    main()
