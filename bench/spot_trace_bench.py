"""Goodput on a spot trace: a public preemption trace replayed on this machine
against our elastic trainer and against torchrun elastic with the PyTorch DDP
peer (bench/ddp_peer.py), same model, batch, data and per-worker settings, and
both measured against the ideal of the same run.

  /usr/bin/python3 bench/spot_trace_bench.py --trace bench/traces/p3-trace.csv \
      --ours bazel-bin/examples/cifar/cifar --data-dir ../shared/data/cifar10-subset

  --repeat-data 12 trains on the subset's batches repeated 12 times (48,816
  images, epochs of about half a minute at 8 workers), the long epochs of a
  real job; both systems get the same files.

The trace
  Oobleck's format (tools/simulator/traces/*.csv): one event a line,
  `milliseconds,add|remove,nodeN`. bench/traces/p3-trace.csv (AWS p3, MIT) has
  344 events over 11.37 hours, 177 machines of which at most 32 at once.
  `--events N` / `--until-ms MS` replay only a prefix.

Time compression
  Trace time runs --speedup times faster than wall time. By default the speedup
  is chosen so that the replayed part takes --replay-minutes (15) per system:
  45x for the whole p3 trace, so its one-minute event grid becomes 1.3 s. The
  rescale costs themselves are not compressed, so a compressed trace is harsher
  on both systems than the real one (each fault costs 45x more of the trace's
  time); the comparison is between the systems under the same compression.

From trace machines to local workers
  Each local "machine" is one node agent with --workers-per-node workers (1):
  ours `cifar --join HOST:PORT --workers 1`, torchrun a `torch.distributed.run`
  agent with --nproc_per_node 1. The number of live local agents follows the
  trace's count of live machines n(t), scaled so that the trace's peak
  (--peak, default: the trace's own maximum, 32 for p3) maps to --max-workers
  (8 on 2 cores: one worker per core would leave too little to resize):
      target(t) = min(cap, ceil(n(t) * cap / peak)),  cap = max-workers / workers-per-node
  (p3: 10..32 machines -> 3..8 workers; ceil keeps at least one agent while
  any machine lives). Events at one timestamp are applied together. Every
  local agent is bound to one live trace machine: when that machine is
  removed and the target drops, its agent is removed (the trace's own victim);
  when the target does not drop, the agent is rebound to another live machine
  (so the trace's removals are followed whenever the target allows). If the
  target still drops (removals of unbound machines), the most recently added
  agents go; if it rises, new agents start, bound to the newly added machines.
  The world-size timeline is therefore target(t) exactly, which is what the
  ideal integrates.

Ours
  A controller-only driver that is never removed (`--controller-only
  --min-workers 1 --state-dir DIR --state-copy-every 1 --commit-every K`, a
  rendezvous timeout longer than the replay): an `add` starts a joining node
  agent with the driver's token file, a `remove` kills it: SIGKILL of its
  process group and every descendant (--remove kill, the default), or SIGTERM
  to the agent (a preemption notice: it drains its workers) and SIGKILL of
  what is left after --notice-s (--remove term; ours then gets
  --drain-timeout = notice/2). --admit-at is passed through when the binary
  has it (checked in `cifar --help`), else omitted with a note.

Torchrun
  `python3 -m torch.distributed.run --nnodes=1:CAP --nproc_per_node=1
  --rdzv_backend=c10d` per local machine. The rendezvous endpoint is a
  standalone TCPStore host process that is never removed (agents are started
  with rdzv_conf is_host=false), as a torchrun user with spot nodes must do:
  the default, the first agent hosting the store, would end the job with that
  agent. Rendezvous timings are tuned (--torchrun-rdzv-conf, default
  last_call_timeout=2, keep_alive_interval=1, keep_alive_max_attempt=2;
  torch's own defaults, 30 s and 5 s x 3, make every restart wait 30-45 s)
  and --monitor_interval is --torchrun-monitor-interval (0.5 s). The DDP peer
  writes a checkpoint every --checkpoint-every steps (default the same K as
  our commits) and at every epoch end, and every (re)started worker group
  resumes from it; --max_restarts is unlimited in effect. An add starts an
  agent (the running ones see it waiting and restart their workers into a
  bigger group), a remove kills one as for ours (the others' collectives fail
  and they restart).

Same work on both sides
  --model (resnet8), --batch-size per worker (32), one LibTorch/torch thread
  per worker (OMP_NUM_THREADS=1), lr x world, the CIFAR-10 files of --data-dir,
  --precision and --memory-format given to both (fp32, contiguous), no
  evaluation worth counting (ours evaluates 64 test images an epoch, the peer
  none).

Measures (per system, over the replay window of W wall seconds, from the first
trace event to the end of the replayed part)
  samples trained   every sample some worker trained in a step, including
                    steps later rolled back. Ours: the workers' --log-samples
                    files (one line per rank per step with its indices).
                    Torchrun: rank 0's STEP lines (samples = the step's samples
                    over all ranks; DistributedSampler pads an epoch to a
                    multiple of the world, and those few repeats count as
                    trained, not kept).
  samples kept      the job's progress at the end of the window, counted in
                    samples of its epochs (epoch x N + position), as the job
                    itself goes on from it: after the window the job runs on
                    without events until its next step (at most
                    --settle-timeout), which says whether the window's last
                    steps survive. Ours: the samples of every step logged in
                    the window that no later generation (also one after the
                    window) rolled back: a step of generation g is rolled back
                    when a later generation restored a point at or before it,
                    the rule of tests/job_checks.h. Torchrun: epoch x N +
                    samples_done of the last STEP line of the window, or, when
                    the first step after the window resumed from an earlier
                    point (a restart from the checkpoint), that point: the
                    samples up to the checkpoint its last restart resumed from
                    plus those trained after.
  kept/s            samples kept / W.
  rolled back       samples trained - samples kept: trained, then lost to a
                    rollback (ours: the steps since the last commit of a
                    generation that failed; torchrun: the steps since the last
                    checkpoint of every restart, and the part of a step that
                    its resume rounds down).
  idle s            seconds of the window (1-second bins of wall time) in
                    which no step completed: ours, the driver's per-step
                    progress lines (--log-every 1); torchrun, the STEP lines.
  ideal             fault-free samples/s r(w) of the same system at every world
                    size w of the timeline, measured in the same run (a job of
                    w workers started with all of them, --ideal-warmup s
                    skipped, then --ideal-seconds measured), integrated over the
                    timeline: ideal = sum over w of r(w) x (wall seconds at w).
  goodput           samples kept / ideal.
The last line is `goodput: ours X% of ideal, torchrun Y% of ideal,
ours/torchrun Zx` with Z = X / Y.

Other flags: --systems ours,torchrun (one side only), --keep-logs DIR (every
process's log, and ours' sample logs under DIR/ours/samples), --json FILE.
For tests: --finish stops ours after the replay the way an operator does
(SIGTERM to the driver: the job stops at its next epoch boundary with a
checkpoint in --keep-logs/ours/checkpoint and exits 3; a node is added first if
none is left) instead of killing it, so that its logs hold whole epochs;
--no-ideal skips the ideal runs.
"""

