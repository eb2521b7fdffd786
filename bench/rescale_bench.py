"""Rescale latency: time from a membership change to the first completed
training step of the new generation, ours (the elastic trainer) next to
torchrun's restart of the PyTorch DDP peer (bench/ddp_peer.py), same model,
batch, data and worker count, on this machine.

Events:
  kill  SIGKILL of one worker (not rank 0). Ours: the survivors rebuild the
        communicator and go on from the last commit. torchrun: the agent
        notices the dead worker (every --monitor_interval seconds), stops the
        others and starts all of them again (--max_restarts), which load the
        last checkpoint.
  leave SIGTERM of one worker (not rank 0): the preemption notice. Ours: it
        leaves at the next epoch boundary, the others go on. (torchrun
        handles it as a failure, the same restart as kill.)
  join  a worker is added. Ours: `--join HOST:PORT --workers 1` from another
        process; admitted at the next epoch boundary. (torchrun has no join
        without a second node agent and a restart of everyone; not measured.)

  killall  SIGKILL of every worker at once (spot capacity reclaimed), and at
        once a node with as many workers joins (the replacement capacity).
        Ours: the joiners continue from the controller's copy of the last
        commit. torchrun: every worker killed, its agent restarts them all from
        the last checkpoint.
  controller  SIGKILL of our controller-only driver (--state-dir) and its
        restart with the same flags; the joined workers reconnect and continue
        from their in-memory commit. torchrun: its agent hosts the rendezvous
        store, so the job ends with it (not measured: nothing to compare).
  reset  every TCP connection of one worker reset from outside (`ss -K`, needs
        CAP_NET_ADMIN), no process killed. Ours: the head counts the worker
        failed, the others go on from the last commit (the worker reconnects
        and re-enters at the next epoch boundary). torchrun: not measured (a
        reset Gloo pair fails that worker's collective; the agent then restarts
        everyone, as for kill).

The clock starts when this script sends the signal (kill) or starts the
joining process (join), and stops when the first step of the new generation is
seen: for ours the driver's line "driver: rescale: generation G (W workers,
...): first step X s after the membership change", for torchrun the first
`STEP {...}` line with the next restart count (its own wall-clock stamp).

  /usr/bin/python3 bench/rescale_bench.py --ours BIN --data-dir DIR --workers 2,4,8
BIN is a trainer binary with --workers (//trainer:cifar). The last line is the
headline ratio (torchrun restart / our rescale) for the smallest world.
"""

import argparse
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = "/usr/bin/python3"  # the interpreter that sees Debian's python3-torch


