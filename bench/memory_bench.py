"""Memory of 8 workers on one machine: ours against PyTorch DDP, same data.

Runs //trainer:cifar with --workers W and PyTorch DDP (bench/ddp_peer.py under
torchrun, --nproc_per_node W) one after the other on the same CIFAR-10 binary
files, and samples every worker process's /proc/PID/smaps_rollup while it
trains. Workers are found through /proc: the descendants of the process the
bench started (our driver, torchrun's agent), never by reading logs.

  /usr/bin/python3 bench/memory_bench.py --ours bazel-bin/examples/cifar/cifar \\
      --data-dir ../shared/data/cifar10-subset --repeat 12

--repeat K makes the training set K times longer: the bench writes
data_batch_1..4.bin, each the subset's file repeated K times, and the subset's
test_batch.bin into a temporary directory (K = 12 gives 150 MB of training
data from the 12.5 MB subset). Both sides read that directory.

For each side it prints the peak over the run of the sum over the workers of
  RSS       resident pages mapped by each worker; a page of a shared library or
            of a file mapped by several workers is counted once per worker
  PSS       each resident page divided by the number of processes mapping it:
            what the workers cost the machine together
  private   Private_Clean + Private_Dirty: pages mapped by that worker alone
            (its heap, its copies of the data, and file pages no other
            process maps)
and the largest single worker, then a headline: DDP's sum over ours.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PYTHON = "/usr/bin/python3"
MIB = 1024 * 1024
FIELDS = ("Rss", "Pss", "Private_Clean", "Private_Dirty")


def children_map():
    """pid -> parent pid of every process, from /proc/PID/stat."""
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
        fields = stat[stat.rfind(")") + 2:].split()
        parents[int(entry)] = int(fields[1])
    return parents


def descendants(root):
    parents = children_map()
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        kids = [p for p, parent in parents.items() if parent == pid]
        found.extend(kids)
        frontier.extend(kids)
    return found


def smaps_rollup(pid):
    """{field: bytes} of FIELDS, or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            text = f.read()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in FIELDS:
            out[name] = int(rest.split()[0]) * 1024
    return out if len(out) == len(FIELDS) else None


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class Sampler(threading.Thread):
    """Samples the workers of `root` every `interval` seconds until stopped;
    keeps the peak of each summed field and of each field of one worker."""

    def __init__(self, root, is_worker, interval):
        super().__init__(daemon=True)
        self.root, self.is_worker, self.interval = root, is_worker, interval
        self.peak_sum = dict.fromkeys(("rss", "pss", "private"), 0)
        self.peak_one = dict.fromkeys(("rss", "pss", "private"), 0)
        self.workers_seen = set()
        self.max_workers = 0
        self.samples = 0
        self.stopped = threading.Event()

    def run(self):
        while not self.stopped.is_set():
            self.sample()
            self.stopped.wait(self.interval)

    def sample(self):
        totals = dict.fromkeys(("rss", "pss", "private"), 0)
        count = 0
        for pid in descendants(self.root):
            if not self.is_worker(cmdline(pid)):
                continue
            m = smaps_rollup(pid)
            if m is None:
                continue
            one = {"rss": m["Rss"], "pss": m["Pss"],
                   "private": m["Private_Clean"] + m["Private_Dirty"]}
            for k, v in one.items():
                totals[k] += v
                self.peak_one[k] = max(self.peak_one[k], v)
            self.workers_seen.add(pid)
            count += 1
        if count:
            self.samples += 1
            self.max_workers = max(self.max_workers, count)
            for k, v in totals.items():
                self.peak_sum[k] = max(self.peak_sum[k], v)


def run_side(name, command, env, is_worker, log_path, args):
    with open(log_path, "w") as log:
        started = time.time()
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, **env}, start_new_session=True)
        sampler = Sampler(proc.pid, is_worker, args.interval)
        sampler.start()
        try:
            code = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            code = "timeout"
        sampler.stopped.set()
        sampler.join()
    seconds = time.time() - started
    if code != 0:
        with open(log_path) as f:
            tail = f.read()[-3000:]
        sys.exit(f"{name} failed ({code}); log {log_path}:\n{tail}")
    print(f"{name}: {len(sampler.workers_seen)} worker processes, at most {sampler.max_workers} "
          f"at once, {sampler.samples} samples, {seconds:.0f} s; log {log_path}", flush=True)
    return sampler


