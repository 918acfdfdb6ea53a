#!/usr/bin/python3
"""torch_adam.py without torch: its arguments, its JSON (PyTorch's names, the
stamps ktune's JSON has, the method and settings), drawn by bench/plot.py.

    python3 -m unittest discover -s bench/peers -p 'test_*.py'
"""
import os
import sys
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import torch_adam as t  # noqa: E402


class TorchAdamTest(unittest.TestCase):
    def test_arguments_and_the_json_of_a_run(self):
        a = t.parse(["--tensors", "1,32", "--numel", "16384", "--json-out", "x.json"])
        self.assertEqual((a.tensors, a.numel, a.json_out), ("1,32", "16384", "x.json"))
        t.torch = types.SimpleNamespace(__version__="2.11.0", version=types.SimpleNamespace(cuda="13.0"))
        row = {"tensors": 1, "numel": 16384, "dtype": "f32", "compiled_single_tensor_adam_ms": 0.12,
               "single_tensor_adam_ms": 0.26, "fused_adam_ms": 0.11}
        j = t.report([row], "NVIDIA H200", t.method_text(120 << 20))
        self.assertEqual((j["benchmark"], j["backend"], j["device"]), ("adam", "torch 2.11.0", "NVIDIA H200"))
        for key in ("date", "git_revision", "nvidia_driver", "cuda_runtime", "settings", "method"):
            self.assertIn(key, j)
        self.assertIn("foreach=False", j["settings"])
        self.assertIn("L2 flushed (120 MiB written)", j["method"])

        import plot
        from test_plot import FakePlt  # noqa: E402  (bench/test_plot.py)
        plt = FakePlt()
        plot.plot_adam(plt, [j])
        self.assertEqual(plt.lines()["PyTorch _fused_adam (f32)"], [(16384, 0.11)])


if __name__ == "__main__":
    unittest.main()