class Job:
    """A process group started by us whose output lines are read as they come,
    each stamped with the wall-clock time it was read."""

    def __init__(self, argv, env=None, log=None):
        self.argv = argv
        self.log = log
        self.lines = queue.Queue()
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     env=env, start_new_session=True, text=True, bufsize=1)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.history = []

    def _read(self):
        for line in self.proc.stdout:
            now = time.time()
            if self.log:
                self.log.write(f"{now:.3f} {line}")
                self.log.flush()
            self.lines.put((now, line.rstrip("\n")))
        self.lines.put((time.time(), None))

    def wait_for(self, predicate, timeout):
        """The first line (read time, text, match) for which predicate(text)
        returns a truthy value, or raises TimeoutError / RuntimeError."""
        deadline = time.time() + timeout
        while True:
            left = deadline - time.time()
            if left <= 0:
                raise TimeoutError(f"no expected line within {timeout:.0f} s from {self.argv[0]}")
            try:
                now, line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise RuntimeError(f"{' '.join(self.argv[:3])}... exited with {self.proc.wait()} "
                                   "before the expected line")
            self.history.append((now, line))
            found = predicate(line)
            if found:
                return now, line, found

    def stop(self):
        """SIGKILL to our process group: a measurement needs no checkpoint (SIGTERM
        would make our driver finish the epoch and write one), and our workers
        die with their driver (parent-death signal); torchrun's with their agent."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            except ProcessLookupError:
                pass
        # Children that outlived their parent in our group.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


RESCALE = re.compile(r"driver: rescale: generation (\d+) \((\d+) workers.*first step ([\d.]+) s")
WORKER_RANK = re.compile(r"\[worker \d+ pid (\d+)\] params generation=(\d+) rank=(\d+)")
LISTEN = re.compile(r"driver: head listening on ([\d.]+):(\d+)")
STEP = re.compile(r"STEP (\{.*\})")
START = re.compile(r"START (\{.*\})")


# A language model's recipe (bench/spot_trace_bench.py --task gpt): nanoGPT's
# CPU settings, a warm-up of 100 steps and then a constant rate (the run has
# no end in steps).
GPT_FLAGS = ["--dataset=tokens", "--optimizer=adamw", "--lr=1e-3", "--adam-beta2=0.99",
             "--weight-decay=0.1", "--clip-grad=1", "--warmup-epochs=0", "--warmup-steps=100",
             "--schedule=constant", "--augment=false", "--recompute-bn=0"]


def task_flags(args):
    """What ours trains: --model on CIFAR-10 or, with --task gpt, --model-file on tokens."""
    if getattr(args, "task", "cifar") == "gpt":
        return GPT_FLAGS + [f"--model-file={args.model_file}", f"--context={args.context}"]
    return [f"--model={args.model}", "--dataset=cifar10"]


def ours_argv(args, workers, token_file):
    return [args.ours, f"--workers={workers}", *task_flags(args),
            f"--data-dir={args.data_dir}", "--epochs=1000", f"--batch-size={args.batch_size}",
            "--per-worker-batch", "--threads=1", "--loader-threads=1", "--test-samples=64",
            f"--commit-every={args.commit_every}", f"--token-file={token_file}",
            "--log-every=1000000", f"--seed={args.seed}"]


def wait_generation(job, workers, after_generation, timeout):
    """The driver's rescale line of the first generation > after_generation
    with `workers` workers: (read time, generation, driver-reported seconds)."""

    def match(line):
        m = RESCALE.search(line)
        if m and int(m.group(1)) > after_generation and int(m.group(2)) == workers:
            return m
        return None

    now, _, m = job.wait_for(match, timeout)
    return now, int(m.group(1)), float(m.group(3))


def published_after(job, since):
    """Seconds from `since` to the driver's publication of the last view."""
    times = [t for t, line in job.history
             if t >= since and "driver: published generation" in line]
    return times[-1] - since if times else None


def ours_remove(args, workers, tmp, log, signum):
    """kill (SIGKILL) or leave (SIGTERM: the preemption notice) of the
    highest rank."""
    job = Job(ours_argv(args, workers, os.path.join(tmp, "token")), log=log)
    try:
        _, generation, _ = wait_generation(job, workers, 0, args.timeout)
        time.sleep(args.settle)  # a few steps in steady state
        ranks = worker_pids(job, generation)
        if len(ranks) < workers:
            raise RuntimeError(f"saw the ranks of {len(ranks)} of {workers} workers in the log")
        victim = ranks[max(ranks)]
        killed = time.time()
        os.kill(victim, signum)
        seen, _, reported = wait_generation(job, workers - 1, generation, args.timeout)
        return {"seconds": seen - killed, "after_detection": reported,
                "published": published_after(job, killed)}
    finally:
        job.stop()


def ours_join(args, workers, tmp, log):
    token = os.path.join(tmp, "token")
    job = Job(ours_argv(args, workers - 1, token), log=log)
    joiner = None
    try:
        _, _, listen = job.wait_for(LISTEN.search, args.timeout)
        _, generation, _ = wait_generation(job, workers - 1, 0, args.timeout)
        time.sleep(args.settle)
        started = time.time()
        joiner = Job([args.ours, f"--join={listen.group(1)}:{listen.group(2)}", "--workers=1",
                      f"--token-file={token}"], log=log)
        seen, _, reported = wait_generation(job, workers, generation, args.timeout)
        return {"seconds": seen - started, "after_detection": reported,
                "published": published_after(job, started)}
    finally:
        if joiner:
            joiner.stop()
        job.stop()