import argparse
import collections
import itertools
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rescale_bench import (HERE, LISTEN, PYTHON, RESCALE, STEP, Job, free_port,  # noqa: E402
                           ours_argv)

PROGRESS = re.compile(r"^epoch (\d+)/\d+ step (\d+)/(\d+) \(global (\d+)\)")
PARAMS = re.compile(r"params generation=(\d+) rank=\d+ world=\d+")
STARTED_WORKER = re.compile(r"started worker \d+ as pid (\d+)")
RECORD_BYTES = 3073  # CIFAR-10 binary: a label byte and 32x32x3 pixels


# --------------------------------------------------------------------------
# The trace and its local plan (pure functions)

def read_trace(path):
    """[(ms, 'add'|'remove', node)] in file order (sorted by ms)."""
    events = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            fields = line.split(",")
            if len(fields) != 3 or fields[1] not in ("add", "remove"):
                raise ValueError(f"{path}:{number}: not `ms,add|remove,node`: {line!r}")
            events.append((int(fields[0]), fields[1], fields[2]))
    if any(b[0] < a[0] for a, b in zip(events, events[1:])):
        raise ValueError(f"{path}: events are not in time order")
    return events


def select_prefix(events, count=0, until_ms=0):
    """The events replayed and the trace time (ms) the window ends at: the
    first `count` events and/or those before `until_ms`; the window ends at
    until_ms, else at the next event not replayed, else at the last event."""
    chosen = events
    if count:
        chosen = chosen[:count]
    if until_ms:
        chosen = [e for e in chosen if e[0] < until_ms]
        return chosen, until_ms
    rest = events[len(chosen):]
    end = rest[0][0] if rest else (chosen[-1][0] if chosen else 0)
    return chosen, end


def peak_machines(events):
    live, peak = set(), 0
    for _, op, node in events:
        (live.add if op == "add" else live.discard)(node)
        peak = max(peak, len(live))
    return peak


def local_plan(events, cap, peak):
    """Maps trace machines to at most `cap` local agents (module docstring).
    Returns (actions, timeline): actions [(ms, 'add'|'remove', agent id)],
    timeline [(ms, agents live from then on)]."""
    scale = min(1.0, cap / peak) if peak else 1.0
    live = []                 # live trace machines, in order of arrival
    agent_of = {}             # trace machine -> agent id
    machine_of = {}           # agent id -> trace machine
    next_id = 0
    actions, timeline = [], []
    for ms, group in itertools.groupby(events, key=lambda e: e[0]):
        group = list(group)
        removed = [node for _, op, node in group if op == "remove"]
        added = [node for _, op, node in group if op == "add"]
        for node in removed:
            if node in live:
                live.remove(node)
        live.extend(n for n in added if n not in live)
        target = min(cap, math.ceil(len(live) * scale - 1e-9))
        for node in removed:
            agent = agent_of.pop(node, None)
            if agent is None:
                continue
            if len(machine_of) > target:
                del machine_of[agent]
                actions.append((ms, "remove", agent))
            else:  # the agent lives on as another live machine
                spare = next(n for n in reversed(live) if n not in agent_of)
                agent_of[spare], machine_of[agent] = agent, spare
        while len(machine_of) > target:
            agent = max(machine_of)
            del agent_of[machine_of.pop(agent)]
            actions.append((ms, "remove", agent))
        while len(machine_of) < target:
            spare = next(n for n in reversed(live) if n not in agent_of)
            agent_of[spare], machine_of[next_id] = next_id, spare
            actions.append((ms, "add", next_id))
            next_id += 1
        if not timeline or timeline[-1][1] != len(machine_of):
            timeline.append((ms, len(machine_of)))
    return actions, timeline


