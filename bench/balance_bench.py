"""Mixed fleets: training throughput of a world in which one worker is slowed,
ours with shares sized by speed (--balance, the default), ours with an even
split (--no-balance) and the PyTorch DDP peer (bench/ddp_peer.py under
torchrun), side by side in one run on this machine, against the sum of the
workers' solo speeds (issue 42).

  /usr/bin/python3 bench/balance_bench.py --ours bazel-bin/examples/cifar/cifar \\
      --data-dir ../shared/data/cifar10-subset --workers 2,4 --slow 0.5,0.25

The job (both sides the same, as bench/compare.sh matches them): resnet8 on
the CIFAR-10 subset, --batch-size images a worker a step and the learning
rate --lr x workers (ours: --per-worker-batch), cosine over --epochs after
--warmup-epochs, one intra-op thread a worker (OMP_NUM_THREADS=1, ours with
one loader thread a worker), the precision and memory format resolved here
and passed to both (auto: bf16 on a CPU with AMX-BF16 or AVX512-BF16, the
memory format our --list-models gives the model), batch-norm statistics as
--recompute-bn says, the whole test set.

The slow worker: this script slows one worker process to a fraction of its
speed (--slow 0.5: 50%): with a cgroup CPU quota where it can (root, cgroup
v1's cpu controller: cpu.cfs_quota_us = fraction x 100 ms a period, as the
issue measured), else (--slow-by sigstop) with a duty cycle of
SIGSTOP/SIGCONT, running for `fraction` of every 100 ms and stopped for the
rest. A quota is the better model of a slower machine: a process that waits
keeps its quota for when it computes, whereas a stop that falls while it
only waits for the others costs it nothing, so a duty cycle slows a worker
less the more it waits (measured: with the duty cycle at 50% the even split
already ran at 58% of the solo sum and balancing changed nothing, with a
quota --no-balance ran at ~1,440 images/s and --balance at ~1,900). Ours:
rank 1 of the first generation (not rank 0), its pid from the `params` event
of the driver's events.jsonl (--run-dir; docs/events.md); the process stays
slowed whatever rank it has later. DDP: the torchrun child whose environment
has LOCAL_RANK=1, found by scanning /proc for the agent's descendants.

The solo speeds: for each world W and fraction, W world-of-one jobs of ours
(`--workers 1`) run at once, one of them slowed by the same duty cycle, so the
sum of their rates is the sum of the workers' solo speeds ((W-1) x full +
1 x slowed) on the cores the W workers of a job share: on this 2-core machine
4 workers get half a core each, and the slowed one's stopped time is CPU the
others can use, in the solos as in the job. Measured one after the other, 4
solos would each have had a whole core and the sum would overstate what 4
workers on 2 cores can do. The slowed solo trains --solo-epochs epochs; the
full-speed ones run until it ends and are then killed, so every epoch they
report shared the machine with it (only their epochs that ended before its
last one are counted).

Measured per system, world and fraction:
  images/s      training images a second of the whole job over the epochs
                after the first (every epoch is the same images, so the
                harmonic mean of the per-epoch rates); ours: the `epoch`
                events' samples_per_second, DDP: rank 0's RESULT lines
  % of solo sum images/s over the sum of the concurrent solo rates
  final acc     the test accuracy after the last epoch
  notes         ours: how many times the split was re-planned (`shares`
                events), the slowed worker's last share of a step, and any
                worker let go (a `draining` event with a reason)

The last line: `headline: 2 workers, one at 50%: ours balanced X images/s =
P% of the solo sum (--no-balance Q%, DDP R%); ours balanced / DDP = Z.ZZx`.
No test asserts these numbers: they depend on the machine and its load.
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PYTHON = "/usr/bin/python3"  # the interpreter that sees Debian's python3-torch
PERIOD = 0.1  # seconds of one SIGSTOP/SIGCONT cycle


class Job:
    """A process group started by us, its output in a log file."""

    def __init__(self, argv, log_path, env):
        self.argv = argv
        self.log_path = log_path
        with open(log_path, "w") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         cwd=ROOT, start_new_session=True)

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"{os.path.basename(self.argv[0])} still running after "
                               f"{timeout:.0f} s; log {self.log_path}") from None

    def check(self, what):
        if self.proc.poll() is not None:
            raise RuntimeError(f"{what}: exited with {self.proc.returncode} early; "
                               f"log {self.log_path}")

    def stop(self):
        """SIGKILL to every process below ours (a child in a session of its own
        included), then to the group."""
        if self.proc.poll() is None:
            for pid in descendants(self.proc.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


class DutyCycle:
    """Slows process `pid` to `fraction` of its speed: it runs for fraction x
    PERIOD and is stopped (SIGSTOP) for the rest of every PERIOD."""

    def __init__(self, pid, fraction):
        self.pid = pid
        self.fraction = fraction
        self.done = threading.Event()
        self.thread = None
        if fraction < 1:
            self.thread = threading.Thread(target=self._cycle, daemon=True)
            self.thread.start()

    def _cycle(self):
        start = time.monotonic()
        cycle = 0
        try:
            while not self.done.is_set():
                os.kill(self.pid, signal.SIGCONT)
                if self.done.wait(max(0.0, start + (cycle + self.fraction) * PERIOD
                                      - time.monotonic())):
                    break
                os.kill(self.pid, signal.SIGSTOP)
                cycle += 1
                self.done.wait(max(0.0, start + cycle * PERIOD - time.monotonic()))
        except ProcessLookupError:
            pass  # it exited (let go, or the job ended)

    def stop(self):
        self.done.set()
        if self.thread:
            self.thread.join()
        try:
            os.kill(self.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


CGROUP_CPU = "/sys/fs/cgroup/cpu"  # cgroup v1's cpu controller, where mounted


class CpuQuota:
    """Slows process `pid` to `fraction` of one CPU with a cgroup CPU quota
    (cpu.cfs_quota_us = fraction x cpu.cfs_period_us of 100 ms), as the issue
    measured: the process and every thread it has or starts may use at most
    that much CPU time a period, and keeps what it does not use while it
    waits. Needs root and cgroup v1's cpu controller (`--slow-by cgroup`)."""

    serial = 0

    def __init__(self, pid, fraction):
        self.pid = pid
        CpuQuota.serial += 1
        self.path = os.path.join(CGROUP_CPU, f"elastic-balance-{os.getpid()}-{CpuQuota.serial}")
        os.makedirs(self.path, exist_ok=True)
        period = int(PERIOD * 1e6)
        self._write("cpu.cfs_period_us", period)
        self._write("cpu.cfs_quota_us", max(1000, int(period * fraction)))
        self._write("cgroup.procs", pid)

    def _write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(str(value))

    def stop(self):
        try:
            with open(os.path.join(CGROUP_CPU, "cgroup.procs"), "w") as f:
                f.write(str(self.pid))
        except OSError:
            pass  # it exited
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except OSError:
                time.sleep(0.1)  # a thread of an exiting process is still in it


