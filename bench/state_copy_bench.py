"""What the controller's copy of the job's state costs: training images/s of
the same elastic job with rank 0 sending the controller the full state at
every commit (--state-copy-every=1, the default) and with no copy
(--state-copy-every=0), run alternately on this machine so that drift hits
both sides alike.

The copy is the commit rank 0 takes anyway, serialised and sent to the
controller (one Cap'n Proto message of the state's size) every
--commit-every steps. The cost the design allows is 3% of images/s.

  /usr/bin/python3 bench/state_copy_bench.py --ours BIN --data-dir DIR
BIN is //trainer:cifar. Each run trains --epochs epochs; the first epoch is
left out (start-up, first allocations). The last line is the headline ratio
(copy / no copy) for each model.
"""

import argparse
import re
import statistics
import subprocess
import sys
import tempfile

EPOCH = re.compile(r"epoch (\d+)/\d+ world \d+ \|.*\| ([\d.]+) img/s \|")
COPY = re.compile(r"restoring the controller's copy \(.*, (\d+) bytes\)")


def run(args, model, copy_every, tmp):
    argv = [args.ours, f"--workers={args.workers}", f"--model={model}", "--dataset=cifar10",
            f"--data-dir={args.data_dir}", f"--epochs={args.epochs}",
            f"--batch-size={args.batch_size}", f"--train-samples={args.train_samples}",
            "--test-samples=64", "--threads=1", "--loader-threads=1",
            f"--commit-every={args.commit_every}", f"--state-copy-every={copy_every}",
            "--log-every=1000000", "--metrics-port=0", f"--run-dir={tmp}/run", "--seed=1"]
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
    parser.add_argument("--copy-every", type=int, default=1,
                        help="--state-copy-every of the runs with a copy (the trainer's default: 5)")
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory(prefix="state_copy_bench_") as tmp:
        for model in args.models.split(","):
            with_copy, without = [], []
            for _ in range(args.repeats):
                without.append(run(args, model, 0, tmp))
                with_copy.append(run(args, model, args.copy_every, tmp))
                print(f"# {model}: no copy {without[-1]:.1f} img/s, copy every "
                      f"{args.copy_every} commits {with_copy[-1]:.1f} img/s", flush=True)
            rows.append((model, statistics.mean(without), statistics.mean(with_copy)))

    print(f"\nState copy cost, {args.workers} workers x 1 thread, batch {args.batch_size}/worker, "
          f"commit every {args.commit_every} steps, mean images/s of epochs 2-{args.epochs} over "
          f"{args.repeats} alternated runs")
    print(f"model | no copy img/s | copy every {args.copy_every} commits img/s | copy / no copy")
    for model, without, with_copy in rows:
        print(f"{model} | {without:.1f} | {with_copy:.1f} | {with_copy / without:.3f}")
    print("headline: " + ", ".join(f"{m} {c / w:.3f}x" for m, w, c in rows) +
          f" of the no-copy throughput with a copy every {args.copy_every} commits "
          "(target >= 0.97)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
