#!/usr/bin/env python3
"""Kernel Tuner's own strategies on recorded tuning spaces (simulation mode),
scored like `ktune replay`: per evaluation budget, the median and p25/p75 of
the fraction of the optimum reached (optimum time / best time found), and the
evaluations each run needed to reach a target fraction (default 95 %).

Needs `pip install kernel_tuner` (tested with 1.5.0). Usage:
  kernel_tuner_replay.py --dataset F.json.gz --strategy genetic_algorithm,dual_annealing \
      --budget 25,50,100,200,400,5%,10%,25% --runs 50 [--json]

A budget is a count of evaluations (100), or recorded evaluation time: a share
of the brute-force time (10%: the summed compile + verification + benchmark
time of every recorded configuration) or seconds (600s), charged per unique
configuration as ktune's replay charges it.

Each run gets its own seed (seed + run) for Python's and NumPy's generators,
and a budget of max_fevals = the largest evaluation budget (Kernel Tuner
counts unique configurations, as ktune does), raised with --max-fevals when
time budgets need more evaluations; a time budget a run did not reach is
scored at its last evaluation (a lower bound, reported in "short_runs"). The search space is restricted to the
configurations recorded in the file, as ktune's replay evaluator does.
"""
import argparse
import gzip
import json
import math
import os
import random
import sys
import tempfile
import time
import warnings


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def quartiles(values):
    v = sorted(values)
    def at(p):
        pos = p * (len(v) - 1)
        lo = int(math.floor(pos))
        hi = min(lo + 1, len(v) - 1)
        if pos == lo:
            return v[lo]  # a run's own value, whatever follows it
        if math.isinf(v[hi]):
            return v[hi]
        return v[lo] + (pos - lo) * (v[hi] - v[lo])
    q = {"p25": at(0.25), "median": at(0.5), "p75": at(0.75), "median_ci95": None}
    rank = median_interval_rank(len(v))
    if rank:
        q["median_ci95"] = [v[rank - 1], v[len(v) - rank]]
    return q


def median_interval_rank(n):
    """As ktune replay's (search/replay_study.hpp): the 1-based rank l of the lower end of the median's
    distribution-free 95 % interval [x_l, x_(n+1-l)], the largest with P(Bin(n, 1/2) <= l - 1) <= 0.025; 0 for
    too few values."""
    below, rank = 0.0, 0
    while rank < n // 2:
        step = below + math.comb(n, rank) / 2.0 ** n
        if step > 0.025:
            break
        below, rank = step, rank + 1
    return rank


def finite(v):
    return v if math.isfinite(v) else None


def cost_s(entry):
    ms = lambda f: entry[f] if isinstance(entry.get(f), (int, float)) else 0.0
    return (ms("compile_time") + ms("verification_time") + ms("benchmark_time")) / 1000.0


def parse_budget(text, brute_force_s):
    """(is_time, amount): evaluations, or seconds of recorded time."""
    if text.endswith("%"):
        return True, float(text[:-1]) / 100.0 * brute_force_s
    if text.endswith("s"):
        return True, float(text[:-1])
    return False, int(text)


