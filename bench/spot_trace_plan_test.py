"""The pure parts of bench/spot_trace_bench.py: reading a trace, choosing a
prefix, mapping trace machines to local agents, counting kept and rolled-back
samples from --log-samples files, idle seconds. No process is started."""

import math
import os
import sys
import tempfile
import types
import unittest

try:
    import psutil  # noqa: F401
except ImportError:  # the interpreter Bazel picks may lack it; nothing here needs it
    sys.modules["psutil"] = types.ModuleType("psutil")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import spot_trace_bench as bench  # noqa: E402

TRACE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "traces", "p3-trace.csv")


def replay_plan(actions):
    """Applies the actions; fails on a remove of an agent that is not live or
    an add of one that was. Returns the live agents after each timestamp."""
    live, after = set(), {}
    for ms, action, agent in actions:
        if action == "add":
            assert agent not in live, (ms, agent)
            live.add(agent)
        else:
            assert agent in live, (ms, agent)
            live.remove(agent)
        after[ms] = len(live)
    return after


class PlanTest(unittest.TestCase):
    def test_p3_trace_as_documented(self):
        events = bench.read_trace(TRACE)
        self.assertEqual(len(events), 344)
        self.assertEqual(sum(1 for e in events if e[1] == "add"), 177)
        self.assertEqual(bench.peak_machines(events), 32)
        self.assertAlmostEqual(events[-1][0] / 3.6e6, 11.37, places=2)

    def test_p3_world_follows_the_scaled_machine_count(self):
        events = bench.read_trace(TRACE)
        actions, timeline = bench.local_plan(events, 8, 32)
        after = replay_plan(actions)
        # After the events of each timestamp: the target, never above 8.
        expected = {}
        live = set()
        for ms, op, node in events:
            (live.add if op == "add" else live.discard)(node)
            expected[ms] = min(8, math.ceil(len(live) / 4))
        world = 0
        changes = dict(timeline)
        for ms in sorted(expected):
            world = after.get(ms, world)
            self.assertEqual(world, expected[ms], ms)
            self.assertLessEqual(world, 8)
            if ms in changes:
                self.assertEqual(changes[ms], world)
        self.assertEqual(sum(1 for a in actions if a[1] == "add"), 39)
        self.assertEqual(sum(1 for a in actions if a[1] == "remove"), 36)

    def test_a_removed_machine_takes_its_own_agent_when_the_world_shrinks(self):
        start = [(0, "add", "a"), (0, "add", "b")]
        without_b, timeline = bench.local_plan(start + [(10, "remove", "b")], 2, 2)
        without_a, _ = bench.local_plan(start + [(10, "remove", "a")], 2, 2)
        self.assertEqual(timeline, [(0, 2), (10, 1)])
        self.assertEqual(without_b[2][:2], (10, "remove"))
        self.assertEqual(without_a[2][:2], (10, "remove"))
        # Each machine is bound to an agent of its own: the trace's victim.
        self.assertNotEqual(without_b[2][2], without_a[2][2])

    def test_an_agent_outlives_its_machine_while_the_target_holds(self):
        # Peak 4 machines -> 2 agents: target ceil(n / 2).
        events = [(0, "add", m) for m in "abcd"] + [(5, "remove", "d")]
        actions, timeline = bench.local_plan(events, 2, 4)
        self.assertEqual([a[1] for a in actions], ["add", "add"])
        self.assertEqual(timeline, [(0, 2)])
        # 2 machines -> 1 agent; 1 machine still -> 1 (ceil); none -> 0.
        events += [(9, "remove", "b"), (12, "remove", "a"), (15, "remove", "c")]
        actions, timeline = bench.local_plan(events, 2, 4)
        self.assertEqual([a[1] for a in actions], ["add", "add", "remove", "remove"])
        self.assertEqual(timeline, [(0, 2), (9, 1), (15, 0)])
        replay_plan(actions)

    def test_prefix(self):
        events = [(0, "add", "a"), (100, "add", "b"), (300, "remove", "a")]
        self.assertEqual(bench.select_prefix(events, 2), (events[:2], 300))
        self.assertEqual(bench.select_prefix(events, 0, 200), (events[:2], 200))
        self.assertEqual(bench.select_prefix(events), (events, 300))

    def test_seconds_at_world(self):
        spent = bench.seconds_at_world([(0, 2), (1000, 3)], 4000, 2.0)
        self.assertEqual(spent, {2: 0.5, 3: 1.5})

    def test_idle_seconds(self):
        self.assertEqual(bench.idle_seconds([100.2, 100.7, 103.5], 100.0, 105.0), 3)


class AccountingTest(unittest.TestCase):
    def test_a_rollback_discards_the_steps_after_the_restored_point(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "samples-1.log"), "w") as f:
                f.write("G 1 0 0 0 2\nS 1 0 0 1 2\nS 1 0 4 5 6\nS 1 0 8 9 10\n"
                        "G 3 0 4 0 1\nS 3 0 4 5 6 7 8\n")
            with open(os.path.join(d, "samples-2.log"), "w") as f:
                f.write("G 1 0 0 1 2\nS 1 0 0 3 4\nS 1 0 4 7 8\nS 1 0 8 11 12\n")
            trained, kept = bench.ours_accounting(d)
            # Generation 3 restored position 4: generation 1's steps at 4 and
            # 8 (8 samples) were rolled back.
            self.assertEqual(trained, 16)
            self.assertEqual(kept, 8)
            # Only the steps logged before the window ended count; the
            # restore logged after it still rolls them back.
            window = {"samples-1.log": len("G 1 0 0 0 2\nS 1 0 0 1 2\nS 1 0 4 5 6\n"),
                      "samples-2.log": len("G 1 0 0 1 2\nS 1 0 0 3 4\nS 1 0 4 7 8\n")}
            self.assertEqual(bench.ours_accounting(d, window), (8, 4))


class RepeatDataTest(unittest.TestCase):
    def test_every_training_batch_is_repeated_and_the_test_batch_copied(self):
        with tempfile.TemporaryDirectory() as source, tempfile.TemporaryDirectory() as target:
            for name, data in (("data_batch_1.bin", b"ab"), ("data_batch_2.bin", b"c"),
                               ("test_batch.bin", b"t"), ("README.md", b"r")):
                with open(os.path.join(source, name), "wb") as f:
                    f.write(data)
            bench.repeat_data(source, 3, target)
            self.assertEqual(sorted(os.listdir(target)),
                             ["data_batch_1.bin", "data_batch_2.bin", "test_batch.bin"])
            with open(os.path.join(target, "data_batch_1.bin"), "rb") as f:
                self.assertEqual(f.read(), b"ababab")
            with open(os.path.join(target, "data_batch_2.bin"), "rb") as f:
                self.assertEqual(f.read(), b"ccc")
            with open(os.path.join(target, "test_batch.bin"), "rb") as f:
                self.assertEqual(f.read(), b"t")


if __name__ == "__main__":
    unittest.main()
