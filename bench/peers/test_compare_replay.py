"""compare_replay.py: its ranks, its Mann-Whitney test (against scipy where it is installed) and its pairing of
ktune's runs with Kernel Tuner's.

    python3 -m unittest discover -s bench/peers -p 'test_*.py'
"""
import math
import os
import random
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_replay as cr  # noqa: E402


class CompareReplayTest(unittest.TestCase):
    def test_ktune_runs_past_kernel_tuners_window_never_reached_it(self):
        ktune = {"dataset": "x/s.json.gz", "strategies": [{
            "strategy": "auto", "evals_to_target": {"median": 150},
            "runs_to_target": {"evaluations": [100, 150, 900]}}]}
        kt = {"max_fevals": 800, "strategies": [{
            "strategy": "ga", "evals_to_target": {"median": 300}, "evals_to_target_runs": [200, 300, None]}]}
        capped = cr.compare(ktune, kt, 200, random.Random(1))
        kt.pop("max_fevals")
        uncapped = cr.compare(ktune, kt, 200, random.Random(1))
        # The run at 900 ties with Kernel Tuner's run that never reached it, where it was counted a win.
        self.assertGreater(capped["p_less"], uncapped["p_less"])

    def test_ranks_share_ties(self):
        r, ties = cr.ranks([3.0, 1.0, 3.0, math.inf, 2.0, math.inf])
        self.assertEqual(r, [3.5, 1.0, 3.5, 5.5, 2.0, 5.5])
        self.assertEqual(sorted(ties), [1, 1, 2, 2])

    def test_mann_whitney_sides(self):
        rng = random.Random(7)
        low = [rng.randint(1, 50) for _ in range(200)]
        high = [v + 20 for v in low]
        self.assertLess(cr.mann_whitney_less(low, high), 1e-6)
        self.assertGreater(cr.mann_whitney_less(high, low), 0.999)
        same = cr.mann_whitney_less(low, list(low))
        self.assertGreater(same, 0.4)
        self.assertLess(same, 0.6)

    def test_mann_whitney_as_scipy(self):
        try:
            from scipy.stats import mannwhitneyu
        except ImportError:
            self.skipTest("scipy is not installed")
        rng = random.Random(3)
        for _ in range(5):
            a = [rng.choice([rng.randint(1, 300), math.inf]) for _ in range(150)]
            b = [rng.choice([rng.randint(20, 400), math.inf]) for _ in range(170)]
            want = mannwhitneyu([1e12 if math.isinf(v) else v for v in a],
                                [1e12 if math.isinf(v) else v for v in b], alternative="less").pvalue
            self.assertAlmostEqual(cr.mann_whitney_less(a, b), want, places=12)

    def test_pairing_counts_unreached_runs_as_slowest(self):
        ktune = {"dataset": "../shared/replay/x_A100.json.gz",
                 "strategies": [{"strategy": "auto", "evals_to_target": {"median": 10, "median_ci95": [9, 11]},
                                 "runs_to_target": {"evaluations": [10.0] * 30}}]}
        kt = {"strategies": [{"strategy": "pso", "evals_to_target": {"median": 12, "median_ci95": None},
                              "evals_to_target_runs": [12] * 20 + [None] * 10}]}
        row = cr.compare(ktune, kt, 200, random.Random(1))
        self.assertEqual(row["space"], "x_A100")
        self.assertEqual(row["ktune"], "auto 10 (9–11)")
        self.assertEqual(row["kernel_tuner"], "pso 12")
        self.assertAlmostEqual(row["ratio"], 1.2)
        self.assertLess(row["p_less"], 1e-6)
        self.assertEqual(row["runs"], [30, 30])


if __name__ == "__main__":
    unittest.main()