def worker_pids(job, generation):
    """rank -> pid of the workers of `generation`, from their sync lines."""
    ranks = {}
    for _, line in job.history:
        m = WORKER_RANK.search(line)
        if m and int(m.group(2)) == generation:
            ranks[int(m.group(3))] = int(m.group(1))
    return ranks


def ours_kill_all(args, workers, tmp, log):
    token = os.path.join(tmp, "token")
    job = Job(ours_argv(args, workers, token), log=log)
    joiner = None
    try:
        _, _, listen = job.wait_for(LISTEN.search, args.timeout)
        _, generation, _ = wait_generation(job, workers, 0, args.timeout)
        time.sleep(args.settle)
        ranks = worker_pids(job, generation)
        if len(ranks) < workers:
            raise RuntimeError(f"saw the ranks of {len(ranks)} of {workers} workers in the log")
        killed = time.time()
        for pid in ranks.values():
            os.kill(pid, signal.SIGKILL)
        joiner = Job([args.ours, f"--join={listen.group(1)}:{listen.group(2)}",
                      f"--workers={workers}", f"--token-file={token}"], log=log)
        seen, _, reported = wait_generation(job, workers, generation, args.timeout)
        return {"seconds": seen - killed, "after_detection": reported,
                "published": published_after(job, killed)}
    finally:
        if joiner:
            joiner.stop()
        job.stop()


def ours_controller_restart(args, workers, tmp, log):
    token = os.path.join(tmp, "token")
    state = tempfile.mkdtemp(prefix="state_", dir=tmp)
    argv = ours_argv(args, workers, token)
    argv = [a for a in argv if not a.startswith("--workers=")]
    argv += ["--controller-only", f"--min-workers={workers}", f"--state-dir={state}"]
    job = Job(argv + ["--port=0"], log=log)
    node = restarted = None
    try:
        _, _, listen = job.wait_for(LISTEN.search, args.timeout)
        node = Job([args.ours, f"--join={listen.group(1)}:{listen.group(2)}",
                    f"--workers={workers}", f"--token-file={token}"], log=log)
        wait_generation(job, workers, 0, args.timeout)
        time.sleep(args.settle)
        killed = time.time()
        job.stop()
        restarted = Job(argv + [f"--port={listen.group(2)}"], log=log)
        seen, _, reported = wait_generation(restarted, workers, 0, args.timeout)
        return {"seconds": seen - killed, "after_detection": reported,
                "published": published_after(restarted, killed)}
    finally:
        for j in (restarted, node, job):
            if j:
                j.stop()


