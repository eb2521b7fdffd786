"""Accuracy against PyTorch DDP on the same recipe, seed by seed.

Trains //trainer:cifar and bench/ddp_peer.py (DDP over Gloo, launched by
torchrun) with the same model, data, batch, optimizer, schedule, warm-up,
augmentation, precision and memory format, for each seed, and compares the
mean test accuracy of the last --last epochs. Every finished run is appended
to --results (JSON lines), so a long comparison can be stopped and resumed, and
ablations (--label with --ours-flag) land next to the baseline.

  /usr/bin/python3 bench/accuracy_bench.py --ours bazel-bin/examples/cifar/cifar \\
      --data-dir ../shared/data/cifar10-subset --seeds 0-4 --epochs 50

Prints a table (one row per seed and a mean/stdev row per side) and a
headline: ours - DDP in points of mean accuracy, and whether every seed of
ours is within the peer's seed-to-seed range.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The interpreter that sees Debian's python3-torch; PEER_PYTHON for another
# (a GPU machine's own PyTorch).
PYTHON = os.environ.get("PEER_PYTHON", "/usr/bin/python3")
OUR_EPOCH = re.compile(r"^epoch (\d+)/\d+ world \d+ \|.*\| test loss [0-9.]+ acc ([0-9.]+)%",
                       re.MULTILINE)


def parse_seeds(text):
    seeds = []
    for part in text.split(","):
        if "-" in part:
            first, last = part.split("-")
            seeds.extend(range(int(first), int(last) + 1))
        else:
            seeds.append(int(part))
    return seeds


def recipe(args, seed):
    """The flags both sides share, in ours' spelling."""
    return ["--model", args.model, "--batch-size", str(args.batch_size), "--epochs",
            str(args.epochs), "--lr", str(args.lr), "--warmup-epochs", str(args.warmup_epochs),
            "--recompute-bn", str(args.recompute_bn),
            "--seed", str(seed), "--threads", "1", "--precision", args.precision,
            "--memory-format", args.memory_format]


def run_ours(args, seed, log):
    command = [args.ours, "--workers", str(args.workers), "--dataset", "cifar10", "--data-dir",
               args.data_dir, "--schedule", "cosine", "--loader-threads", "1",
               "--per-worker-batch", *recipe(args, seed), *args.ours_flag]
    output = run(command, log)
    accuracies = [float(a) / 100 for _, a in OUR_EPOCH.findall(output)]
    return accuracies


def run_ddp(args, seed, log):
    command = [PYTHON, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1",
               "--standalone", "--nproc_per_node", str(args.workers),
               os.path.join(ROOT, "bench", "ddp_peer.py"), "--data-dir", args.data_dir,
               *recipe(args, seed)]
    command += args.ddp_flag
    output = run(command, log, env={"OMP_NUM_THREADS": "1"})
    return [result["test_accuracy"] for result in ddp_epoch_results(output)]


def ddp_epoch_results(output):
    """The peer's per-epoch RESULT lines (bench/ddp_peer.py), as dicts."""
    results = []
    for line in output.splitlines():
        at = line.find("RESULT {")
        if at >= 0:
            result = json.loads(line[at + len("RESULT "):])
            if result.get("kind") == "epoch":
                results.append(result)
    return results


def run(command, log, env=None):
    with open(log, "w") as out:
        out.write(" ".join(command) + "\n")
        out.flush()
        code = subprocess.call(command, stdout=out, stderr=subprocess.STDOUT,
                               env={**os.environ, **(env or {})})
    with open(log) as f:
        output = f.read()
    if code != 0:
        sys.exit(f"{os.path.basename(sys.argv[0])}: {command[0]} exited {code}; its output is in "
                 f"{log}")
    return output


