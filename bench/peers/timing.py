"""How the PyTorch peers time a call on the GPU, as ktune times a launch
(tuner/cuda/timing.cpp): CUDA events around one call, the L2 flushed (a
buffer of twice its size written) before each repetition, 3 warm-ups, at
least 10 repetitions and more until 50 ms are measured (at most 200), median.
torch is imported by the functions that use it: the peers' --help needs none.
"""
import statistics

WARMUP, MIN_REPS, MAX_REPS, MIN_MS = 3, 10, 200, 50.0  # ktune's RunOptions defaults


def flush_bytes():
    """Twice the device's L2 (at least 1 MiB), as ktune's timing harness writes before each repetition."""
    import torch
    l2 = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 0)
    if not l2:  # an older PyTorch: more than any GPU's L2
        return 256 << 20
    return max(2 * l2, 1 << 20)


def flush_buffer():
    """The buffer median_ms writes before each repetition."""
    import torch
    return torch.empty(flush_bytes(), dtype=torch.uint8, device="cuda")


def method_text(n_bytes, what, min_reps=MIN_REPS, warmup=WARMUP):
    return (f"CUDA events around {what}; {warmup} warm-up; L2 flushed ({n_bytes >> 20} MiB written) before each "
            f"of at least {min_reps} repetitions, until {MIN_MS:.0f} ms are measured (at most {MAX_REPS}); median")


def median_ms(call, flush, min_reps=MIN_REPS, warmup=WARMUP):
    """Median ms of `call` by ktune's method (the flush, then CUDA events around one call), and every repetition."""
    import torch
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    times, total = [], 0.0
    while len(times) < MAX_REPS and (len(times) < min_reps or total < MIN_MS):
        flush.fill_(len(times) & 0xFF)  # evicts the call's tensors: every repetition reads them from DRAM
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end)
        times.append(ms)
        total += ms
    return statistics.median(times), times
