#!/usr/bin/env python3
"""ktune's search against Kernel Tuner's on one recorded space, run by run:
the evaluations each of ktune replay's runs needed to reach the target
(`ktune replay --json`: runs_to_target.evaluations) beside those of Kernel
Tuner's runs (`kernel_tuner_replay.py --json`: evals_to_target_runs), both
over seeded runs of one space. Prints, per pair, each median with its 95 %
interval (as the two tools give it), the ratio of the medians (Kernel Tuner's
over ktune's) with a 95 % bootstrap interval, and the one-sided Mann-Whitney
p-value that ktune's runs need fewer evaluations. A run that never reached
the target counts as needing more than any run that did (ties among them);
so does a ktune run that reached it past the evaluations Kernel Tuner's runs
were allowed (its JSON's max_fevals), which no run of Kernel Tuner's could.

Standard library only. Usage:
  compare_replay.py KTUNE.json KERNEL_TUNER.json [KTUNE.json KERNEL_TUNER.json ...] [--bootstrap 4000] [--seed 1]
"""
import argparse
import json
import math
import random
import statistics
import sys

NEVER = math.inf


def runs(values):
    """Evaluations per run, a run that never reached the target (None) as infinity."""
    return [NEVER if v is None else float(v) for v in values]


def ranks(values):
    """Mid-ranks (1-based; ties share the mean of their ranks) and the tie groups' sizes."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out, ties = [0.0] * len(values), []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2.0 + 1
        ties.append(j - i + 1)
        i = j + 1
    return out, ties


def mann_whitney_less(a, b):
    """One-sided p-value that `a` is stochastically less than `b`: the normal approximation with the tie
    correction and the continuity correction (as scipy.stats.mannwhitneyu(a, b, alternative='less') gives it
    where there are ties or either sample is large)."""
    n1, n2 = len(a), len(b)
    r, ties = ranks(a + b)
    u1 = sum(r[:n1]) - n1 * (n1 + 1) / 2.0
    u = n1 * n2 - u1  # large where a's values are small
    n = n1 + n2
    mu = n1 * n2 / 2.0
    var = n1 * n2 / 12.0 * ((n + 1) - sum(t ** 3 - t for t in ties) / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = (u - mu - 0.5) / math.sqrt(var)
    return 0.5 * math.erfc(z / math.sqrt(2))


def median_ratio_interval(a, b, draws, rng):
    """The ratio median(b) / median(a), and its 95 % percentile-bootstrap interval (the draws where either median
    is a run that never reached the target left out); None where a median never reached it."""
    def ratio(x, y):
        mx, my = statistics.median(x), statistics.median(y)
        return my / mx if math.isfinite(mx) and math.isfinite(my) and mx > 0 else None
    found = ratio(a, b)
    if found is None:
        return None, None, None
    samples = sorted(r for r in (ratio(rng.choices(a, k=len(a)), rng.choices(b, k=len(b))) for _ in range(draws))
                     if r is not None)
    if not samples:
        return found, None, None
    return found, samples[int(0.025 * len(samples))], samples[max(0, int(math.ceil(0.975 * len(samples))) - 1)]


def interval(e):
    ci = e.get("median_ci95")
    return f"{e['median']:g} ({ci[0]:g}–{ci[1]:g})" if ci else f"{e['median']:g}"


def compare(ktune_doc, kt_doc, draws, rng):
    k = ktune_doc["strategies"][0]
    t = kt_doc["strategies"][0]
    a, b = runs(k["runs_to_target"]["evaluations"]), runs(t["evals_to_target_runs"])
    window = kt_doc.get("max_fevals")
    if window:  # the same window for both: past it, a run of Kernel Tuner's never reached the target
        a = [v if v <= window else NEVER for v in a]
    ratio, low, high = median_ratio_interval(a, b, draws, rng)
    return {
        "space": ktune_doc["dataset"].rsplit("/", 1)[-1].replace(".json.gz", "").replace(".json", ""),
        "ktune": f"{k['strategy']} {interval(k['evals_to_target'])}",
        "kernel_tuner": f"{t['strategy']} {interval(t['evals_to_target'])}",
        "ratio": ratio, "ratio_ci95": [low, high],
        "p_less": mann_whitney_less(a, b),
        "runs": [len(a), len(b)],
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", help="pairs: ktune replay --json output, then kernel_tuner_replay.py --json's")
    p.add_argument("--bootstrap", type=int, default=4000, help="bootstrap draws for the ratio's interval")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if len(args.files) % 2:
        p.error("give the files in pairs: ktune's, then Kernel Tuner's")
    rng = random.Random(args.seed)
    rows = []
    for i in range(0, len(args.files), 2):
        with open(args.files[i]) as f, open(args.files[i + 1]) as g:
            rows.append(compare(json.load(f), json.load(g), args.bootstrap, rng))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print("| space | ktune: median (95 % CI) | Kernel Tuner: median (95 % CI) | Kernel Tuner / ktune, "
          "ratio of medians (95 % bootstrap CI) | one-sided Mann-Whitney p (ktune needs fewer) |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        if r["ratio_ci95"][0] is not None:
            ratio += f" ({r['ratio_ci95'][0]:.2f}–{r['ratio_ci95'][1]:.2f})"
        print(f"| {r['space']} | {r['ktune']} | {r['kernel_tuner']} | {ratio} | {r['p_less']:.2g} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