def load(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    return rows


def summary(values):
    mean = statistics.mean(values)
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return mean, spread


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ours", default=os.path.join(ROOT, "bazel-bin/examples/cifar/cifar"))
    parser.add_argument("--data-dir", default=os.path.join(ROOT, "../shared/data/cifar10-subset"))
    parser.add_argument("--seeds", default="0-4", help="e.g. 0-4 or 0,3,7")
    parser.add_argument("--sides", default="ours,ddp")
    parser.add_argument("--model", default="resnet8")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64, help="per worker")
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--lr", type=float, default=0.1, help="per worker; x world size")
    parser.add_argument("--warmup-epochs", type=float, default=2)
    parser.add_argument("--recompute-bn", type=int, default=0,
                        help="batch norm's statistics re-estimated before each evaluation over "
                             "this many training images, both sides; 0: the running averages")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--memory-format", default="channels-last",
                        choices=["contiguous", "channels-last"])
    parser.add_argument("--last", type=int, default=5,
                        help="mean test accuracy of the last N epochs is a run's figure")
    parser.add_argument("--label", default="baseline",
                        help="name of this variant of ours in --results (ablations)")
    parser.add_argument("--ours-flag", action="append", default=[],
                        help="an extra flag for ours only (repeatable), e.g. --ours-flag=--x=1")
    parser.add_argument("--ddp-label", default="ddp",
                        help="name of this variant of the peer in --results (ablations)")
    parser.add_argument("--ddp-flag", action="append", default=[],
                        help="an extra flag for the peer only (repeatable), e.g. "
                             "--ddp-flag=--order=elastic")
    parser.add_argument("--results", default="/tmp/accuracy_bench.jsonl",
                        help="JSON lines, one per finished run; runs already there are reused")
    parser.add_argument("--report-only", action="store_true", help="print the table, run nothing")
    args = parser.parse_args()
    if not os.path.isfile(os.path.join(args.data_dir, "test_batch.bin")):
        parser.error(f"--data-dir {args.data_dir}: no test_batch.bin (the CIFAR-10 subset)")
    args.data_dir = os.path.abspath(args.data_dir)
    seeds = parse_seeds(args.seeds)
    sides = args.sides.split(",")
    key = dict(model=args.model, workers=args.workers, batch_size=args.batch_size,
               epochs=args.epochs, lr=args.lr, warmup_epochs=args.warmup_epochs,
               **({"recompute_bn": args.recompute_bn} if args.recompute_bn else {}),
               precision=args.precision, memory_format=args.memory_format)
    log_dir = os.path.join(os.path.dirname(os.path.abspath(args.results)), "accuracy_bench_logs")
    os.makedirs(log_dir, exist_ok=True)

    def label_of(side):
        return args.label if side == "ours" else args.ddp_label

    def done(side, seed):
        return [r for r in load(args.results) if r["key"] == key and r["side"] == side and
                r["label"] == label_of(side) and r["seed"] == seed]

    if not args.report_only:
        for seed in seeds:
            for side in sides:
                if done(side, seed):
                    continue
                log = os.path.join(log_dir, f"{side}-{label_of(side)}-seed{seed}.log")
                started = time.time()
                print(f"running {side} ({label_of(side)}) seed {seed}; log {log}", flush=True)
                runner = run_ours if side == "ours" else run_ddp
                accuracies = runner(args, seed, log)
                if len(accuracies) != args.epochs:
                    sys.exit(f"accuracy_bench: {side} printed {len(accuracies)} epoch results, "
                             f"expected {args.epochs}; see {log}")
                row = dict(key=key, side=side, label=label_of(side), seed=seed,
                           flags=args.ours_flag if side == "ours" else args.ddp_flag,
                           accuracies=accuracies, seconds=round(time.time() - started, 1))
                with open(args.results, "a") as f:
                    f.write(json.dumps(row) + "\n")
                print(f"  {statistics.mean(accuracies[-args.last:]) * 100:.2f}% "
                      f"in {row['seconds']} s", flush=True)

    figures = {}
    for side in sides:
        for seed in seeds:
            rows = done(side, seed)
            if rows:
                figures.setdefault(side, {})[seed] = statistics.mean(
                    rows[-1]["accuracies"][-args.last:]) * 100
    print(f"\n{args.model}, {args.workers} workers, batch {args.batch_size}/worker, "
          f"{args.epochs} epochs, lr {args.lr} x world, warm-up {args.warmup_epochs}, "
          f"{args.precision}, {args.memory_format}; ours: {args.label} {' '.join(args.ours_flag)}; "
          f"peer: {args.ddp_label} {' '.join(args.ddp_flag)}")
    print(f"mean test accuracy of the last {args.last} epochs, %\n")
    print("| seed | " + " | ".join(label_of(s) for s in sides) + " | ours - DDP |")
    print("| --- |" + " --- |" * (len(sides) + 1))
    for seed in seeds:
        cells = [f"{figures[s][seed]:.2f}" if seed in figures.get(s, {}) else "-" for s in sides]
        diff = "-"
        if seed in figures.get("ours", {}) and seed in figures.get("ddp", {}):
            diff = f"{figures['ours'][seed] - figures['ddp'][seed]:+.2f}"
        print(f"| {seed} | " + " | ".join(cells) + f" | {diff} |")
    stats = {s: summary(list(figures[s].values())) for s in sides if s in figures}
    print("| mean (stdev) | " + " | ".join(
        f"{stats[s][0]:.2f} ({stats[s][1]:.2f})" if s in stats else "-" for s in sides) + " | " +
        (f"**{stats['ours'][0] - stats['ddp'][0]:+.2f}**" if len(stats) == 2 else "-") + " |")
    if "ours" in figures and "ddp" in figures:
        low, high = min(figures["ddp"].values()), max(figures["ddp"].values())
        inside = sum(low <= v for v in figures["ours"].values())
        print(f"\nheadline: ours - DDP = {stats['ours'][0] - stats['ddp'][0]:+.2f} points over "
              f"{len(figures['ours'])} / {len(figures['ddp'])} seeds; {inside} of "
              f"{len(figures['ours'])} seeds of ours at or above the peer's lowest seed "
              f"({low:.2f}; its range {low:.2f}..{high:.2f})")


if __name__ == "__main__":
    main()
