#!/usr/bin/python3
"""The torch-free parts of torch_e2e.py: arguments, the safetensors reader on
the layout `ktune bench e2e --save-batch` writes, the model config from its
metadata, the summaries, the loss check and the table.

    python3 -m unittest discover -s bench/peers -p 'test_*.py'
"""
import json
import os
import struct
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_e2e as t  # noqa: E402


def write(path, tensors, metadata):
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text.encode() + b"".join(blobs))


class TorchE2eTest(unittest.TestCase):
    def test_arguments(self):
        a = t.parse(["--batch-file", "b.safetensors", "--mode", "eager", "--dtype", "bf16", "--with-optimizer"])
        self.assertEqual((a.mode, a.dtype, a.with_optimizer, a.warmup, a.trials), ("eager", "bf16", True, 1, 10))
        with self.assertRaises(SystemExit):
            t.parse(["--batch-file", "b", "--dtype", "f16"])
        with self.assertRaises(SystemExit):
            t.parse(["--batch-file", "b", "--trials", "0"])
        with self.assertRaises(SystemExit):
            t.parse(["--batch-file", "b", "--forward-only", "--with-optimizer"])
        self.assertEqual(t.parse(["--batch-file", "b", "--compile-mode", "reduce-overhead"]).compile_mode,
                         "reduce-overhead")
        self.assertEqual(t.parse(["--batch-file", "b"]).compile_mode, "default")
        self.assertFalse(t.parse(["--batch-file", "b"]).recompute)
        self.assertTrue(t.parse(["--batch-file", "b", "--recompute"]).recompute)
        with self.assertRaises(SystemExit):  # torch.compile's mode, not eager's
            t.parse(["--batch-file", "b", "--mode", "eager", "--compile-mode", "reduce-overhead"])

    def test_reads_the_batch_file_and_its_config(self):
        tokens = struct.pack("<6i", 1, 2, 3, 4, 5, 6)
        meta = {"format": "pt", "model": "tiny", "vocab_size": "128", "d_model": "64", "d_ff": "192",
                "num_layers": "2", "num_heads": "4", "rope_theta": "10000"}
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "b.safetensors")
            write(path, {"tokens": ("I32", [2, 3], tokens), "w": ("F32", [1], struct.pack("<f", 0.5))}, meta)
            tensors, metadata = t.read_safetensors(path)
            self.assertEqual(tensors["tokens"][:2], ("I32", [2, 3]))
            self.assertEqual(struct.unpack("<6i", tensors["tokens"][2]), (1, 2, 3, 4, 5, 6))
            self.assertEqual(struct.unpack("<f", tensors["w"][2]), (0.5,))
            self.assertEqual(t.model_config(metadata), (128, 64, 192, 2, 4, 10000.0))
            del meta["num_heads"]
            write(path, {}, meta)
            with self.assertRaisesRegex(ValueError, "num_heads"):
                t.model_config(t.read_safetensors(path)[1])
            with open(path, "wb") as f:
                f.write(struct.pack("<Q", 1000) + b"{}")
            with self.assertRaisesRegex(ValueError, "runs past the end"):
                t.read_safetensors(path)

    def test_summary_and_loss_check(self):
        self.assertIsNone(t.summary([]))
        s = t.summary([1.0, 2.0, 3.0])
        self.assertAlmostEqual(s["mean_ms"], 2.0)
        self.assertAlmostEqual(s["std_ms"], 1.0)
        self.assertEqual(s["samples_ms"], [1.0, 2.0, 3.0])
        self.assertIsNone(t.summary([2.0])["std_ms"])  # one trial has no sample std
        self.assertTrue(t.loss_check(9.2103, 9.2103 * (1 + 5e-6), "f32")[0])
        self.assertFalse(t.loss_check(9.2103, 9.2103 * (1 + 5e-5), "f32")[0])
        self.assertTrue(t.loss_check(9.2103, 9.2103 * (1 + 5e-3), "bf16")[0])
        self.assertFalse(t.loss_check(9.2103, 9.0, "bf16")[0])
        # ktune's NaN loss reaches the JSON as null: a mismatch, with no difference to print.
        self.assertEqual(t.loss_check(None, 9.2103, "bf16"), (False, None))
        self.assertEqual(t.loss_check(float("nan"), 9.2103, "f32"), (False, None))
        self.assertEqual(t.loss_check(9.2103, float("nan"), "f32"), (False, None))

    def test_settings_say_what_is_not_pytorchs_default(self):
        self.assertIn("foreach=False", t.settings("eager", "f32"))
        self.assertIn("PyTorch's default is foreach=True", t.settings("eager", "f32"))
        self.assertIn("fused=True", t.settings("compiled", "bf16"))
        self.assertIn("bf16 autocast", t.settings("compiled", "bf16"))
        self.assertIn("TF32 matmuls on", t.settings("compiled", "tf32"))

    def test_table_has_the_seed_columns(self):
        r = {"backend": "torch 2.5", "mode": "compiled", "dtype": "float32", "batch_size": 4, "model": "small",
             "context_length": 256, "forward": {"mean_ms": 12.0, "std_ms": 0.5}, "backward": None,
             "forward_backward": None, "optimizer": None, "step": None, "device_peak_bytes": 2**31, "loss": 9.25}
        lines = t.table([r]).splitlines()
        self.assertIn("fwd avg (sec)", lines[0])
        self.assertEqual(lines[0].count("|"), lines[1].count("|"))
        self.assertEqual(lines[0].count("|"), lines[2].count("|"))
        self.assertIn("| 0.012000 | 0.000500 | - |", lines[2])
        r["forward"] = t.summary([12.0])
        self.assertIn("| 0.012000 | - | - |", t.table([r]).splitlines()[2])
        self.assertIn("2.00 GiB | 9.250000 |", lines[2])
        self.assertIn("| compiled | float32 |", lines[2])
        r["recompute"] = True  # the peer's own JSON says so
        self.assertIn("| compiled, recomputed | float32 |", t.table([r]).splitlines()[2])
        r["recompute"] = "none"  # ktune's names its level
        self.assertIn("| compiled | float32 |", t.table([r]).splitlines()[2])
        r["recompute"] = "swiglu"
        self.assertIn("| compiled, recompute swiglu | float32 |", t.table([r]).splitlines()[2])
        r["graphs"] = True  # ktune's run with --graph, beside torch.compile's reduce-overhead
        self.assertIn("| compiled (CUDA graphs), recompute swiglu | float32 |", t.table([r]).splitlines()[2])
        # ktune's NaN loss (null in its JSON) is printed, not raised on.
        r["loss"] = None
        self.assertIn("| NaN |", t.table([r]).splitlines()[2])
        del r["loss"]  # a row with no loss at all
        self.assertIn("GiB | - |", t.table([r]).splitlines()[2])


if __name__ == "__main__":
    unittest.main()
