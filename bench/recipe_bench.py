"""The default recipe at every world size: test loss and accuracy per epoch.

Trains //trainer:cifar with its default recipe (one global batch of
--batch-size a step split over the workers and lr --lr at every world size,
reached by a linear warm-up from 0 over --warmup-epochs, default 5; batch
norm's statistics re-estimated before each evaluation, --recompute-bn 1024),
with the old default (--batch-size per worker and lr x world from the first
step, evaluated with the running averages: --per-worker-batch
--warmup-epochs=0 --recompute-bn=0), and PyTorch DDP with the Horovod/DDP
tutorials' recipe (as the old default) at each world size, on the same data,
model, optimizer and schedule. Every finished run is appended to --results (JSON lines), so a long
comparison can be stopped and resumed.

  /usr/bin/python3 bench/recipe_bench.py --ours bazel-bin/examples/cifar/cifar \\
      --data-dir ../shared/data/cifar10-subset --workers 1,2,4,8 --epochs 15

--run-epochs K stops each run after its first K epochs of the --epochs
schedule (the same rates as the whole run, cut short with --max-steps), to see
the first epochs of many configurations cheaply.

Prints one table per system (test loss and accuracy per epoch and world size)
and a headline: the highest test loss of each system's first epoch over the
world sizes, and the final accuracy at the largest world against world 1.
"""

import argparse
import json
import math
import os
import re
import sys
import time

from accuracy_bench import PYTHON, ROOT, ddp_epoch_results, load, run
TRAIN_IMAGES = 4068  # the subset's training set; --train-images for another
OUR_EPOCH = re.compile(
    r"^epoch (\d+)/\d+ world \d+ \|.*\| test loss ([0-9.e+naif-]+) acc ([0-9.]+)%", re.MULTILINE)

SYSTEMS = {
    # name: (side, extra flags)
    "new": ("ours", []),
    "old": ("ours", ["--per-worker-batch", "--warmup-epochs", "0", "--recompute-bn", "0"]),
    "ddp": ("ddp", []),
}


def step_samples(args, side, extra, world):
    """Samples an optimizer step takes: DDP and ours with --per-worker-batch
    take --batch-size per worker, ours by default --batch-size in all."""
    for flag in extra:
        if flag.startswith("--global-batch="):
            return int(flag.split("=", 1)[1])
    if side == "ddp" or "--per-worker-batch" in extra:
        return args.batch_size * world
    return args.batch_size


def recipe(args, seed, world, samples):
    """The flags both sides share, in ours' spelling."""
    flags = ["--model", args.model, "--batch-size", str(args.batch_size), "--epochs",
             str(args.epochs), "--lr", str(args.lr), "--seed", str(seed), "--threads",
             str(args.threads), "--precision", args.precision, "--memory-format",
             args.memory_format]
    if args.run_epochs < args.epochs:
        steps = args.run_epochs * math.ceil(args.train_images / samples)
        flags += ["--max-steps", str(steps)]
    return flags


def run_ours(args, seed, world, extra, log):
    command = [args.ours, "--dataset", "cifar10", "--data-dir", args.data_dir, "--schedule",
               "cosine", "--loader-threads", "1", "--workers", str(world),
               *recipe(args, seed, world, step_samples(args, "ours", extra, world)), *extra]
    output = run(command, log)
    return [(int(e), float(loss), float(acc) / 100) for e, loss, acc in OUR_EPOCH.findall(output)]


def run_ddp(args, seed, world, extra, log):
    command = [PYTHON, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1",
               "--standalone", "--nproc_per_node", str(world),
               os.path.join(ROOT, "bench", "ddp_peer.py"), "--data-dir", args.data_dir,
               *recipe(args, seed, world, step_samples(args, "ddp", extra, world)), *extra]
    output = run(command, log, env={"OMP_NUM_THREADS": str(args.threads)})
    return [(r["epoch"], r["test_loss"], r["test_accuracy"]) for r in ddp_epoch_results(output)]


def parse_list(text):
    return [int(part) for part in text.split(",")]