def seconds_at_world(timeline, end_ms, speedup):
    """world size -> wall seconds spent at it in the replay window."""
    spent = collections.Counter()
    for (ms, world), nxt in zip(timeline, timeline[1:] + [(end_ms, None)]):
        spent[world] += max(0, min(nxt[0], end_ms) - ms) / speedup / 1000.0
    return spent


def idle_seconds(step_times, start, end):
    """1-second bins of [start, end) in which no step completed."""
    bins = max(1, math.ceil(end - start))
    busy = {int(t - start) for t in step_times if start <= t < end}
    return sum(1 for b in range(bins) if b not in busy)


# --------------------------------------------------------------------------
# Processes

class Recorded(Job):
    """A Job (bench/rescale_bench.py) whose every output line is kept, with the
    wall time it was read, in .records (read by polling, never consumed)."""

    def __init__(self, argv, log_path, env=None):
        self.records = []
        self.log_file = open(log_path, "a")
        super().__init__(argv, env=env, log=self.log_file)

    def _read(self):
        for line in self.proc.stdout:
            now = time.time()
            self.log_file.write(f"{now:.3f} {line}")
            self.log_file.flush()
            self.records.append((now, line.rstrip("\n")))

    def find(self, predicate, since=0.0):
        for when, line in list(self.records):
            if when >= since:
                found = predicate(line)
                if found:
                    return when, found
        return None

    def wait(self, predicate, timeout, since=0.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            found = self.find(predicate, since)
            if found:
                return found
            if self.proc.poll() is not None:
                time.sleep(0.2)  # the last lines
                found = self.find(predicate, since)
                if found:
                    return found
                raise RuntimeError(f"{os.path.basename(self.argv[0])} exited with "
                                   f"{self.proc.returncode} before the expected line")
            time.sleep(0.05)
        raise TimeoutError(f"no expected line within {timeout:.0f} s")

    def alive(self):
        return self.proc.poll() is None

    def kill_tree(self, sig=signal.SIGKILL):
        """`sig` to the process group and every descendant (a torchrun agent's
        or node agent's workers may sit in groups of their own)."""
        try:
            tree = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            tree = []
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass
        for child in tree:
            try:
                child.send_signal(sig)
            except psutil.NoSuchProcess:
                pass

    def close(self):
        self.kill_tree()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.reader.join(timeout=5)
        self.log_file.close()


def train_samples(args):
    """Samples of an epoch: CIFAR-10 images, or (--task gpt) windows of train.bin
    as both sides cut them (trainer/data/token_stream.h, bench/gpt_peer.py)."""
    if args.task == "gpt":
        with open(os.path.join(args.data_dir, "meta.json")) as f:
            width = 2 if json.load(f)["dtype"] == "uint16" else 4
        tokens = os.path.getsize(os.path.join(args.data_dir, "train.bin")) // width
        return (tokens - args.context) // args.context
    data_dir = args.data_dir
    return sum(os.path.getsize(os.path.join(data_dir, f)) // RECORD_BYTES
               for f in sorted(os.listdir(data_dir)) if re.match(r"data_batch_\d+\.bin$", f))


def repeat_data(source, times, target):
    """A CIFAR-10 binary directory whose every training batch is `source`'s
    repeated `times` times (test_batch.bin copied as is): epochs `times` longer,
    the same images. Returns `target`."""
    os.makedirs(target, exist_ok=True)
    for name in sorted(os.listdir(source)):
        path = os.path.join(source, name)
        if re.match(r"data_batch_\d+\.bin$", name):
            with open(path, "rb") as f:
                records = f.read()
            with open(os.path.join(target, name), "wb") as out:
                for _ in range(times):
                    out.write(records)
        elif name == "test_batch.bin":
            shutil.copyfile(path, os.path.join(target, name))
    return target


def vocab_size(data_dir):
    with open(os.path.join(data_dir, "meta.json")) as f:
        return json.load(f)["vocab_size"]


def peer_argv(args):
    """The torchrun peer's script and flags for --task: the same work as ours."""
    if args.task == "gpt":
        return [os.path.join(HERE, "gpt_peer.py"), f"--init={args.model_file}",
                f"--context={args.context}", "--per-worker-batch", "--lr=1e-3",
                "--warmup-steps=100", "--decay-steps=1000000000", "--no-eval"]
    return [os.path.join(HERE, "ddp_peer.py"), f"--model={args.model}", "--threads=1",
            "--no-eval", f"--precision={args.precision}", f"--memory-format={args.memory_format}"]


def task_label(args):
    return f"a GPT ({os.path.basename(args.model_file)}) on tokens" if args.task == "gpt" \
        else args.model


def ours_has_flag(binary, flag):
    said = subprocess.run([binary, "--help"], capture_output=True, text=True)
    return f"--{flag}" in said.stdout + said.stderr


# --------------------------------------------------------------------------
# Ours

class Ours:
    """Our controller-only driver and its joining node agents."""

    name = "ours"

    def __init__(self, args, logs, min_workers=1, log_samples=True, checkpoint=False):
        self.args, self.logs = args, logs
        os.makedirs(logs, exist_ok=True)
        self.token = os.path.join(logs, "token")
        self.samples = os.path.join(logs, "samples")
        argv = ours_argv(args, 0, self.token)
        drop = ("--workers=", "--epochs=", "--log-every=", "--test-samples=")
        argv = [a for a in argv if not a.startswith(drop)]
        argv += ["--controller-only", f"--min-workers={min_workers}", "--epochs=100000",
                 "--log-every=1", "--test-samples=64", "--state-copy-every=1",
                 f"--state-dir={os.path.join(logs, 'state')}", "--metrics-port=0",
                 f"--run-dir={os.path.join(logs, 'run')}",
                 f"--rendezvous-timeout={args.rendezvous_timeout}",
                 f"--precision={args.precision}", f"--memory-format={args.memory_format}"]
        if log_samples:
            argv.append(f"--log-samples={self.samples}")
        if checkpoint:
            argv.append(f"--checkpoint-dir={os.path.join(logs, 'checkpoint')}")
        if args.remove == "term":
            argv.append(f"--drain-timeout={max(0.5, args.notice_s / 2)}")
        argv += args.ours_extra
        self.driver = Recorded(argv, os.path.join(logs, "driver.log"))
        _, listen = self.driver.wait(LISTEN.search, args.timeout)
        self.address = f"{listen.group(1)}:{listen.group(2)}"
        self.nodes = {}

    def add(self, node_id):
        self.nodes[node_id] = Recorded(
            [self.args.ours, f"--join={self.address}", f"--workers={self.args.workers_per_node}",
             f"--token-file={self.token}"], os.path.join(self.logs, f"node{node_id}.log"))

    def trained(self, node_id):
        """Whether the node's workers were in a generation (synced a state)."""
        node = self.nodes[node_id]
        return node.find(lambda line: "params generation=" in line) is not None

    def step_times(self):
        return [t for t, line in self.driver.records if PROGRESS.match(line)]

    def close(self):
        for node in self.nodes.values():
            node.close()
        self.driver.close()

    def output(self):
        parts = [self.driver] + list(self.nodes.values())
        return "\n".join(line for p in parts for _, line in p.records)


def sample_log_sizes(samples_dir):
    """file name -> bytes now: where the window's steps end in each log."""
    if not os.path.isdir(samples_dir):
        return {}
    return {name: os.path.getsize(os.path.join(samples_dir, name))
            for name in os.listdir(samples_dir) if name.startswith("samples-")}


def ours_accounting(samples_dir, window_end=None):
    """(samples trained, samples kept) from the workers' --log-samples files
    (module docstring). With window_end (sample_log_sizes at the end of the
    window) only the steps logged before it count; the restores logged after
    it still roll them back."""
    start = {}                         # generation -> (epoch, position) it restored
    steps = collections.Counter()      # (generation, epoch, position) -> samples
    for name in sample_log_sizes(samples_dir):
        offset = 0
        with open(os.path.join(samples_dir, name), "rb") as f:
            for raw in f:
                at, offset = offset, offset + len(raw)
                fields = raw.decode().split()
                if len(fields) < 4 or not raw.endswith(b"\n"):
                    continue
                g, e, p = int(fields[1]), int(fields[2]), int(fields[3])
                if fields[0] == "G":
                    start[g] = (e, p)
                elif fields[0] == "S" and (window_end is None or at < window_end.get(name, 0)):
                    steps[(g, e, p)] += len(fields) - 4
    # The earliest point any generation after g restored: its steps at or
    # after that point were rolled back.
    rolled_from, earliest = {}, None
    for g in sorted(start, reverse=True):
        rolled_from[g] = earliest
        earliest = start[g] if earliest is None else min(earliest, start[g])
    trained = kept = 0
    for (g, e, p), count in steps.items():
        trained += count
        limit = rolled_from.get(g)
        if limit is None or (e, p) < limit:
            kept += count
    return trained, kept


def ours_ideal(args, world, logs):
    """Fault-free samples/s of a job of `world` workers (all there at the start)."""
    n = train_samples(args)
    nodes = world // args.workers_per_node
    job = Ours(args, logs, min_workers=world, log_samples=False)
    try:
        for i in range(nodes):
            job.add(i)
        first, _ = job.driver.wait(RESCALE.search, args.timeout)
        time.sleep(args.ideal_warmup + args.ideal_seconds + 0.5)
        points = []
        batch = world * args.batch_size
        begin = first + args.ideal_warmup
        for t, line in job.driver.records:
            m = PROGRESS.match(line)
            if m and begin <= t <= begin + args.ideal_seconds:
                epoch, step = int(m.group(1)), int(m.group(2))
                points.append((t, (epoch - 1) * n + min(step * batch, n)))
        if len(points) < 2:
            raise RuntimeError(f"ours, world {world}: fewer than 2 steps measured")
        return (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0])
    finally:
        job.close()


