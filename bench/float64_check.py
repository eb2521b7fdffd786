"""Ours and the PyTorch DDP peer in float64, step for step, across epoch
boundaries: where (if anywhere) do they part?

Both sides train the same recipe from the same seed (bit-identical initial
weights) on the same samples, crops and flips (the peer with --order=elastic
--augmentation=elastic), in float64 (--precision=fp64: contiguous memory, no
fused kernels, no autocast), each writing every step's state with --trace-dir
(trainer/state_trace.h). Ours runs its elastic path (--workers N: a controller
and N worker processes, commits, evaluations and epoch boundaries as in any
run); the peer runs under torchrun.

Compared after every step: each rank's loss; rank 0's learning rate, every
parameter, every batch-norm buffer and every momentum buffer; and after every
epoch the world's test-loss sum, hits and count. A tensor's difference is
max|ours - peer| / max|peer| (a scalar's |ours - peer| / |peer|). In float64
rounding alone keeps these near 1e-12 for hundreds of steps; a different
method shows at once.

  /usr/bin/python3 bench/float64_check.py --ours bazel-bin/examples/cifar/cifar \\
      --data-dir ../shared/data/cifar10-subset --epochs 3

Prints a table of the largest difference of each kind of quantity per epoch,
then either "agree to TOL for N steps" or the first step and quantity that
parted; exits 1 when something parted.
"""

import argparse
import os
import socket
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from accuracy_bench import PYTHON, ROOT, run  # noqa: E402
from accuracy_bench import recipe as accuracy_recipe  # noqa: E402


def recipe(args):
    """accuracy_bench's shared flags, and the subset limits of a short check."""
    flags = accuracy_recipe(args, args.seed)
    if args.train_samples:
        flags += ["--train-samples", str(args.train_samples)]
    if args.test_samples:
        flags += ["--test-samples", str(args.test_samples)]
    return flags


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ours(args, trace):
    run([args.ours, "--workers", str(args.workers), "--dataset", "cifar10", "--data-dir",
         args.data_dir, "--schedule", "cosine", "--loader-threads", "1", "--trace-dir", trace,
         # The even split, as DDP's: shares sized by speed would give the
         # ranks other batches (and batch norm other statistics) than the peer's.
         "--per-worker-batch", "--no-balance",
         *recipe(args)], os.path.join(args.work, "ours.log"))


def run_peer(args, trace):
    # The static rendezvous: --standalone's elastic agent polls its c10d store
    # every few seconds and failed the launch when a loaded machine (the
    # suite) delayed one reply, after the ranks had trained.
    run([PYTHON, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1",
         "--rdzv_backend", "static", "--master_addr", "127.0.0.1", "--master_port",
         str(free_port()), "--nnodes", "1", "--node_rank", "0",
         "--nproc_per_node", str(args.workers), os.path.join(ROOT, "bench", "ddp_peer.py"),
         "--data-dir", args.data_dir, "--order", "elastic", "--augmentation", "elastic",
         "--trace-dir", trace, *recipe(args)], os.path.join(args.work, "peer.log"),
        env={"OMP_NUM_THREADS": "1"})


def difference(ours, peer):
    """max|ours - peer| / max|peer|; inf when the shapes differ."""
    if ours.shape != peer.shape:
        return float("inf")
    ours, peer = ours.double(), peer.double()
    scale = peer.abs().max().item() if peer.numel() else 0.0
    gap = (ours - peer).abs().max().item() if peer.numel() else 0.0
    if scale == 0.0:
        return 0.0 if gap == 0.0 else float("inf")
    return gap / scale


def kind(key):
    """'param/layer1.0.conv1.weight' -> 'param'."""
    return key.split("/", 1)[0]


def load(trace, rank, name):
    path = os.path.join(trace, f"rank{rank}", name)
    return torch.load(path) if os.path.exists(path) else None


def train_size(args):
    """Training images: the CIFAR-10 binary batches' records, or --train-samples."""
    records = sum(os.path.getsize(os.path.join(args.data_dir, f)) // 3073
                  for f in os.listdir(args.data_dir) if f.startswith("data_batch_"))
    return min(records, args.train_samples) if args.train_samples else records


