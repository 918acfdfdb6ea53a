#!/usr/bin/python3
"""timing.py without torch or a GPU (a stand-in torch whose events read a
clock the calls advance): the peers time as ktune does, the L2 flushed before
every repetition, at least 10 and more until 50 ms are measured, at most 200.

    python3 -m unittest discover -s bench/peers -p 'test_*.py'
"""
import os
import sys
import types
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import timing  # noqa: E402


class FakeTorch:
    """torch.cuda's events and synchronize over a clock in ms that each call advances."""

    def __init__(self):
        self.now = 0.0
        torch = self

        class Event:
            def __init__(self, enable_timing=False):
                self.at = None

            def record(self):
                self.at = torch.now

            def synchronize(self):
                pass

            def elapsed_time(self, end):
                return end.at - self.at

        self.cuda = types.SimpleNamespace(Event=Event, synchronize=lambda: None)


class Flush:
    def __init__(self, log):
        self.log = log

    def fill_(self, value):
        self.log.append("flush")


class TimingTest(unittest.TestCase):
    def setUp(self):
        self.torch = FakeTorch()
        self.saved = sys.modules.get("torch")
        sys.modules["torch"] = self.torch

    def tearDown(self):
        if self.saved is None:
            del sys.modules["torch"]
        else:
            sys.modules["torch"] = self.saved

    def run_calls(self, ms, **kw):
        log = []

        def call():
            log.append("call")
            self.torch.now += ms

        median, times = timing.median_ms(call, Flush(log), **kw)
        return median, times, log

    def test_repetitions_until_50_ms_at_least_10_at_most_200(self):
        for ms, reps in ((1.0, 50), (0.01, 200), (100.0, 10), (7.0, 10)):
            median, times, log = self.run_calls(ms)
            self.assertEqual(len(times), reps, ms)
            self.assertAlmostEqual(median, ms)
            # 3 warm-ups, unflushed; then a flush before each timed call
            self.assertEqual(log[:3], ["call"] * 3)
            self.assertEqual(log[3:], ["flush", "call"] * reps)

    def test_more_repetitions_asked(self):
        _, times, log = self.run_calls(100.0, min_reps=12, warmup=1)
        self.assertEqual(len(times), 12)
        self.assertEqual(log[0], "call")
        self.assertEqual(log[1:3], ["flush", "call"])

    def test_method_text(self):
        text = timing.method_text(120 << 20, "one call")
        self.assertIn("L2 flushed (120 MiB written) before each of at least 10 repetitions", text)
        self.assertIn("until 50 ms are measured (at most 200); median", text)


if __name__ == "__main__":
    unittest.main()