def is_time(x):
    return isinstance(x, (int, float)) and math.isfinite(x) and x < 1e20


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--strategy", default="random_sample")
    ap.add_argument("--budget", default="25,50,100,200,400")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--target", type=float, default=0.95)
    ap.add_argument("--max-fevals", type=int, default=0,
                    help="evaluations per run when time budgets need more than the largest evaluation budget")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import kernel_tuner
    import numpy as np  # with Kernel Tuner, which needs it; the statistics above do not
    warnings.simplefilter("ignore")

    data = load(args.dataset)
    keys = data["tune_params_keys"]
    tune_params = {k: data["tune_params"][k] for k in keys}
    cache = data["cache"]
    recorded = set(cache.keys())
    optimum = min(e["time"] for e in cache.values() if is_time(e.get("time")))
    costs = {k: cost_s(e) for k, e in cache.items()}
    brute_force_s = sum(costs.values())
    labels = args.budget.split(",")
    budgets = [parse_budget(b, brute_force_s) for b in labels]
    max_budget = max([int(a) for t, a in budgets if not t] or [0])
    max_fevals = max(max_budget, args.max_fevals)

    # Kernel Tuner reads plain JSON caches only, and re-reads the file every
    # run: drop the per-repetition "times" lists it does not use in simulation.
    for e in cache.values():
        e.pop("times", None)
    tmpdir = tempfile.mkdtemp(prefix="kt-replay-")
    cachefile = os.path.join(tmpdir, "cache.json")
    with open(cachefile, "w") as f:
        json.dump(data, f)

    def recorded_only(p):
        return ",".join(str(p[k]) for k in keys) in recorded

    problem_size = data.get("problem_size", [1])
    out = {"dataset": args.dataset, "device": data.get("device_name"), "optimum_ms": optimum,
           "brute_force_s": brute_force_s,
           "runs": args.runs, "target": args.target, "max_fevals": max_fevals, "kernel_tuner": kernel_tuner.__version__,
           "strategies": []}
    if not args.json:
        print(f"{args.dataset}: {data.get('kernel_name')} on {data.get('device_name')}, "
              f"{len(cache)} recorded, optimum {optimum:.4f} ms, brute force {brute_force_s:.0f} s, {args.runs} runs, "
              f"Kernel Tuner {kernel_tuner.__version__}\n")
    for strategy in args.strategy.split(","):
        start = time.time()
        fractions = {b: [] for b in labels}
        short = {b: 0 for b in labels}
        to_target = []
        for run in range(args.runs):
            random.seed(args.seed + run)
            np.random.seed(args.seed + run)
            devnull = open(os.devnull, "w")
            saved = sys.stdout
            sys.stdout = devnull
            try:
                results, _ = kernel_tuner.tune_kernel(
                    data.get("kernel_name", "kernel"), "__global__ void k() {}", problem_size, [], tune_params,
                    restrictions=recorded_only, strategy=strategy, strategy_options={"max_fevals": max_fevals},
                    cache=cachefile, simulation_mode=True, quiet=True)
            finally:
                sys.stdout = saved
                devnull.close()
            seen, best_after, cost_after, best, spent = set(), [], [], math.inf, 0.0
            for r in results:
                key = ",".join(str(r[k]) for k in keys)
                if key in seen:
                    continue
                seen.add(key)
                if is_time(r.get("time")):
                    best = min(best, r["time"])
                spent += costs.get(key, 0.0)
                best_after.append(best)
                cost_after.append(spent)
            for label, (timed, amount) in zip(labels, budgets):
                found = math.inf
                for i, t in enumerate(best_after):
                    if (cost_after[i] if timed else i + 1) > amount:
                        break
                    found = t
                if timed and (not cost_after or cost_after[-1] < amount):
                    short[label] += 1
                fractions[label].append(optimum / found if math.isfinite(found) else 0.0)
            reached = next((i + 1 for i, t in enumerate(best_after) if math.isfinite(t) and optimum / t >= args.target),
                           math.inf)
            to_target.append(reached)
        elapsed = time.time() - start
        q_target = quartiles(to_target)
        n_reached = sum(1 for v in to_target if math.isfinite(v))
        entry = {"strategy": strategy, "wall_s": elapsed, "runs_reaching_target": n_reached,
                 "evals_to_target": {k: (finite(v) if k != "median_ci95" else
                                         None if v is None else [finite(x) for x in v])
                                     for k, v in q_target.items()},
                 # per run, so that runs over other seeds can be pooled with these
                 "evals_to_target_runs": [v if math.isfinite(v) else None for v in to_target],
                 "budgets": [{"budget": b, "fraction_of_optimum": quartiles(fractions[b]), "short_runs": short[b],
                              "fraction_runs": fractions[b]}
                             for b in labels]}
        out["strategies"].append(entry)
        if args.json:
            continue
        print(f"strategy {strategy}  ({elapsed:.1f} s)")
        print(f"  {'budget':>8}  {'median':>8}  {'p25':>8}  {'p75':>8}   (fraction of optimum)")
        for b in labels:
            q = quartiles(fractions[b])
            note = f"   ({short[b]} runs stopped short of it)" if short[b] else ""
            print(f"  {b:>8}  {q['median']:>8.3f}  {q['p25']:>8.3f}  {q['p75']:>8.3f}{note}")
        fmt = lambda v: f"{v:.0f}" if math.isfinite(v) else f">{max_fevals}"
        ci = q_target["median_ci95"]
        ci_text = f" (95% CI {fmt(ci[0])} to {fmt(ci[1])})" if ci else ""
        print(f"  evaluations to {args.target * 100:.0f}% of optimum: median {fmt(q_target['median'])}{ci_text}, "
              f"p25 {fmt(q_target['p25'])}, p75 {fmt(q_target['p75'])} ({n_reached}/{args.runs} runs reached it)\n")
    if args.json:
        print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
