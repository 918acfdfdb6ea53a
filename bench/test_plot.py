#!/usr/bin/python3
"""bench/plot.py's figures without matplotlib: each plot_* function drawn on
a stand-in that records what is drawn (labels, values), on records shaped as
the benchmarks' JSON.

    python3 -m unittest discover -s bench -p 'test_plot.py'
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plot  # noqa: E402


class Recorder:
    """An axes, figure or module stand-in: any attribute is another, and a call is kept (by the attribute's name)."""

    def __init__(self, calls, name=""):
        self.calls, self.name = calls, name

    def __getattr__(self, name):
        return Recorder(self.calls, name)

    def __call__(self, *args, **kwargs):
        self.calls.append((self.name, args, kwargs))
        return Recorder(self.calls)


class Axes:
    def __init__(self, items):
        self.flat = items


class FakePlt:
    def __init__(self):
        self.calls = []

    def subplots(self, rows, cols, **kwargs):
        return Recorder(self.calls), Axes([Recorder(self.calls) for _ in range(rows * cols)])

    def lines(self):
        """{label: [(x, y), ...]} of every line drawn."""
        return {kw.get("label"): list(zip(*args)) for name, args, kw in self.calls if name == "plot"}


def adam_row(tensors, numel, **times):
    return dict(tensors=tensors, numel=numel, dtype="f32", **times)


class AdamTest(unittest.TestCase):
    def test_ktune_forms_are_named_as_ktune_kernels(self):
        rows = [adam_row(1, n, eager_chain_ms=3.0, per_tensor_fused_ms=2.0, fused_ms=1.0) for n in (1000, 4096)]
        plt = FakePlt()
        plot.plot_adam(plt, [{"benchmark": "adam", "rows": rows}])
        self.assertEqual(sorted(plt.lines()), ["ktune eager chain (adamw_eager) (f32)",
                                               "ktune fused multi-tensor (adamw) (f32)",
                                               "ktune per-tensor fused (adamw_single) (f32)"])
        self.assertEqual(plt.lines()["ktune eager chain (adamw_eager) (f32)"], [(1000, 3.0), (4096, 3.0)])

    def test_files_written_before_the_keys_were_renamed_read_as_ktune_forms(self):
        rows = [adam_row(2, 1000, single_tensor_eager_ms=3.0, compiled_single_tensor_ms=2.0, fused_ms=1.0)]
        plt = FakePlt()
        plot.plot_adam(plt, [{"benchmark": "adam", "rows": rows}])
        lines = plt.lines()
        self.assertEqual(lines["ktune eager chain (adamw_eager) (f32)"], [(1000, 3.0)])
        self.assertEqual(lines["ktune per-tensor fused (adamw_single) (f32)"], [(1000, 2.0)])
        self.assertFalse(any("single tensor" in label or "compiled" in label for label in lines))

    def test_pytorchs_forms_from_the_peer_keep_pytorchs_names_beside_ktunes(self):
        ktune = {"benchmark": "adam", "rows": [adam_row(1, 1000, eager_chain_ms=3.0, per_tensor_fused_ms=2.0,
                                                        fused_ms=1.0)]}
        torch = {"benchmark": "adam", "backend": "torch 2.11.0", "rows": [
            adam_row(1, 1000, single_tensor_adam_ms=9.0, compiled_single_tensor_adam_ms=8.0, fused_adam_ms=7.0)]}
        plt = FakePlt()
        plot.plot_adam(plt, [ktune, torch])
        lines = plt.lines()
        self.assertEqual(lines["PyTorch _single_tensor_adam (f32)"], [(1000, 9.0)])
        self.assertEqual(lines["PyTorch _fused_adam (f32)"], [(1000, 7.0)])
        self.assertEqual(lines["ktune fused multi-tensor (adamw) (f32)"], [(1000, 1.0)])
        self.assertEqual(len(lines), 6)


class E2eTest(unittest.TestCase):
    def test_a_median_with_p20_to_p80_of_its_trials_not_the_std(self):
        step = {"mean_ms": 3.0, "std_ms": 1.58, "median_ms": 3.0, "samples_ms": [1.0, 2.0, 3.0, 4.0, 5.0]}
        below, above = plot.spread(step)
        self.assertAlmostEqual(below, 1.2)
        self.assertAlmostEqual(above, 1.2)
        self.assertEqual(plot.spread({"mean_ms": 3.0, "std_ms": 1.58, "median_ms": 3.0}), (0.0, 0.0))
        plt = FakePlt()
        plot.plot_e2e(plt, [{"benchmark": "e2e", "context_length": 16, "step": step}])
        (name, args, kw), = [c for c in plt.calls if c[0] == "bar"]
        self.assertEqual(args[1], [3.0])
        self.assertAlmostEqual(kw["yerr"][0][0], 1.2)
        self.assertAlmostEqual(kw["yerr"][1][0], 1.2)

    def test_a_label_names_ktunes_recompute_level_and_the_peers_flag(self):
        row = {"backend": "cuda", "mode": "compiled", "dtype": "bf16", "model": "small", "context_length": 256}
        self.assertNotIn("recompute", plot.e2e_label(dict(row, recompute="none")))
        self.assertIn("compiled bf16, recompute blocks", plot.e2e_label(dict(row, recompute="blocks")))
        self.assertIn("compiled bf16, recomputed", plot.e2e_label(dict(row, backend="torch 2.11", recompute=True)))
        self.assertNotIn("recompute", plot.e2e_label(dict(row, backend="torch 2.11", recompute=False)))


class OpsTest(unittest.TestCase):
    def setUp(self):
        self.faked = False
        try:
            import matplotlib.ticker  # noqa: F401
        except ImportError:  # plot_ops' tick helpers: a stand-in where there is no matplotlib
            import types
            fake = types.ModuleType("matplotlib")
            fake.ticker = Recorder([])
            sys.modules["matplotlib"] = fake
            self.faked = True

    def tearDown(self):
        if self.faked:
            sys.modules.pop("matplotlib", None)

    def test_without_a_floor_the_times_themselves(self):
        rows = [{"family": "rmsnorm_fwd", "model": "tiny", "context_length": 16, "fused_ms": 2.0, "eager_ms": 6.0,
                 "floor_ms": None}]
        plt = FakePlt()
        fig, title = plot.plot_ops(plt, [{"benchmark": "ops", "rows": rows}])
        self.assertIn("no floor", title)
        bars = [args[1] for name, args, kw in plt.calls if name == "bar"]
        self.assertEqual(bars, [[2.0], [6.0]])
        rows[0]["floor_ms"] = 0.5
        plt = FakePlt()
        plot.plot_ops(plt, [{"benchmark": "ops", "rows": rows}])
        self.assertEqual([args[1] for name, args, kw in plt.calls if name == "bar"], [[4.0], [12.0]])


class OutputTest(unittest.TestCase):
    def test_a_missing_or_unwritable_folder_is_one_line_and_exit_2(self):
        import contextlib
        import io
        import json
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            data = os.path.join(d, "adam.json")
            with open(data, "w") as f:
                json.dump({"benchmark": "adam", "rows": [adam_row(1, 1000, fused_ms=1.0)]}, f)
            for out, why in ((os.path.join(d, "missing", "x.png"), "does not exist"),
                             (os.path.join(d, "locked", "x.png"), "is not writable")):
                os.makedirs(os.path.join(d, "locked"), mode=0o500, exist_ok=True)
                err = io.StringIO()
                with contextlib.redirect_stderr(err):
                    code = plot.main([out, data])
                if why == "is not writable" and os.access(os.path.dirname(out), os.W_OK):
                    continue  # root writes anywhere: nothing to refuse
                self.assertEqual(code, 2)
                self.assertEqual(err.getvalue().count("\n"), 1)
                self.assertIn(why, err.getvalue())
                self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    unittest.main()
