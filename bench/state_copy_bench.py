"""What the controller's copy of the job's state costs: training images/s of
the same elastic job on two sides, run alternately on this machine so that
drift hits both alike.

--sides copy (default): rank 0 sends the controller the full state every
--copy-every commits, against no copy (--state-copy-every=0). The copy is the
commit rank 0 takes anyway, serialised and sent to the controller (one Cap'n
Proto message of the state's size).

--sides disk: the same copy, kept in the controller's memory only, against
the copy also written to --state-dir (a file of the state's size, fsync'ed,
its SHA-256 in the journal; docs/elastic.md).

The cost the design allows is 3% of images/s for each.

  /usr/bin/python3 bench/state_copy_bench.py --ours BIN --data-dir DIR [--sides disk]
BIN is //trainer:cifar. Each run trains --epochs epochs; the first epoch is
left out (start-up, first allocations). The last line is the headline ratio
(second side / first side) for each model.
"""

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

EPOCH = re.compile(r"epoch (\d+)/\d+ world \d+ \|.*\| ([\d.]+) img/s \|")
COPY = re.compile(r"restoring the controller's copy \(.*, (\d+) bytes\)")


def run(args, model, copy_every, tmp, state_dir=False):
    argv = [args.ours, f"--workers={args.workers}", f"--model={model}", "--dataset=cifar10",
            f"--data-dir={args.data_dir}", f"--epochs={args.epochs}",
            f"--batch-size={args.batch_size}", "--per-worker-batch",
            f"--train-samples={args.train_samples}", "--test-samples=64", "--threads=1", "--loader-threads=1",
            f"--commit-every={args.commit_every}", f"--state-copy-every={copy_every}",
            "--log-every=1000000", "--metrics-port=0", f"--run-dir={tmp}/run", "--seed=1"]
    if state_dir:
        shutil.rmtree(f"{tmp}/state", ignore_errors=True)  # each run a new job
        argv.append(f"--state-dir={tmp}/state")
    out = subprocess.run(argv, capture_output=True, text=True, timeout=args.timeout)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited with {out.returncode}:\n{out.stdout[-2000:]}"
                           f"{out.stderr[-2000:]}")
    rates = [float(m.group(2)) for m in EPOCH.finditer(out.stdout) if int(m.group(1)) > 1]
    if not rates:
        raise RuntimeError(f"no epoch summary after the first:\n{out.stdout[-2000:]}")
    return statistics.mean(rates)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ours", required=True, help="trainer binary (//trainer:cifar)")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--models", default="resnet8,resnet18")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--train-samples", type=int, default=2048)
    parser.add_argument("--commit-every", type=int, default=20, help="the trainer's default")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each setting, alternated")
    parser.add_argument("--copy-every", type=int, default=5,
                        help="--state-copy-every of the runs with a copy (the trainer's default)")
    parser.add_argument("--sides", choices=["copy", "disk"], default="copy",
                        help="copy: no copy against a copy; disk: the copy in memory against "
                        "the copy also written to --state-dir")
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args()
    if args.sides == "copy":
        names = ("no copy", f"copy every {args.copy_every} commits")
        first = lambda model, tmp: run(args, model, 0, tmp)
    else:
        names = (f"copy every {args.copy_every} in memory", "also written to --state-dir")
        first = lambda model, tmp: run(args, model, args.copy_every, tmp)
    second = lambda model, tmp: run(args, model, args.copy_every, tmp, args.sides == "disk")

    rows = []
    with tempfile.TemporaryDirectory(prefix="state_copy_bench_") as tmp:
        for model in args.models.split(","):
            a, b = [], []
            for _ in range(args.repeats):
                a.append(first(model, tmp))
                b.append(second(model, tmp))
                print(f"# {model}: {names[0]} {a[-1]:.1f} img/s, {names[1]} {b[-1]:.1f} img/s",
                      flush=True)
            rows.append((model, a, b))

    print(f"\nState copy cost ({args.sides}), {args.workers} workers x 1 thread, batch "
          f"{args.batch_size}/worker, commit every {args.commit_every} steps, mean images/s of "
          f"epochs 2-{args.epochs} over {args.repeats} alternated runs")
    print(f"model | {names[0]} img/s (runs) | {names[1]} img/s (runs) | ratio")
    runs = lambda xs: ", ".join(f"{x:.1f}" for x in xs)
    for model, a, b in rows:
        ma, mb = statistics.mean(a), statistics.mean(b)
        print(f"{model} | {ma:.1f} ({runs(a)}) | {mb:.1f} ({runs(b)}) | {mb / ma:.3f}")
    print("headline: " + ", ".join(f"{m} {statistics.mean(b) / statistics.mean(a):.3f}x"
                                   for m, a, b in rows) +
          f" of the {names[0]} throughput {names[1]} (target >= 0.97)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