def steps_per_epoch(args):
    return -(-train_size(args) // (args.workers * args.batch_size))


def compare(args, ours_trace, peer_trace):
    """Every step's and evaluation's differences in the order they happened, as
    (where, quantity, difference); and the number of steps compared."""
    per_epoch = steps_per_epoch(args)
    rows = []
    for step in range(1, per_epoch * args.epochs + 1):
        where = f"step {step}"
        for rank in range(args.workers):
            ours, peer = (load(ours_trace, rank, f"step{step}.pt"),
                          load(peer_trace, rank, f"step{step}.pt"))
            if ours is None or peer is None:
                side = "ours" if ours is None else "the peer"
                rows.append((where, f"rank {rank}'s trace ({side} has none)", float("inf")))
                return rows, step
            # Rank 0's whole state; the other ranks' losses (their parameters and
            # momenta are rank 0's after the allreduce; their batch-norm buffers
            # are their own on both sides until an evaluation takes rank 0's).
            keys = sorted(set(ours) | set(peer)) if rank == 0 else ["loss"]
            for key in keys:
                if key not in ours or key not in peer:
                    rows.append((where, f"{key} (rank {rank}; missing on one side)",
                                 float("inf")))
                else:
                    name = key if rank == 0 else f"loss (rank {rank})"
                    rows.append((where, name, difference(ours[key], peer[key])))
        if step % per_epoch == 0:
            epoch = step // per_epoch
            ours, peer = (load(ours_trace, 0, f"eval{epoch}.pt"),
                          load(peer_trace, 0, f"eval{epoch}.pt"))
            if ours is None or peer is None:
                rows.append((f"eval {epoch}", "the evaluation (missing on one side)",
                             float("inf")))
                return rows, step
            for key in ("loss_sum", "hits", "count"):
                rows.append((f"eval {epoch}", f"eval/{key}", difference(ours[key], peer[key])))
    return rows, per_epoch * args.epochs


def epoch_of(where, steps_per_epoch):
    """'step 33' -> 2 and 'eval 2' -> 2 at 32 steps an epoch."""
    label, number = where.split()
    return int(number) if label == "eval" else (int(number) - 1) // steps_per_epoch + 1


def report(rows, steps, steps_per_epoch, tolerance):
    """The largest difference per epoch and kind of quantity, then the verdict.
    True when nothing parted."""
    worst = {}
    for where, key, diff in rows:
        slot = (epoch_of(where, steps_per_epoch), kind(key) if "/" in key else key.split(" (")[0])
        worst[slot] = max(worst.get(slot, 0.0), diff)
    kinds = sorted({k for _, k in worst})
    print("largest relative difference, per epoch:")
    print("| epoch | " + " | ".join(kinds) + " |")
    print("| --- |" + " --- |" * len(kinds))
    for e in sorted({e for e, _ in worst}):
        cells = [f"{worst[(e, k)]:.1e}" if (e, k) in worst else "-" for k in kinds]
        print(f"| {e} | " + " | ".join(cells) + " |")
    for where, key, diff in rows:
        if diff > tolerance:
            print(f"PARTED at {where}: {key} differs by {diff:.3e} relative (> {tolerance:g})")
            return False
    print(f"AGREE to {tolerance:g} relative on every compared quantity for {steps} steps "
          f"(largest difference {max(d for _, _, d in rows):.1e})")
    return True


def first_gradient_error(args, ours_trace, peer_trace):
    """Each side's step-1 momentum buffers (the first averaged gradient plus
    weight decay: independent of the learning rate) against the float64 run in
    --reference: how far the side's arithmetic is from exact."""
    reference = load(os.path.join(args.reference, "ours"), 0, "step1.pt")
    if reference is None:
        sys.exit(f"float64_check: no rank0/step1.pt under {args.reference}/ours")
    print(f"first gradient against float64 ({args.reference}), relative, over "
          f"{sum(k.startswith('momentum/') for k in reference)} tensors:")
    for side, trace in (("ours", ours_trace), ("peer", peer_trace)):
        state = load(trace, 0, "step1.pt")
        errors = sorted(difference(state[k], reference[k]) for k in reference
                        if k.startswith("momentum/"))
        print(f"  {side}: median {errors[len(errors) // 2]:.1e}, largest {errors[-1]:.1e}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ours", default=os.path.join(ROOT, "bazel-bin/examples/cifar/cifar"))
    parser.add_argument("--data-dir", default=os.path.join(ROOT, "../shared/data/cifar10-subset"))
    parser.add_argument("--model", default="resnet8")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64, help="per worker")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.1, help="per worker; x world size")
    parser.add_argument("--warmup-epochs", type=float, default=2)
    parser.add_argument("--recompute-bn", type=int, default=1024,
                        help="batch norm's statistics re-estimated before each evaluation (ours' "
                             "default); 0: the running averages")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-samples", type=int, default=0, help="0: all")
    parser.add_argument("--test-samples", type=int, default=0, help="0: all")
    parser.add_argument("--tolerance", type=float, default=1e-7)
    parser.add_argument("--precision", default="fp64", choices=["fp64", "fp32"],
                        help="fp32: where the two part in the product's arithmetic")
    parser.add_argument("--memory-format", default="contiguous",
                        choices=["contiguous", "channels-last"])
    parser.add_argument("--work", default="", help="keep the traces and logs here")
    parser.add_argument("--reference", default="",
                        help="the --work of a float64 run of the same recipe: also print how far "
                             "each side's first gradient is from it")
    parser.add_argument("--compare-only", action="store_true",
                        help="compare the traces already in --work")
    args = parser.parse_args()
    for name in ("workers", "batch_size", "epochs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if not os.path.exists(os.path.join(args.data_dir, "test_batch.bin")):
        parser.error(f"--data-dir {args.data_dir}: no test_batch.bin (CIFAR-10 binary)")
    if args.compare_only and not args.work:
        parser.error("--compare-only needs --work")
    if not args.compare_only and not os.access(args.ours, os.X_OK):
        parser.error(f"--ours {args.ours}: not an executable (bazel build //trainer:cifar)")
    keep = bool(args.work)
    args.work = args.work or tempfile.mkdtemp(prefix="float64_check.")
    ours_trace, peer_trace = os.path.join(args.work, "ours"), os.path.join(args.work, "peer")
    if not args.compare_only:
        os.makedirs(args.work, exist_ok=True)
        run_ours(args, ours_trace)
        run_peer(args, peer_trace)
    rows, steps = compare(args, ours_trace, peer_trace)
    agree = report(rows, steps, steps_per_epoch(args), args.tolerance)
    if args.reference:
        first_gradient_error(args, ours_trace, peer_trace)
    if not keep:
        subprocess.call(["rm", "-rf", args.work])
    sys.exit(0 if agree else 1)


if __name__ == "__main__":
    main()