# --------------------------------------------------------------------------
# Torchrun

STORE_SCRIPT = """
import datetime, sys, time
from torch.distributed import TCPStore
store = TCPStore("127.0.0.1", int(sys.argv[1]), is_master=True,
                 timeout=datetime.timedelta(seconds=3600), wait_for_workers=False)
print("STORE READY", flush=True)
while True:
    time.sleep(3600)
"""


class Torchrun:
    """A standalone rendezvous store and torchrun agents of one worker each."""

    name = "torchrun"

    def __init__(self, args, logs, nnodes):
        self.args, self.logs, self.nnodes = args, logs, nnodes
        os.makedirs(logs, exist_ok=True)
        self.port = free_port()
        self.store = Recorded([PYTHON, "-c", STORE_SCRIPT, str(self.port)],
                              os.path.join(logs, "store.log"))
        self.store.wait(lambda line: line == "STORE READY", args.timeout)
        self.checkpoint = os.path.join(logs, "ddp.pt")
        self.rdzv_id = f"spot{os.getpid()}x{self.port}"
        self.nodes = {}

    def add(self, node_id):
        args = self.args
        argv = [PYTHON, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1",
                f"--nnodes={self.nnodes}", f"--nproc_per_node={args.workers_per_node}",
                "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{self.port}",
                f"--rdzv_id={self.rdzv_id}",
                f"--rdzv_conf=is_host=false,{args.torchrun_rdzv_conf}".rstrip(","),
                "--max_restarts=1000000",
                f"--monitor_interval={args.torchrun_monitor_interval}",
                *peer_argv(args), f"--data-dir={args.data_dir}", "--epochs=100000",
                f"--batch-size={args.batch_size}", "--step-lines", f"--seed={args.seed}",
                f"--checkpoint={self.checkpoint}",
                f"--checkpoint-every={args.checkpoint_every}"]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        self.nodes[node_id] = Recorded(argv, os.path.join(self.logs, f"node{node_id}.log"),
                                       env=env)

    def trained(self, node_id):
        """Whether the job has stepped while this agent lived (torchrun logs no
        membership per worker: any STEP line of any agent)."""
        return self.nodes[node_id].alive() and any(
            n.find(lambda line: "STEP {" in line) for n in self.nodes.values())

    def steps(self):
        """Every STEP record of any agent (rank 0's), in time order."""
        found = []
        for node in self.nodes.values():
            for _, line in list(node.records):
                m = STEP.search(line)
                if m:
                    try:
                        found.append(json.loads(m.group(1)))
                    except ValueError:
                        pass  # a line cut by a kill
        found.sort(key=lambda s: s["time"])
        return found

    def step_times(self):
        return [s["time"] for s in self.steps()]

    def close(self):
        for node in self.nodes.values():
            node.close()
        self.store.close()