def reset_connections(pid):
    """Resets every established TCP connection of `pid` with `ss -K`."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[3] == "01" and fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    for port in ports:
        said = subprocess.run(["ss", "-K", "-tn", f"sport = :{port}"], capture_output=True,
                              text=True)
        if said.returncode != 0 or "SOCK_DESTROY" in said.stdout + said.stderr:
            raise RuntimeError(f"ss -K refused: {said.stdout + said.stderr}")
    return len(ports)


def ours_reset(args, workers, tmp, log):
    job = Job(ours_argv(args, workers, os.path.join(tmp, "token")), log=log)
    try:
        _, generation, _ = wait_generation(job, workers, 0, args.timeout)
        time.sleep(args.settle)
        ranks = worker_pids(job, generation)
        if len(ranks) < workers:
            raise RuntimeError(f"saw the ranks of {len(ranks)} of {workers} workers in the log")
        reset = time.time()
        if reset_connections(ranks[max(ranks)]) == 0:
            raise RuntimeError("the worker had no connection to reset")
        seen, _, reported = wait_generation(job, workers - 1, generation, args.timeout)
        return {"seconds": seen - reset, "after_detection": reported,
                "published": published_after(job, reset)}
    finally:
        job.stop()


def free_port():
    """A port the OS has just given out and taken back (torchrun needs a number;
    --standalone's fixed 29400 collides with any other torchrun on the machine)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_argv(workers):
    """torchrun of one node, as --standalone but on a free port."""
    return [PYTHON, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1",
            "--nnodes=1", "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{free_port()}",
            f"--rdzv_id=bench{os.getpid()}", f"--nproc_per_node={workers}"]


def torchrun_kill(args, workers, tmp, log, monitor_interval, every_worker=False):
    argv = torchrun_argv(workers) + ["--max_restarts=3"]
    if monitor_interval is not None:
        argv.append(f"--monitor_interval={monitor_interval}")
    argv += [os.path.join(HERE, "ddp_peer.py"), f"--model={args.model}",
             f"--data-dir={args.data_dir}", "--epochs=1000", f"--batch-size={args.batch_size}",
             "--threads=1", "--no-eval", "--step-lines", f"--seed={args.seed}",
             f"--checkpoint={os.path.join(tmp, f'ddp-{workers}-{monitor_interval}.pt')}",
             f"--checkpoint-every={args.commit_every}"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    job = Job(argv, env=env, log=log)

    def step_of(restart, at_least):
        def match(line):
            m = STEP.search(line)
            if m:
                step = json.loads(m.group(1))
                if step["restart"] == restart and step["step"] >= at_least:
                    return step
            return None
        return match

    try:
        job.wait_for(step_of(0, 1), args.timeout)
        time.sleep(args.settle)
        peers = []
        for child in psutil.Process(job.proc.pid).children(recursive=True):
            try:
                if "ddp_peer.py" in " ".join(child.cmdline()):
                    peers.append((int(child.environ().get("LOCAL_RANK", "0")), child.pid))
            except psutil.NoSuchProcess:
                pass
        if len(peers) < workers:
            raise RuntimeError(f"found {len(peers)} of {workers} DDP workers")
        victims = [pid for _, pid in peers] if every_worker else [max(peers)[1]]
        killed = time.time()
        for victim in victims:
            os.kill(victim, signal.SIGKILL)
        _, _, step = job.wait_for(step_of(1, 0), args.timeout)
        result = {"seconds": step["time"] - killed}
        # Where the time went: the restarted rank 0's START line says when its
        # process began and how long importing torch and joining the group took.
        for _, line in job.history:
            m = START.search(line)
            if m:
                start = json.loads(m.group(1))
                if start["restart"] == 1:
                    result["respawn"] = start["time"] - killed
                    result["import"] = start["import_seconds"]
                    result["init"] = start["init_seconds"]
        return result
    finally:
        job.stop()


EVENTS = ("kill", "leave", "join", "killall", "controller", "reset")


def fmt(result):
    if isinstance(result, dict):
        return f"{result['seconds']:.2f}"
    return result  # why it was not measured


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ours", required=True, help="trainer binary with --workers")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--workers", default="2,4", help="comma-separated world sizes")
    parser.add_argument("--events", default="kill,join")
    parser.add_argument("--model", default="resnet8")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--commit-every", type=int, default=5,
                        help="ours: steps between commits; the peer checkpoints as often")
    parser.add_argument("--monitor-intervals", default="default,0.1",
                        help="torchrun --monitor_interval values to measure ('default': not set)")
    parser.add_argument("--settle", type=float, default=2.0,
                        help="seconds of training before the change")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log", default="", help="file for every process's output")
    parser.add_argument("--json", default="", help="write the results here as JSON")
    args = parser.parse_args()
    if not os.path.isfile(os.path.join(args.data_dir, "data_batch_1.bin")):
        print(f"rescale_bench: no CIFAR-10 binary files in {args.data_dir}", file=sys.stderr)
        return 2
    if not os.access(args.ours, os.X_OK):
        print(f"rescale_bench: --ours {args.ours} is not an executable", file=sys.stderr)
        return 2
    worlds = [int(w) for w in args.workers.split(",")]
    if min(worlds) < 2:
        parser.error("--workers: every world needs at least 2 workers (one is removed or added)")
    events = args.events.split(",")
    for event in events:
        if event not in EVENTS:
            parser.error(f"--events: unknown event {event!r} ({', '.join(EVENTS)})")
    intervals = [None if v == "default" else float(v)
                 for v in args.monitor_intervals.split(",") if v]
    log = open(args.log, "a") if args.log else None

    rows = []
    with tempfile.TemporaryDirectory(prefix="rescale_bench_") as tmp:
        for workers in worlds:
            for event in events:
                row = {"event": event, "workers": workers}
                try:
                    if event == "kill":
                        row["ours"] = ours_remove(args, workers, tmp, log, signal.SIGKILL)
                    elif event == "leave":
                        row["ours"] = ours_remove(args, workers, tmp, log, signal.SIGTERM)
                    elif event == "killall":
                        row["ours"] = ours_kill_all(args, workers, tmp, log)
                    elif event == "controller":
                        row["ours"] = ours_controller_restart(args, workers, tmp, log)
                    elif event == "reset":
                        row["ours"] = ours_reset(args, workers, tmp, log)
                    else:
                        row["ours"] = ours_join(args, workers, tmp, log)
                except (TimeoutError, RuntimeError, OSError) as e:
                    row["ours"] = f"not measured: {e}"
                for interval in intervals:
                    key = f"torchrun_{'default' if interval is None else interval}"
                    if event not in ("kill", "killall"):
                        row[key] = "n/a"
                        continue
                    try:
                        row[key] = torchrun_kill(args, workers, tmp, log, interval,
                                                 every_worker=event == "killall")
                    except (TimeoutError, RuntimeError, OSError) as e:
                        row[key] = f"not measured: {e}"
                rows.append(row)
                print(f"# {json.dumps(row)}", flush=True)

    keys = [f"torchrun_{'default' if i is None else i}" for i in intervals]
    print(f"\nRescale latency, {args.model}, batch {args.batch_size}/worker, 1 thread/worker, "
          f"seconds from the change to the first step of the new generation")
    header = ["event", "workers", "ours_s", "ours_published_s", "ours_after_publish_s"] + [k + "_s" for k in keys]
    header += [f"{k}/ours" for k in keys]
    print(" | ".join(header))
    headline = None
    for row in rows:
        ours = row["ours"]
        measured = isinstance(ours, dict)
        cells = [row["event"], str(row["workers"]), fmt(ours),
                 f"{ours['published']:.2f}" if measured and ours["published"] else "-",
                 f"{ours['after_detection']:.2f}" if measured else "-"]
        cells += [fmt(row[k]) for k in keys]
        for k in keys:
            if isinstance(ours, dict) and isinstance(row[k], dict):
                ratio = row[k]["seconds"] / ours["seconds"]
                cells.append(f"{ratio:.1f}x")
                if headline is None and row["event"] == "kill":
                    headline = (row["workers"], k, ratio)
            else:
                cells.append("-")
        print(" | ".join(cells))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f)
    if headline:
        # The smallest world, against the fastest torchrun setting measured.
        row = next(r for r in rows if r["event"] == "kill" and r["workers"] == headline[0])
        ratio, key = min((row[k]["seconds"] / row["ours"]["seconds"], k) for k in keys
                         if isinstance(row[k], dict))
        print(f"headline: kill of 1 of {headline[0]} workers: torchrun restart ({key}) / our "
              f"rescale = {ratio:.1f}x (target >= 10x)")
    else:
        print("headline: not measured (see the rows above)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