def can_use_cgroups():
    return os.access(CGROUP_CPU, os.W_OK) and os.path.exists(
        os.path.join(CGROUP_CPU, "cgroup.procs"))


def slow_down(args, pid, fraction):
    """The --slow-by way of slowing `pid` to `fraction`."""
    if args.slow_by == "cgroup":
        return CpuQuota(pid, fraction)
    return DutyCycle(pid, fraction)


def read_events(run_dir):
    """events.jsonl's events, without a last line still being written."""
    try:
        with open(os.path.join(run_dir, "events.jsonl")) as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in lines[:-1] if line.strip()]


def ours_worker(job, run_dir, rank, world, timeout):
    """(pid, member) of rank `rank` in the first generation of `world` workers,
    from its `params` event."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for e in read_events(run_dir):
            if e["event"] == "params" and e["rank"] == rank and e["world"] == world:
                return e["pid"], e["member"]
        job.check("ours")
        time.sleep(0.1)
    raise TimeoutError(f"no params event of rank {rank} in {run_dir} within {timeout:.0f} s")


def descendants(root):
    """Pids of every process below `root`, from /proc/*/stat's parent pids."""
    parents = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        parents[int(name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        children = [p for p, parent in parents.items() if parent == pid]
        found.extend(children)
        frontier.extend(children)
    return found


def ddp_worker(job, local_rank, timeout):
    """Pid of the DDP peer process of LOCAL_RANK `local_rank` under torchrun."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for pid in descendants(job.proc.pid):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read().split(b"\0")
                with open(f"/proc/{pid}/environ", "rb") as f:
                    environ = f.read().split(b"\0")
            except OSError:
                continue
            if (any(arg.endswith(b"ddp_peer.py") for arg in cmdline)
                    and f"LOCAL_RANK={local_rank}".encode() in environ):
                return pid
        job.check("torchrun")
        time.sleep(0.1)
    raise TimeoutError(f"no ddp_peer.py of LOCAL_RANK {local_rank} within {timeout:.0f} s")


def steady_rate(rates):
    """Images/s over the epochs after the first (all of them if there is one):
    every epoch trains the same images, so the harmonic mean."""
    tail = rates[1:] or rates
    if not tail or min(tail) <= 0:
        return None
    return len(tail) / sum(1 / r for r in tail)


def env():
    return dict(os.environ, OMP_NUM_THREADS="1")


def recipe(args):
    """The flags both sides share, in the spelling both take."""
    return [f"--model={args.model}", f"--data-dir={args.data_dir}",
            f"--batch-size={args.batch_size}", f"--lr={args.lr}",
            f"--warmup-epochs={args.warmup_epochs}", f"--recompute-bn={args.recompute_bn}",
            f"--test-samples={args.test_samples}", "--threads=1", f"--seed={args.seed}",
            f"--precision={args.precision}", f"--memory-format={args.memory_format}"]


def ours_argv(args, workers, epochs, run_dir, balance=None):
    argv = [args.ours, f"--workers={workers}", "--per-worker-batch", "--dataset=cifar10",
            *recipe(args), f"--epochs={epochs}", "--loader-threads=1", "--metrics-port=0",
            "--log-every=1000000", f"--run-dir={run_dir}"]
    if balance is not None:
        argv.append("--balance" if balance else "--no-balance")
    return argv + args.ours_flag


def ours_summary(run_dir, slowed_member=None):
    events = read_events(run_dir)
    epochs = [e for e in events if e["event"] == "epoch"]
    if not epochs:
        raise RuntimeError(f"no epoch event in {run_dir}/events.jsonl")
    result = {"images_per_second": steady_rate([e["samples_per_second"] for e in epochs]),
              "accuracy": epochs[-1]["test_metric"], "epochs": len(epochs),
              "world_at_end": epochs[-1]["world"], "run_dir": run_dir}
    shares = [e for e in events if e["event"] == "shares"]
    result["plans"] = len(shares)
    if shares:
        last = shares[-1]
        result["last_shares"] = {"step_samples": last["step_samples"],
                                 "workers": last["workers"]}
        mine = [w for w in last["workers"] if w["member"] == slowed_member]
        if mine:
            result["slowed_share"] = mine[0]["share"]
    result["let_go"] = [{"member": e["member"], "reason": e["reason"]} for e in events
                        if e["event"] == "draining" and e.get("reason")]
    return result


def run_slowed(args, job, slowed_pid, fraction):
    """Runs `job` to its end with the process slowed_pid() names slowed to `fraction`."""
    cycle = None
    try:
        cycle = slow_down(args, slowed_pid(), fraction)
        rc = job.wait(args.timeout)
        if rc != 0:
            raise RuntimeError(f"exited with {rc}; log {job.log_path}")
    finally:
        if cycle:
            cycle.stop()
        job.stop()


def run_ours(args, workers, fraction, balance, logs, name):
    """One job of `workers` of ours with rank 1 slowed to `fraction`."""
    run_dir = os.path.join(logs, name)
    job = Job(ours_argv(args, workers, args.epochs, run_dir, balance),
              os.path.join(logs, name + ".log"), env())
    found = {}

    def slowed_pid():
        found["pid"], found["member"] = ours_worker(job, run_dir, 1, workers, args.timeout)
        return found["pid"]

    run_slowed(args, job, slowed_pid, fraction)
    member = found["member"]
    result = ours_summary(run_dir, member)
    result["slowed_member"] = member
    return result


def free_port():
    """A port the OS has just given out and taken back (--standalone's fixed
    29400 collides with any other torchrun on the machine)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ddp(args, workers, fraction, logs, name):
    """torchrun of `workers` DDP peers, as --standalone but on a free port,
    with local rank 1 slowed to `fraction`."""
    argv = [PYTHON, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1",
            "--nnodes=1", "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{free_port()}",
            f"--rdzv_id=balance{os.getpid()}", f"--nproc_per_node={workers}",
            os.path.join(HERE, "ddp_peer.py"), *recipe(args), f"--epochs={args.epochs}"]
    job = Job(argv, os.path.join(logs, name + ".log"), env())
    run_slowed(args, job, lambda: ddp_worker(job, 1, args.timeout), fraction)
    epochs = []
    with open(job.log_path, errors="replace") as f:
        for line in f:
            at = line.find("RESULT {")
            if at >= 0:
                record = json.loads(line[at + len("RESULT "):])
                if record["kind"] == "epoch":
                    epochs.append(record)
    if not epochs:
        raise RuntimeError(f"no RESULT line of an epoch; log {job.log_path}")
    return {"images_per_second": steady_rate([e["images_per_second"] for e in epochs]),
            "accuracy": epochs[-1]["test_accuracy"], "epochs": len(epochs)}


def run_solos(args, workers, fraction, logs, name):
    """`workers` world-of-one jobs of ours at once, the last slowed to
    `fraction`; the others are killed when it ends. Their rates and sum."""
    jobs, cycle = [], None
    try:
        for i in range(workers):
            slowed = i == workers - 1
            run_dir = os.path.join(logs, f"{name}-{i}")
            argv = ours_argv(args, 1, args.solo_epochs if slowed else 1000, run_dir)
            jobs.append((Job(argv, os.path.join(logs, f"{name}-{i}.log"), env()), run_dir))
        slow_job, slow_dir = jobs[-1]
        pid, _ = ours_worker(slow_job, slow_dir, 0, 1, args.timeout)
        cycle = slow_down(args, pid, fraction)
        rc = slow_job.wait(args.timeout)
        if rc != 0:
            raise RuntimeError(f"the slowed solo exited with {rc}; log {slow_job.log_path}")
        for job, _ in jobs[:-1]:
            job.check("a full-speed solo")
    finally:
        if cycle:
            cycle.stop()
        for job, _ in jobs:
            job.stop()
    slowed_epochs = [e for e in read_events(jobs[-1][1]) if e["event"] == "epoch"]
    slowed = steady_rate([e["samples_per_second"] for e in slowed_epochs])
    # A full-speed solo's epochs that ended while the slowed one still trained.
    end = slowed_epochs[-1]["unix_ms"] if slowed_epochs else 0
    full = [steady_rate([e["samples_per_second"] for e in read_events(run_dir)
                         if e["event"] == "epoch" and e["unix_ms"] <= end])
            for _, run_dir in jobs[:-1]]
    if slowed is None or None in full:
        raise RuntimeError(f"a solo reported no rate (logs {logs}/{name}-*)")
    return {"images_per_second": sum(full) + slowed, "full": full, "slowed": slowed}


SYSTEMS = ("solo", "balance", "no-balance", "ddp")
LABELS = {"solo": "sum of solos", "balance": "ours (--balance)",
          "no-balance": "ours (--no-balance)", "ddp": "PyTorch DDP"}


def notes(system, result, workers):
    if not isinstance(result, dict):
        return result  # why it was not measured
    said = []
    if system == "solo":
        said.append(f"{workers - 1} x {sum(result['full']) / max(len(result['full']), 1):.0f} "
                    f"+ 1 x {result['slowed']:.0f} (slowed)")
    elif system in ("balance", "no-balance"):
        if system == "balance" or result["plans"]:
            said.append(f"{result['plans']} re-plans")
        if "slowed_share" in result:
            last = result["last_shares"]
            others = [w["share"] for w in last["workers"] if w["member"] != result["slowed_member"]]
            said.append(f"slowed worker's share {result['slowed_share']} of "
                        f"{last['step_samples']} (others {'/'.join(map(str, others))})")
        if result["world_at_end"] != workers:
            said.append(f"world {result['world_at_end']} at the end")
        for gone in result["let_go"]:
            said.append(f"let go: worker {gone['member']} ({gone['reason']})")
    return "; ".join(said) or "-"


def resolve(args, parser):
    """auto precision and memory format as our --precision/--memory-format=auto
    would pick them, passed to both sides explicitly (bench/compare.sh)."""
    if args.precision == "auto":
        with open("/proc/cpuinfo") as f:
            flags = set(f.read().split())
        args.precision = "bf16" if flags & {"avx512_bf16", "amx_bf16"} else "fp32"
    if args.memory_format == "auto":
        listed = subprocess.run([args.ours, "--list-models"], capture_output=True, text=True)
        formats = [line.split()[2] for line in listed.stdout.splitlines()
                   if line.split()[:1] == [args.model]]
        if not formats:
            parser.error(f"--model {args.model}: not in {args.ours} --list-models")
        args.memory_format = formats[0]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ours", default=os.path.join(ROOT, "bazel-bin", "trainer", "cifar"),
                        help="trainer binary with --workers and --balance (//trainer:cifar)")
    parser.add_argument("--data-dir", default=os.path.join(ROOT, "..", "shared", "data",
                                                           "cifar10-subset"),
                        help="CIFAR-10 binary files (data_batch_*.bin, test_batch.bin)")
    parser.add_argument("--workers", default="2,4", help="comma-separated world sizes (>= 2)")
    parser.add_argument("--slow", default="0.5,0.25",
                        help="comma-separated fractions of its speed the slowed worker keeps")
    parser.add_argument("--slow-by", choices=["auto", "cgroup", "sigstop"], default="auto",
                        help="cgroup: a CPU quota (cpu.cfs_quota_us, root and cgroup v1's cpu "
                             "controller), as the issue measured; sigstop: a SIGSTOP/SIGCONT duty "
                             "cycle (no root; it also stops the worker while it only waits, so "
                             "it slows it less than a quota does); auto: cgroup where it can")
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help=f"which to run, comma-separated ({', '.join(SYSTEMS)})")
    parser.add_argument("--epochs", type=int, default=4,
                        help="epochs of each job; the first is not counted in images/s")
    parser.add_argument("--solo-epochs", type=int, default=2,
                        help="epochs of the slowed solo (the full-speed solos run as long)")
    parser.add_argument("--model", default="resnet8")
    parser.add_argument("--batch-size", type=int, default=64, help="per worker, a step")
    parser.add_argument("--lr", type=float, default=0.1, help="per worker; x world size")
    parser.add_argument("--warmup-epochs", type=float, default=1.0,
                        help="both sides (ours' own default is 5, the peer's 0)")
    parser.add_argument("--recompute-bn", type=int, default=0,
                        help="both sides; 0: evaluate with the running averages, as PyTorch")
    parser.add_argument("--test-samples", type=int, default=0, help="0: the whole test set")
    parser.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"],
                        help="both sides; auto: bf16 where the CPU has AMX-BF16 or AVX512-BF16")
    parser.add_argument("--memory-format", default="auto",
                        choices=["auto", "contiguous", "channels-last"],
                        help="both sides; auto: the model's in our --list-models")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ours-flag", action="append", default=[],
                        help="one more flag for every job of ours (repeatable), e.g. "
                             "--ours-flag=--let-go-below=0")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a job may take")
    parser.add_argument("--logs", default="",
                        help="keep every job's log and run dir here (default: a new temp dir)")
    parser.add_argument("--json", default="", help="write the results here as JSON")
    args = parser.parse_args(argv)
    args.worlds = [int(w) for w in args.workers.split(",") if w]
    if not args.worlds or min(args.worlds) < 2:
        parser.error("--workers: every world needs at least 2 workers (rank 1 is slowed)")
    args.fractions = [float(f) for f in args.slow.split(",") if f]
    if not args.fractions or not all(0 < f <= 1 for f in args.fractions):
        parser.error("--slow: fractions in (0, 1]")
    if args.slow_by == "auto":
        args.slow_by = "cgroup" if can_use_cgroups() else "sigstop"
    elif args.slow_by == "cgroup" and not can_use_cgroups():
        parser.error(f"--slow-by cgroup: {CGROUP_CPU} is not a writable cgroup v1 cpu controller")
    args.system_list = [s for s in args.systems.split(",") if s]
    for s in args.system_list:
        if s not in SYSTEMS:
            parser.error(f"--systems: unknown {s!r} ({', '.join(SYSTEMS)})")
    if args.epochs < 2 or args.solo_epochs < 2:
        parser.error("--epochs and --solo-epochs: at least 2 (the first is not counted)")
    args.data_dir = os.path.abspath(args.data_dir)
    if not os.path.isfile(os.path.join(args.data_dir, "data_batch_1.bin")):
        parser.error(f"--data-dir {args.data_dir}: no CIFAR-10 binary files")
    if not os.access(args.ours, os.X_OK):
        parser.error(f"--ours {args.ours}: not an executable (bazel build //trainer:cifar)")
    said = subprocess.run([args.ours, "--help"], capture_output=True, text=True)
    if "--balance" not in said.stdout + said.stderr:
        parser.error(f"--ours {args.ours}: has no --balance flag")
    resolve(args, parser)
    return args


def show(value, fmt):
    return "-" if value is None else fmt.format(value)


def main():
    args = parse_args()
    logs = args.logs or tempfile.mkdtemp(prefix="balance_bench.")
    os.makedirs(logs, exist_ok=True)
    results = []
    for workers in args.worlds:
        for fraction in args.fractions:
            row = {"workers": workers, "slow": fraction}
            for system in args.system_list:
                name = f"{system}-w{workers}-s{fraction:g}"
                print(f"running {LABELS[system]} at {workers} workers, one at {fraction:.0%}; "
                      f"log {os.path.join(logs, name)}*", flush=True)
                try:
                    if system == "solo":
                        result = run_solos(args, workers, fraction, logs, name)
                    elif system == "ddp":
                        result = run_ddp(args, workers, fraction, logs, name)
                    else:
                        result = run_ours(args, workers, fraction, system == "balance", logs,
                                          name)
                except (TimeoutError, RuntimeError, OSError, ValueError, KeyError) as e:
                    result = f"not measured: {e}"
                row[system] = result
                if isinstance(result, dict):
                    print(f"  {show(result['images_per_second'], '{:.0f}')} images/s, "
                          f"accuracy {show(result.get('accuracy'), '{:.1%}')}", flush=True)
                else:
                    print(f"  {result}", flush=True)
            results.append(row)
    if args.json:
        settings = {k: getattr(args, k) for k in (
            "model", "batch_size", "lr", "epochs", "solo_epochs", "warmup_epochs",
            "recompute_bn", "test_samples", "precision", "memory_format", "seed", "ours_flag")}
        with open(args.json, "w") as f:
            json.dump({"settings": settings, "period_seconds": PERIOD, "logs": logs,
                       "results": results}, f, indent=1)

    print()
    print(f"# {args.model}, CIFAR-10 subset, batch {args.batch_size}/worker, lr {args.lr} x "
          f"workers, {args.epochs} epochs (images/s over epochs 2..{args.epochs}), 1 thread/"
          f"worker, {args.precision}, {args.memory_format}, {os.cpu_count()} cores; one worker "
          + (f"slowed by a cgroup CPU quota (cpu.cfs_quota_us over {PERIOD * 1000:.0f} ms)"
             if args.slow_by == "cgroup" else
             f"slowed by SIGSTOP/SIGCONT every {PERIOD * 1000:.0f} ms") + f"; logs in {logs}")
    print("| system | workers | slow worker at | images/s | % of solo sum | final acc | notes |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for row in results:
        solo = row.get("solo")
        total = solo["images_per_second"] if isinstance(solo, dict) else None
        for system in args.system_list:
            result = row[system]
            rate = result["images_per_second"] if isinstance(result, dict) else None
            share = rate / total * 100 if rate and total else None
            accuracy = result.get("accuracy") if isinstance(result, dict) else None
            print(f"| {LABELS[system]} | {row['workers']} | {row['slow']:.0%} | "
                  f"{show(rate, '{:.0f}')} | {show(share, '{:.0f}%')} | "
                  f"{show(accuracy, '{:.1%}')} | {notes(system, result, row['workers'])} |")

    def rate(row, system):
        result = row.get(system)
        return result["images_per_second"] if isinstance(result, dict) else None

    pick = next((r for r in results if r["workers"] == 2 and r["slow"] == 0.5), results[0])
    balanced, solo = rate(pick, "balance"), rate(pick, "solo")
    even, ddp = rate(pick, "no-balance"), rate(pick, "ddp")
    if balanced and solo:
        pct = lambda x: f"{x / solo:.0%}" if x else "-"
        line = (f"headline: {pick['workers']} workers, one at {pick['slow']:.0%}: ours balanced "
                f"{balanced:.0f} images/s = {pct(balanced)} of the solo sum (--no-balance "
                f"{pct(even)}, DDP {pct(ddp)})")
        if ddp:
            line += f"; ours balanced / DDP = {balanced / ddp:.2f}x"
        print(line)
    else:
        print("headline: not measured (see the rows above)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