def torchrun_ideal(args, world, logs):
    n = train_samples(args)
    job = Torchrun(args, logs, nnodes=f"{world // args.workers_per_node}")
    try:
        for i in range(world // args.workers_per_node):
            job.add(i)
        deadline = time.time() + args.timeout
        first = None
        while first is None:
            if time.time() > deadline:
                raise TimeoutError(f"torchrun, world {world}: no step within {args.timeout:.0f} s")
            steps = [s for s in job.steps() if s.get("world") == world and s["restart"] == 0]
            first = steps[0]["time"] if steps else None
            time.sleep(0.2)
        time.sleep(max(0.0, first + args.ideal_warmup + args.ideal_seconds + 0.5 - time.time()))
        points = [(s["time"], s["epoch"] * n + s["samples_done"]) for s in job.steps()
                  if s.get("world") == world and s["restart"] == 0 and
                  first + args.ideal_warmup <= s["time"] <= first + args.ideal_warmup +
                  args.ideal_seconds]
        if len(points) < 2:
            raise RuntimeError(f"torchrun, world {world}: fewer than 2 steps measured")
        return (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0])
    finally:
        job.close()


# --------------------------------------------------------------------------
# The replay

def replay(job, actions, end_ms, speedup, args, stopped=lambda: False):
    """Performs the plan's actions on `job` at their compressed times. Returns
    (window start, window end, what was done)."""
    done = {"adds": 0, "removes": 0, "kills_while_training": 0, "removes_of_dead": 0}
    timers = []
    start = time.time()
    for ms, action, node_id in actions:
        at = start + ms / speedup / 1000.0
        while time.time() < at:
            time.sleep(min(0.05, max(0.0, at - time.time())))
        if stopped():
            break
        if action == "add":
            job.add(node_id)
            done["adds"] += 1
            continue
        node = job.nodes[node_id]
        done["removes"] += 1
        if not node.alive():
            done["removes_of_dead"] += 1
        elif job.trained(node_id):
            done["kills_while_training"] += 1
        if args.remove == "kill":
            node.kill_tree()
        else:
            try:
                os.kill(node.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            timer = threading.Timer(args.notice_s, node.kill_tree)
            timer.daemon = True
            timer.start()
            timers.append(timer)
    end = start + end_ms / speedup / 1000.0
    while time.time() < end and not stopped():
        time.sleep(0.05)
    for timer in timers:
        timer.cancel()
    return start, min(end, time.time()), done


def run_ours(args, actions, end_ms, speedup, logs, note):
    if args.admit_at:
        if ours_has_flag(args.ours, "admit-at"):
            args.ours_extra.append(f"--admit-at={args.admit_at}")
        else:
            note(f"ours: {args.ours} has no --admit-at yet; --admit-at={args.admit_at} omitted "
                 "(joins enter at epoch boundaries)")
    job = Ours(args, logs, checkpoint=args.finish)
    result = {}
    try:
        start, end, done = replay(job, actions, end_ms, speedup, args,
                                  stopped=lambda: not job.driver.alive())
        result.update(done)
        # Nodes added after the trace's first instant that entered a generation.
        late = {node_id for ms, action, node_id in actions if action == "add" and ms > 0}
        result["joins_admitted"] = sum(1 for node_id in late
                                       if node_id in job.nodes and job.trained(node_id))
        if args.finish:
            # The job stops at its next epoch boundary, with a checkpoint (exit 3).
            if job.driver.alive() and not any(n.alive() for n in job.nodes.values()):
                job.add(max(job.nodes, default=-1) + 1)
                job.driver.wait(RESCALE.search, args.timeout, since=time.time())
            job.driver.proc.send_signal(signal.SIGTERM)
            try:
                result["driver_exit"] = job.driver.proc.wait(timeout=args.finish_timeout)
            except subprocess.TimeoutExpired:
                result["driver_exit"] = None
            for node in job.nodes.values():
                try:
                    node.proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    pass
        else:
            # Whether the steps at the end of the window are kept or rolled
            # back is known once the job steps again.
            window_end = sample_log_sizes(job.samples)
            try:
                job.driver.wait(PROGRESS.match, args.settle_timeout, since=end)
            except (TimeoutError, RuntimeError) as e:
                note(f"ours: no step within --settle-timeout after the window ({e})")
        step_times = job.step_times()
        output = job.output()
    finally:
        job.close()
    trained, kept = ours_accounting(job.samples, None if args.finish else window_end)
    result.update(window=end - start, trained=trained, kept=kept,
                  idle=idle_seconds(step_times, start, end),
                  generations=len(set(PARAMS.findall(output))), samples_dir=job.samples)
    return result


def run_torchrun(args, actions, end_ms, speedup, logs, note):
    cap = args.max_workers // args.workers_per_node
    job = Torchrun(args, logs, nnodes=f"1:{cap}")
    try:
        start, end, done = replay(job, actions, end_ms, speedup, args)
        # Whether the steps at the end of the window are kept or rolled back is
        # known once the job steps again: from where it resumed.
        deadline = time.time() + args.settle_timeout
        while not any(s["time"] >= end for s in job.steps()) and time.time() < deadline:
            time.sleep(0.2)
        steps = job.steps()
    finally:
        job.close()
    n = train_samples(args)
    window = [s for s in steps if start <= s["time"] < end]
    trained = sum(s.get("samples", 0) for s in window)
    kept = window[-1]["epoch"] * n + window[-1]["samples_done"] if window else 0
    after = [s for s in steps if s["time"] >= end]
    if after:
        kept = min(kept, after[0]["epoch"] * n + after[0]["samples_done"] - after[0]["samples"])
    else:
        note("torchrun: no step within --settle-timeout after the window")
    result = dict(done, window=end - start, trained=trained, kept=kept,
                  idle=idle_seconds([s["time"] for s in window], start, end),
                  )
    return result


# --------------------------------------------------------------------------

def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", required=True, help="Oobleck-format trace (ms,add|remove,node)")
    parser.add_argument("--ours", default="bazel-bin/examples/cifar/cifar", help="//trainer:cifar")
    parser.add_argument("--task", choices=["cifar", "gpt"], default="cifar",
                        help="cifar: --model on CIFAR-10 images; gpt: a language model "
                             "(--model-file, default nanoGPT's CPU GPT of tests/gpt_model.py) on "
                             "token files (tools/prepare_tokens.py), the peer bench/gpt_peer.py")
    parser.add_argument("--data-dir", required=True,
                        help="CIFAR-10 binary files, or (--task gpt) train.bin, val.bin, meta.json")
    parser.add_argument("--repeat-data", type=int, default=1,
                        help="--task cifar: train on --data-dir's batches repeated this many "
                        "times (built in a temporary directory): long epochs, as real jobs have")
    parser.add_argument("--model-file", default="",
                        help="--task gpt: a TorchScript GPT of tests/gpt_model.py; empty: one of "
                             "4 layers, 4 heads, 128 wide, --context long, scripted with --seed")
    parser.add_argument("--context", type=int, default=64, help="--task gpt: tokens a window")
    parser.add_argument("--systems", default="ours,torchrun")
    parser.add_argument("--events", type=int, default=0, help="replay only the first N events")
    parser.add_argument("--until-ms", type=int, default=0,
                        help="replay only the trace before this time (ms)")
    parser.add_argument("--speedup", type=float, default=0.0,
                        help="trace time / wall time; 0: the replay takes --replay-minutes")
    parser.add_argument("--replay-minutes", type=float, default=15.0)
    parser.add_argument("--max-workers", type=int, default=8,
                        help="local workers when the trace is at its peak")
    parser.add_argument("--peak", type=int, default=0,
                        help="trace machines that map to --max-workers; 0: the trace's maximum")
    parser.add_argument("--workers-per-node", type=int, default=1)
    parser.add_argument("--remove", choices=["kill", "term"], default="kill")
    parser.add_argument("--notice-s", type=float, default=30.0,
                        help="--remove term: seconds from SIGTERM to SIGKILL (wall time)")
    parser.add_argument("--admit-at", choices=["commit", "epoch"], default="",
                        help="ours: when joins enter (passed through when the binary has it)")
    parser.add_argument("--model", default="resnet8")
    parser.add_argument("--batch-size", type=int, default=0,
                        help="per worker; 0: 32 images, or 12 windows with --task gpt")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--memory-format", choices=["contiguous", "channels-last"],
                        default="contiguous")
    parser.add_argument("--commit-every", type=int, default=5, help="ours: steps between commits")
    parser.add_argument("--checkpoint-every", type=int, default=0,
                        help="torchrun: steps between the peer's checkpoints (and every "
                             "epoch end); 0: --commit-every")
    parser.add_argument("--torchrun-rdzv-conf",
                        default="last_call_timeout=2,keep_alive_interval=1,"
                                "keep_alive_max_attempt=2,join_timeout=3600")
    parser.add_argument("--torchrun-monitor-interval", type=float, default=0.5)
    parser.add_argument("--rendezvous-timeout", type=float, default=100000.0,
                        help="ours: seconds with no worker before the job stops")
    parser.add_argument("--ideal-seconds", type=float, default=15.0)
    parser.add_argument("--ideal-warmup", type=float, default=5.0)
    parser.add_argument("--no-ideal", action="store_true", help="skip the fault-free runs")
    parser.add_argument("--finish", action="store_true",
                        help="tests: after the replay, stop ours at an epoch boundary "
                             "(SIGTERM to the driver: exit 3 with a checkpoint)")
    parser.add_argument("--finish-timeout", type=float, default=600.0)
    parser.add_argument("--settle-timeout", type=float, default=120.0,
                        help="seconds after the window to wait for the next step, which "
                             "says whether the window's last steps are rolled back")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds to wait for a process to start or step")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep-logs", default="", help="directory for every process's log")
    parser.add_argument("--json", default="", help="write the results here as JSON")
    args = parser.parse_args(argv)
    args.systems = [s for s in args.systems.split(",") if s]
    for system in args.systems:
        if system not in ("ours", "torchrun"):
            parser.error(f"--systems: unknown system {system!r} (ours, torchrun)")
    if args.max_workers < args.workers_per_node or args.workers_per_node < 1:
        parser.error("--max-workers must be at least --workers-per-node >= 1")
    if args.repeat_data < 1 or (args.repeat_data > 1 and args.task != "cifar"):
        parser.error("--repeat-data must be >= 1, and is for --task cifar")
    if args.finish and args.systems != ["ours"]:
        parser.error("--finish is for --systems ours")
    args.checkpoint_every = args.checkpoint_every or args.commit_every
    args.ours = os.path.abspath(args.ours)
    args.data_dir = os.path.abspath(args.data_dir)
    args.batch_size = args.batch_size or (12 if args.task == "gpt" else 32)
    if args.model_file:
        args.model_file = os.path.abspath(args.model_file)
    args.ours_extra = []
    return args


