#!/usr/bin/python3
"""stamps.py: the peers' git revision and NVIDIA driver release (no torch).

    python3 -m unittest discover -s bench/peers -p 'test_*.py'
"""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stamps  # noqa: E402


class StampsTest(unittest.TestCase):
    def test_driver_release_from_the_kernel_module_text(self):
        text = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Oct  2 16:12:41 UTC 2026\n"
                "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
        self.assertEqual(stamps.parse_nvidia_driver_release(text), "580.159.04")
        self.assertEqual(stamps.parse_nvidia_driver_release(
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  575.57.08  Release Build\n"), "575.57.08")
        self.assertIsNone(stamps.parse_nvidia_driver_release("GCC version:  gcc version 12.2.0\n"))
        self.assertIsNone(stamps.nvidia_driver("/nonexistent/version"))

    def test_revision_of_a_tree_without_git_is_the_prebuilt_one(self):
        with tempfile.TemporaryDirectory() as d:
            self.assertEqual(stamps.git_revision(d), "unknown")
            os.mkdir(os.path.join(d, ".gpu-prebuilt"))
            with open(os.path.join(d, ".gpu-prebuilt", "revision"), "w") as f:
                f.write("9b531d1\n")
            self.assertEqual(stamps.git_revision(d), "9b531d1")


if __name__ == "__main__":
    unittest.main()
