"""Is a high test loss the weights, or batch norm's running statistics?

Loads the parameters and buffers that a run wrote with --trace-dir after a
step (DIR/rank0/stepN.pt, ours or the DDP peer) into the peer's model, and
evaluates the test set three ways:

  running      eval mode with the trained running statistics (what the run printed)
  recomputed   eval mode with statistics re-estimated over the training set at
               these weights (a plain average over its batches, no augmentation:
               "precise BN", Wu and Johnson, "Rethinking 'Batch' in BatchNorm")
  batch        train-mode batch norm, each test batch normalised by its own statistics

  /usr/bin/python3 bench/bn_statistics_check.py --trace-dir DIR --steps 32,64 \\
      --data-dir ../shared/data/cifar10-subset --model resnet18

When `recomputed` is near the training loss and `running` is far above it,
the weights are fine and the running averages lag them.
"""

import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_peer import MEAN, STD, load_cifar10  # noqa: E402
from torch_peer_models import MODELS  # noqa: E402
from ddp_peer import load_test_set  # noqa: E402


def load_state(model, path):
    trace = torch.load(path)
    state = {}
    for key, value in trace.items():
        kind, _, name = key.partition("/")
        if kind in ("param", "buffer"):
            state[name] = value.float()
    missing = set(model.state_dict()) - set(state)
    if missing:
        sys.exit(f"bn_statistics_check: {path} lacks {sorted(missing)[:3]}...")
    model.load_state_dict(state)
    return trace


def normalised(images):
    return (images.float().div_(255) - MEAN) / STD


def evaluate(model, images, labels, batch, train_mode):
    model.train(train_mode)
    loss, hits = 0.0, 0
    with torch.no_grad():
        for start in range(0, images.shape[0], batch):
            x, y = normalised(images[start:start + batch]), labels[start:start + batch]
            out = model(x).float()
            loss += F.cross_entropy(out, y, reduction="sum").item()
            hits += (out.argmax(1) == y).sum().item()
    return loss / images.shape[0], hits / images.shape[0]


def recompute_statistics(model, images, batch):
    """Running statistics as the plain mean over the training set's batches."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # cumulative moving average
    model.train()
    with torch.no_grad():
        for start in range(0, images.shape[0], batch):
            model(normalised(images[start:start + batch]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace-dir", required=True)
    parser.add_argument("--steps", required=True, help="comma-separated step numbers")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--model", default="resnet18", choices=sorted(MODELS))
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--samples", type=int, default=0,
                        help="re-estimate over the first N training images; 0: all")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    train_images, _ = load_cifar10(args.data_dir)
    if args.samples > 0:
        train_images = train_images[:args.samples]
    test_images, test_labels = load_test_set(args.data_dir, 0)
    print("| step | lr | running: test loss / acc | recomputed | batch |")
    print("| --- | --- | --- | --- | --- |")
    for step in [int(s) for s in args.steps.split(",")]:
        path = os.path.join(args.trace_dir, "rank0", f"step{step}.pt")
        model = MODELS[args.model]()
        trace = load_state(model, path)
        cells = [evaluate(model, test_images, test_labels, args.batch_size, False)]
        cells.append(evaluate(model, test_images, test_labels, args.batch_size, True))
        load_state(model, path)
        recompute_statistics(model, train_images, args.batch_size)
        cells.insert(1, evaluate(model, test_images, test_labels, args.batch_size, False))
        text = " | ".join(f"{loss:.3f} / {acc * 100:.2f}%" for loss, acc in cells)
        print(f"| {step} | {trace['lr'].item():.4g} | {text} |", flush=True)


if __name__ == "__main__":
    main()