def show_loss(loss):
    if loss is None or not math.isfinite(loss):
        return "inf"
    return f"{loss:,.0f}" if loss >= 1000 else f"{loss:.3f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ours", default=os.path.join(ROOT, "bazel-bin/examples/cifar/cifar"))
    parser.add_argument("--data-dir", default=os.path.join(ROOT, "../shared/data/cifar10-subset"))
    parser.add_argument("--systems", default="new,old,ddp", help="of " + ",".join(SYSTEMS))
    parser.add_argument("--variant", action="append", default=[],
                        help="another system, NAME=[ddp:]FLAG,FLAG (repeatable; ours unless "
                             "ddp:), e.g. warm1=--warmup-epochs=1 or "
                             "ddp-ours=ddp:--order=elastic,--augmentation=elastic; name it in "
                             "--systems")
    parser.add_argument("--workers", default="1,2,4,8", help="world sizes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--batch-size", type=int, default=128,
                        help="a step's (ours) or per worker (old, ddp)")
    parser.add_argument("--epochs", type=int, default=15, help="the schedule's length")
    parser.add_argument("--run-epochs", type=int, default=0,
                        help="stop each run after this many epochs; 0: --epochs")
    parser.add_argument("--lr", type=float, default=0.1, help="x world size for old and ddp")
    parser.add_argument("--threads", type=int, default=1, help="compute threads per worker")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--memory-format", default="channels-last",
                        choices=["contiguous", "channels-last"])
    parser.add_argument("--train-images", type=int, default=TRAIN_IMAGES)
    parser.add_argument("--results", default="/tmp/recipe_bench.jsonl",
                        help="JSON lines, one per finished run; runs already there are reused")
    parser.add_argument("--report-only", action="store_true", help="print the tables, run nothing")
    args = parser.parse_args()
    if not os.path.isfile(os.path.join(args.data_dir, "test_batch.bin")):
        parser.error(f"--data-dir {args.data_dir}: no test_batch.bin (the CIFAR-10 subset)")
    args.data_dir = os.path.abspath(args.data_dir)
    args.run_epochs = args.run_epochs or args.epochs
    for variant in args.variant:
        name, _, flags = variant.partition("=")
        side = "ours"
        if flags.startswith("ddp:"):
            side, flags = "ddp", flags[len("ddp:"):]
        SYSTEMS[name] = (side, [f for f in flags.split(",") if f])
    systems = args.systems.split(",")
    for system in systems:
        if system not in SYSTEMS:
            parser.error(f"--systems: unknown system '{system}' (of {', '.join(SYSTEMS)})")
    worlds = parse_list(args.workers)
    key = dict(model=args.model, batch_size=args.batch_size, epochs=args.epochs,
               run_epochs=args.run_epochs, lr=args.lr, precision=args.precision,
               memory_format=args.memory_format, seed=args.seed)
    log_dir = os.path.join(os.path.dirname(os.path.abspath(args.results)), "recipe_bench_logs")
    os.makedirs(log_dir, exist_ok=True)

    def done(system, world):
        rows = [r for r in load(args.results)
                if r["key"] == key and r["system"] == system and r["world"] == world]
        return rows[-1] if rows else None

    if not args.report_only:
        for world in worlds:
            for system in systems:
                if done(system, world):
                    continue
                side, extra = SYSTEMS[system]
                log = os.path.join(log_dir, f"{system}-w{world}-e{args.run_epochs}of{args.epochs}"
                                            f"-seed{args.seed}.log")
                print(f"running {system} at world {world}; log {log}", flush=True)
                started = time.time()
                runner = run_ours if side == "ours" else run_ddp
                epochs = runner(args, args.seed, world, extra, log)
                if len(epochs) != args.run_epochs:
                    sys.exit(f"recipe_bench: {system} printed {len(epochs)} epoch results, "
                             f"expected {args.run_epochs}; see {log}")
                row = dict(key=key, system=system, world=world, flags=extra,
                           epochs=[dict(epoch=e, test_loss=l, test_accuracy=a)
                                   for e, l, a in epochs],
                           seconds=round(time.time() - started, 1))
                with open(args.results, "a") as f:
                    f.write(json.dumps(row) + "\n")
                print(f"  epoch 1 test loss {show_loss(epochs[0][1])}, last accuracy "
                      f"{epochs[-1][2] * 100:.2f}% in {row['seconds']} s", flush=True)

    print(f"\n{args.model}, batch {args.batch_size} (a step's, or a worker's with "
          f"--per-worker-batch and ddp), lr {args.lr} (x world for those), cosine over "
          f"{args.epochs} epochs (first {args.run_epochs} run), {args.precision}, "
          f"{args.memory_format}, seed {args.seed}")
    headline = []
    for system in systems:
        side, extra = SYSTEMS[system]
        print(f"\n{system} ({side} {' '.join(extra)}): test loss / accuracy % per epoch\n")
        print("| epoch | " + " | ".join(f"world {w}" for w in worlds) + " |")
        print("| --- |" + " --- |" * len(worlds))
        rows = {w: done(system, w) for w in worlds}
        for e in range(args.run_epochs):
            cells = []
            for w in worlds:
                r = rows[w]
                if r is None or e >= len(r["epochs"]):
                    cells.append("-")
                    continue
                ep = r["epochs"][e]
                cells.append(f"{show_loss(ep['test_loss'])} / {ep['test_accuracy'] * 100:.2f}")
            print(f"| {e + 1} | " + " | ".join(cells) + " |")
        finished = [w for w in worlds if rows[w]]
        if not finished:
            continue
        first = max((rows[w]["epochs"][0]["test_loss"] for w in finished),
                    key=lambda x: x if math.isfinite(x) else float("inf"))
        line = f"{system}: highest first-epoch test loss {show_loss(first)}"
        if 1 in finished and len(finished) > 1:
            top = max(finished)
            gap = (rows[top]["epochs"][-1]["test_accuracy"] -
                   rows[1]["epochs"][-1]["test_accuracy"]) * 100
            line += (f"; accuracy after epoch {args.run_epochs} at world {top} minus world 1: "
                     f"{gap:+.2f} points")
        headline.append(line)
    print()
    for line in headline:
        print(line)


if __name__ == "__main__":
    main()
