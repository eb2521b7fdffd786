"""Accuracy of pytorch-cifar's ResNet18 written in Python and trained by
`cifar --model-file`, against the zoo's ResNet18, seed by seed.

For each seed both start from the zoo's initial weights of that seed (one
step at a learning rate of 1e-9 writes them as state_dict.pt; Python loads them
into tests/pytorch_models.py's ResNet18 and scripts it) and train on the same
recipe, so that the two differ only by float noise (the zoo's fused batch norm
sums in another order). Prints one row per seed, the mean and standard
deviation of each side and of the difference, and a headline.

  bazel build //trainer:cifar
  /usr/bin/python3 bench/model_file_accuracy.py --cifar bazel-bin/examples/cifar/cifar \\
      --data-dir ../shared/data/cifar10-subset --seeds 0-2 --epochs 3
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

from accuracy_bench import parse_seeds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"  # the interpreter that sees Debian's python3-torch
MODELS = os.path.join(ROOT, "tests", "pytorch_models.py")
DONE = re.compile(r"done: .*test accuracy ([0-9.]+)%")


def run(command, log):
    with open(log, "w") as out:
        result = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT)
    text = open(log).read()
    if result.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (result.returncode, " ".join(command), text[-2000:]))
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cifar", default=os.path.join(ROOT, "bazel-bin/examples/cifar/cifar"))
    parser.add_argument("--data-dir", default="/work/shared/data/cifar10-subset")
    parser.add_argument("--seeds", default="0-2")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--precision", default="auto")
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="model-file-accuracy-")
    recipe = ["--data-dir", args.data_dir, "--epochs", str(args.epochs), "--batch-size",
              str(args.batch_size), "--lr", str(args.lr), "--precision", args.precision,
              "--memory-format", "channels-last", "--loader-threads", "1"]
    rows = []
    print("%-6s %10s %12s %8s" % ("seed", "zoo %", "scripted %", "diff"))
    for seed in parse_seeds(args.seeds):
        d = os.path.join(work, "seed%d" % seed)
        seeded = recipe + ["--seed", str(seed)]
        run([args.cifar, "--model", "resnet18", "--checkpoint-dir", d + "/init", "--max-steps", "1",
             "--lr", "1e-9", "--train-samples", "64", "--test-samples", "64", "--seed", str(seed),
             "--data-dir", args.data_dir], d + "-init.log")
        run([PYTHON, MODELS, "script", "resnet18", d + "/resnet18.pt", "--init",
             d + "/init/state_dict.pt"], d + "-script.log")
        zoo = float(DONE.search(run([args.cifar, "--model", "resnet18"] + seeded,
                                    d + "-zoo.log")).group(1))
        scripted = float(DONE.search(run([args.cifar, "--model-file", d + "/resnet18.pt"] +
                                         seeded, d + "-scripted.log")).group(1))
        rows.append((zoo, scripted))
        print("%-6d %10.2f %12.2f %+8.2f" % (seed, zoo, scripted, scripted - zoo), flush=True)
    zoo = [r[0] for r in rows]
    scripted = [r[1] for r in rows]
    diff = [s - z for z, s in rows]
    sd = lambda v: statistics.stdev(v) if len(v) > 1 else 0.0
    print("%-6s %10.2f %12.2f %+8.2f" % ("mean", statistics.mean(zoo), statistics.mean(scripted),
                                          statistics.mean(diff)))
    print("%-6s %10.2f %12.2f %8.2f" % ("stdev", sd(zoo), sd(scripted), sd(diff)))
    print("headline: scripted ResNet18 %+.2f points against the zoo's (mean of %d seeds; "
          "target within 1.5)" % (statistics.mean(diff), len(rows)))


if __name__ == "__main__":
    main()