def make_data(subset, repeat, out_dir):
    """data_batch_1..4.bin of the subset, each repeated `repeat` times, and its test_batch.bin."""
    total = 0
    names = sorted(n for n in os.listdir(subset) if n.startswith("data_batch_") and n.endswith(".bin"))
    if not names or not os.path.isfile(os.path.join(subset, "test_batch.bin")):
        sys.exit(f"--data-dir {subset}: needs data_batch_*.bin and test_batch.bin")
    for name in names:
        with open(os.path.join(subset, name), "rb") as f:
            data = f.read()
        with open(os.path.join(out_dir, name), "wb") as f:
            for _ in range(repeat):
                f.write(data)
        total += len(data) * repeat
    shutil.copyfile(os.path.join(subset, "test_batch.bin"), os.path.join(out_dir, "test_batch.bin"))
    return total


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ours", default=os.path.join(ROOT, "bazel-bin/examples/cifar/cifar"))
    parser.add_argument("--data-dir", default=os.path.join(ROOT, "../shared/data/cifar10-subset"))
    parser.add_argument("--repeat", type=int, default=1,
                        help="K: each training file repeated K times (a K times longer data set)")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--model", default="resnet8")
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps of each run")
    parser.add_argument("--batch-size", type=int, default=32, help="per worker, both sides")
    parser.add_argument("--test-samples", type=int, default=256)
    parser.add_argument("--interval", type=float, default=0.25, help="seconds between samples")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per side")
    parser.add_argument("--systems", default="ours,ddp", help="ours, ddp or both")
    parser.add_argument("--work-dir", default="", help="keep the data and logs here (default: a "
                        "temporary directory, removed at the end)")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    work = args.work_dir or tempfile.mkdtemp(prefix="memory_bench.")
    os.makedirs(work, exist_ok=True)
    data = os.path.join(work, "data")
    os.makedirs(data, exist_ok=True)
    try:
        train_bytes = make_data(os.path.abspath(args.data_dir), args.repeat, data)
        print(f"data: {data}, training files {train_bytes / MIB:.1f} MiB "
              f"({train_bytes // 3073} images), {args.workers} workers, {args.model}, "
              f"{args.steps} steps of {args.batch_size} images per worker", flush=True)
        results = {}
        shared = ["--model", args.model, "--epochs", "1", "--max-steps", str(args.steps),
                  "--threads", "1", "--test-samples", str(args.test_samples)]
        if "ours" in args.systems:
            command = [os.path.abspath(args.ours), "--dataset", "cifar10", "--data-dir", data,
                       "--workers", str(args.workers), "--loader-threads", "1",
                       "--batch-size", str(args.batch_size * args.workers), "--log-every", "1000",
                       *shared]
            results["ours"] = run_side("ours", command, {}, lambda c: "--role=worker" in c,
                                       os.path.join(work, "ours.log"), args)
        if "ddp" in args.systems:
            command = [PYTHON, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1",
                       "--standalone", "--nproc_per_node", str(args.workers),
                       os.path.join(HERE, "ddp_peer.py"), "--data-dir", data,
                       "--batch-size", str(args.batch_size), *shared]
            results["ddp"] = run_side("ddp", command, {"OMP_NUM_THREADS": "1"},
                                      lambda c: "ddp_peer.py" in c,
                                      os.path.join(work, "ddp.log"), args)
        print()
        print(f"| {args.workers} workers, {train_bytes / MIB:.0f} MiB of training data "
              "| sum RSS MiB | sum PSS MiB | sum private MiB | largest worker RSS / private MiB |")
        print("| --- | --- | --- | --- | --- |")
        for name, s in results.items():
            print(f"| {name} | {s.peak_sum['rss'] / MIB:,.0f} | {s.peak_sum['pss'] / MIB:,.0f} | "
                  f"{s.peak_sum['private'] / MIB:,.0f} | {s.peak_one['rss'] / MIB:,.0f} / "
                  f"{s.peak_one['private'] / MIB:,.0f} |")
        if "ours" in results and "ddp" in results:
            ours, ddp = results["ours"].peak_sum, results["ddp"].peak_sum
            print(f"\nheadline: DDP/ours {ddp['pss'] / ours['pss']:.2f}x the memory of "
                  f"{args.workers} workers (sum of PSS), {ddp['private'] / ours['private']:.2f}x "
                  f"private, {ddp['rss'] / ours['rss']:.2f}x RSS")
    finally:
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