def main():
    args = parse_args()
    if "ours" in args.systems and not os.access(args.ours, os.X_OK):
        print(f"spot_trace_bench: --ours {args.ours} is not an executable", file=sys.stderr)
        return 2
    needed = "train.bin" if args.task == "gpt" else "data_batch_1.bin"
    if not os.path.isfile(os.path.join(args.data_dir, needed)):
        print(f"spot_trace_bench: no {needed} in {args.data_dir} (--task {args.task})",
              file=sys.stderr)
        return 2
    trace = read_trace(args.trace)
    events, end_ms = select_prefix(trace, args.events, args.until_ms)
    if not events:
        print("spot_trace_bench: no event selected", file=sys.stderr)
        return 2
    peak = args.peak or peak_machines(trace)
    cap = args.max_workers // args.workers_per_node
    actions, timeline = local_plan(events, cap, peak)
    speedup = args.speedup or end_ms / (args.replay_minutes * 60000.0)
    per_node = args.workers_per_node
    spent = seconds_at_world(timeline, end_ms, speedup)
    worlds = sorted(w for w, s in spent.items() if w > 0 and s > 0)
    notes = []

    def note(text):
        notes.append(text)
        print(f"# {text}", flush=True)

    load = os.getloadavg()
    print(f"# trace {args.trace}: {len(events)} of {len(trace)} events, {end_ms / 3.6e6:.2f} h "
          f"of trace in {end_ms / speedup / 60000:.1f} min (speedup {speedup:.1f}x); peak "
          f"{peak} machines -> {cap} agents x {per_node} worker(s); load average "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
    adds = sum(1 for a in actions if a[1] == "add")
    print(f"# local plan: {adds} adds, {len(actions) - adds} removes ({args.remove}); world "
          "seconds: " + ", ".join(f"{w * per_node}: {spent[w]:.0f} s" for w in sorted(spent)),
          flush=True)

    logs = args.keep_logs or tempfile.mkdtemp(prefix="spot_trace_bench_")
    os.makedirs(logs, exist_ok=True)
    if args.repeat_data > 1:
        args.data_dir = repeat_data(args.data_dir, args.repeat_data,
                                    tempfile.mkdtemp(prefix="spot_trace_data_"))
        note(f"training set repeated {args.repeat_data} times: {train_samples(args)} images "
             f"in {args.data_dir}")
    if args.task == "gpt" and not args.model_file:
        args.model_file = os.path.join(logs, "gpt.pt")
        subprocess.run([PYTHON, os.path.join(HERE, "..", "tests", "gpt_model.py"), "script",
                        args.model_file, "--vocab", str(vocab_size(args.data_dir)), "--block",
                        str(args.context), "--layers", "4", "--heads", "4", "--embd", "128",
                        "--seed", str(args.seed)], check=True, stdout=subprocess.DEVNULL)
    results = {"speedup": speedup, "events": len(events), "end_ms": end_ms,
               "timeline": timeline, "world_seconds": {w * per_node: s for w, s in spent.items()},
               "load_before": load, "notes": notes}
    runners = {"ours": (run_ours, ours_ideal), "torchrun": (run_torchrun, torchrun_ideal)}
    try:
        for system in args.systems:
            run, ideal_run = runners[system]
            row = run(args, actions, end_ms, speedup, os.path.join(logs, system), note)
            rates = {}
            if not args.no_ideal:
                for w in worlds:
                    world = w * per_node
                    for attempt in range(2):  # a loaded machine can stall a start once
                        try:
                            rates[world] = ideal_run(
                                args, world,
                                os.path.join(logs, f"{system}-ideal-{world}-{attempt}"))
                            break
                        except (TimeoutError, RuntimeError, OSError) as e:
                            note(f"{system}: ideal at world {world}, attempt {attempt + 1}: "
                                 f"not measured: {e}")
                row["rates"] = rates
                if all(w * per_node in rates for w in worlds):
                    row["ideal"] = sum(rates[w * per_node] * spent[w] for w in worlds)
            row["load_after"] = os.getloadavg()
            results[system] = row
            print(f"# {system}: {json.dumps(row)}", flush=True)
    finally:
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
        if not args.keep_logs:
            shutil.rmtree(logs, ignore_errors=True)

    print_table(results, args, worlds, per_node)
    return 0


def print_table(results, args, worlds, per_node):
    systems = [s for s in ("ours", "torchrun") if s in results]
    print(f"\nGoodput on the trace, {task_label(args)}, batch {args.batch_size}/worker, "
          "1 thread/worker, "
          f"{args.max_workers} workers at the trace's peak, removes by {args.remove}, "
          f"speedup {results['speedup']:.1f}x")
    print("world | wall s | " + " | ".join(f"{s} ideal samples/s" for s in systems))
    for w in worlds:
        cells = [str(w * per_node), f"{results['world_seconds'][w * per_node]:.0f}"]
        for s in systems:
            rate = results[s].get("rates", {}).get(w * per_node)
            cells.append(f"{rate:.0f}" if rate else "-")
        print(" | ".join(cells))
    seconds = results["world_seconds"]
    total = sum(seconds.values())
    mean = sum(w * s for w, s in seconds.items()) / total if total else 0
    print(f"timeline: mean world {mean:.2f} over {total:.0f} s, min {min(seconds)}, "
          f"max {max(seconds)}, {len(results['timeline'])} world changes")
    print("\nsystem | window s | samples kept | kept/s | ideal samples | goodput | rolled back | "
          "trained | idle s | adds | removes (while training)")
    goodput = {}
    for s in systems:
        r = results[s]
        ideal = r.get("ideal")
        if ideal:
            goodput[s] = r["kept"] / ideal
        print(" | ".join([
            s, f"{r['window']:.0f}", f"{r['kept']}", f"{r['kept'] / r['window']:.0f}",
            f"{ideal:.0f}" if ideal else "-",
            f"{100 * goodput[s]:.1f}%" if s in goodput else "-",
            f"{r['trained'] - r['kept']}", f"{r['trained']}", f"{r['idle']}",
            f"{r['adds']}", f"{r['removes']} ({r['kills_while_training']})"]))
    for text in results["notes"]:
        print(f"note: {text}")
    ours = goodput.get("ours")
    theirs = goodput.get("torchrun")
    print("goodput: ours " + (f"{100 * ours:.1f}%" if ours is not None else "-") +
          " of ideal, torchrun " + (f"{100 * theirs:.1f}%" if theirs is not None else "-") +
          " of ideal, ours/torchrun " +
          (f"{ours / theirs:.2f}x" if ours is not None and theirs else "-"))


if __name__ == "__main__":
    sys.exit(main())
