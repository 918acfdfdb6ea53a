"""kernel_tuner_replay.py's statistics, as ktune replay computes them (search/replay_study.cpp)."""
import math
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_tuner_replay  # noqa: E402


class Quartiles(unittest.TestCase):
    def test_a_position_on_a_run_that_reached_the_target_is_its_value(self):
        never = math.inf
        self.assertEqual(kernel_tuner_replay.quartiles([142, 28, never])["median"], 142)
        q = kernel_tuner_replay.quartiles([142, 28, never, never, 149])
        self.assertEqual(q["median"], 149)
        self.assertEqual(q["p25"], 142)
        self.assertTrue(math.isinf(kernel_tuner_replay.quartiles([142, 28, never, never])["median"]))
        self.assertEqual(kernel_tuner_replay.quartiles([1, 2, 3, 4])["median"], 2.5)


if __name__ == "__main__":
    unittest.main()
