"""The PyTorch DDP peer of our elastic trainer, for bench/compare.sh and
bench/rescale_bench.py: the same CIFAR-10 binary files, models
(torch_peer_models.py), optimizer, schedule, batch and augmentation as
//trainer:cifar, trained with DistributedDataParallel over Gloo.

Launch it the way users do, with torchrun (Debian's python3-torch 1.13.1 under
Python 3.11 needs --redirects/--tee and underscore flag names):

  OMP_NUM_THREADS=1 /usr/bin/python3 -m torch.distributed.run --redirects 1 --tee 1 \
      --standalone --nproc_per_node 2 bench/ddp_peer.py --model resnet8 \
      --data-dir /work/shared/data/cifar10-subset --epochs 10

Without torchrun's environment it runs as a world of one.

What it prints (stdout of rank 0, one line each, machine-readable):
  START {json}    the process is up (wall time, restart count, time to import torch)
  STEP {json}     after every completed step: wall time, restart count, epoch, step,
                  world size, samples the step trained (all ranks) and the epoch's
                  position after it (samples_done)
  RESULT {json}   after every epoch ("kind": "epoch") and at the end ("kind": "done"):
                  images/s of the whole world and per worker, epoch time, test accuracy
The STEP lines let a harness measure the gap from killing a worker to the
first step after torchrun restarted the job (--max_restarts); --checkpoint
makes the restarted job resume where the last checkpoint left it, which is
what torchrun's documentation asks elastic scripts to do.
"""

import argparse
import json
import math
import os
import sys
import time

_STARTED = time.time()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
from torch.utils.data.distributed import DistributedSampler  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_peer import (augmented_batch, crop_flip_normalise, load_cifar10, MEAN,  # noqa: E402
                        STD)
from torch_peer_models import MODELS, PARAMETERS  # noqa: E402

_IMPORTED = time.time()


def emit(tag, **fields):
    print(f"{tag} {json.dumps(fields, sort_keys=True)}", flush=True)


def load_test_set(data_dir, limit):
    path = os.path.join(data_dir, "test_batch.bin")
    if not os.path.exists(path):
        sys.exit(f"ddp_peer: {path} is missing (CIFAR-10 binary test batch)")
    raw = np.fromfile(path, dtype=np.uint8)
    if raw.size % 3073 != 0:
        sys.exit(f"ddp_peer: {path}: not a whole number of 3073-byte records")
    raw = raw.reshape(-1, 3073)
    if limit > 0:
        raw = raw[:limit]
    images = torch.from_numpy(raw[:, 1:].reshape(-1, 3, 32, 32).copy())
    labels = torch.from_numpy(raw[:, 0].astype(np.int64))
    return images, labels


def cosine_lr(base_lr, epochs_done, epochs, warmup_epochs=0.0, steps_done=0, warmup_steps=0):
    """//trainer's cosine schedule (trainer/schedule.cc): cosine over the epochs
    after warm-up, scaled during warm-up by the smaller of epochs_done /
    warmup_epochs and steps_done / warmup_steps (a length of 0 does not count)."""
    span = epochs - warmup_epochs
    t = min(max((epochs_done - warmup_epochs) / span, 0.0), 1.0) if span > 0 else 1.0
    lr = base_lr * 0.5 * (1 + math.cos(math.pi * t))
    factor = 1.0
    if warmup_epochs > 0:
        factor = min(factor, max(0.0, epochs_done) / warmup_epochs)
    if warmup_steps > 0:
        factor = min(factor, max(0, steps_done) / warmup_steps)
    return lr * factor


MASK = (1 << 64) - 1


def mix(x):
    """SplitMix64's finaliser, as trainer/sampler.cc and trainer/data/augment.cc."""
    x = (x + 0x9e3779b97f4a7c15) & MASK
    x = ((x ^ (x >> 30)) * 0xbf58476d1ce4e5b9) & MASK
    x = ((x ^ (x >> 27)) * 0x94d049bb133111eb) & MASK
    return x ^ (x >> 31)


def elastic_permutation(n, seed, epoch):
    """ElasticSampler::Permutation: a Fisher-Yates shuffle driven by SplitMix64."""
    order = list(range(n))
    state = (seed ^ ((0x5851f42d4c957f2d * (epoch + 1)) & MASK)) & MASK
    for i in range(n - 1, 0, -1):
        j = mix(state) % (i + 1)  # SplitMix64's next output: the finaliser of state + gamma
        state = (state + 0x9e3779b97f4a7c15) & MASK
        order[i], order[j] = order[j], order[i]
    return order


def elastic_rank_order(n, seed, epoch, rank, world, step_samples):
    """The samples rank `rank` trains in epoch `epoch`, step after step, as ours
    (ElasticSampler::StepIndices): each step takes the next step_samples of the
    permutation and gives rank r its r-th contiguous share."""
    order = elastic_permutation(n, seed, epoch)
    mine = []
    for position in range(0, n, step_samples):
        samples = min(step_samples, n - position)
        base, extra = divmod(samples, world)
        begin = position + rank * base + min(rank, extra)
        mine.extend(order[begin:begin + base + (1 if rank < extra else 0)])
    return mine


def elastic_augmented_batch(images, labels, index, seed, epoch):
    """trainer/data/augment.cc's crop offsets and flip, a hash of (seed, epoch, sample)."""
    hashes = [mix(mix(mix(seed) ^ epoch) ^ sample) for sample in index.tolist()]
    return crop_flip_normalise(images, labels, index, [h % 9 for h in hashes],
                               [(h >> 16) % 9 for h in hashes], [(h >> 32) & 1 for h in hashes])


class IndexSet:
    """What DistributedSampler needs of a data set: its length."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def evaluate(model, images, labels, rank, world, batch_size, args):
    """Each rank evaluates its shard with rank 0's batch-norm statistics (what
    evaluating through the DDP wrapper does: its forward broadcasts rank 0's
    buffers; ours broadcasts them before evaluating); the sums are all-reduced."""
    model.eval()
    if world > 1:
        for buffer in model.buffers():
            dist.broadcast(buffer, 0)
    correct = torch.zeros(3, dtype=torch.float64)  # correct, loss sum, count
    with torch.no_grad():
        for start in range(rank * batch_size, images.shape[0], world * batch_size):
            x = unaugmented_input(images[start:start + batch_size], args)
            y = labels[start:start + batch_size].to(args.device)
            with autocast(args):
                out = widened(model(x))
            correct[0] += (out.argmax(1) == y).sum().item()
            correct[1] += F.cross_entropy(out, y, reduction="sum").item()
            correct[2] += y.numel()
    if world > 1:
        dist.all_reduce(correct)
    model.train()
    return correct


def recompute_batch_norm(model, images, epoch, rank, world, args):
    """Ours' --recompute-bn (trainer/batch_norm_statistics.cc): each batch norm's
    statistics become the plain average of its batch statistics over the first
    N images of the epoch's permutation (ours' sampler's), unaugmented, dealt
    round the ranks (rank r takes r, r + world, ...) in batches of
    --batch-size, weighted by batches over the ranks."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    saved = [(m.momentum, m.num_batches_tracked.clone()) for m in norms]
    for m in norms:
        m.momentum = None
        m.running_mean.zero_()
        m.running_var.zero_()
        m.num_batches_tracked.zero_()
    order = elastic_permutation(images.shape[0], args.seed, epoch)
    shard = torch.tensor(order[rank:min(args.recompute_bn, len(order)):world], dtype=torch.int64)
    batches = 0
    model.train()
    with torch.no_grad():
        for start in range(0, shard.numel(), args.batch_size):
            with autocast(args):
                model(unaugmented_input(images[shard[start:start + args.batch_size]], args))
            batches += 1
    for m, (momentum, tracked) in zip(norms, saved):
        m.momentum = momentum
        m.num_batches_tracked.copy_(tracked)
    sums = torch.cat([torch.cat([m.running_mean, m.running_var]).double().cpu() for m in norms])
    sums = torch.cat([sums * batches, torch.tensor([float(batches)], dtype=torch.float64)])
    if world > 1:
        dist.all_reduce(sums)
    total, offset = sums[-1].item(), 0
    for m in norms:
        c = m.running_mean.numel()
        m.running_mean.copy_(sums[offset:offset + c] / total)
        m.running_var.copy_(sums[offset + c:offset + 2 * c] / total)
        offset += 2 * c


def unaugmented_input(raw, args):
    """uint8 images as the model takes them: normalised, on the device, in the
    weight type and memory format (evaluation and the batch-norm re-estimate)."""
    x = (raw.float().div_(255) - MEAN) / STD
    return x.to(args.device, weight_type(args)).contiguous(memory_format=memory_format(args))


def autocast(args):
    """bf16: torch.autocast over forward and loss; otherwise a no-op context."""
    return torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.precision == "bf16")


def weight_type(args):
    return torch.float64 if args.precision == "fp64" else torch.float32


def widened(out):
    """Losses in float32 at least: bf16 outputs widened, fp64's kept (as ours)."""
    return out if out.dtype == torch.float64 else out.float()


def write_trace(path, tensors):
    """One file of --trace-dir, whole or not at all."""
    tmp = f"{path}.tmp"
    torch.save(tensors, tmp)
    os.replace(tmp, path)


def trace_step(args, rank, step, loss, lr, model, optimizer):
    """What ours writes with --trace-dir (trainer/state_trace.h), after the update."""
    tensors = {"loss": torch.tensor(loss, dtype=torch.float64),
               "lr": torch.tensor(lr, dtype=torch.float64)}
    for name, p in model.named_parameters():
        tensors["param/" + name] = p.detach().clone()
        momentum = optimizer.state.get(p, {}).get("momentum_buffer")
        if momentum is not None:
            tensors["momentum/" + name] = momentum.clone()
    for name, b in model.named_buffers():
        tensors["buffer/" + name] = b.clone()
    write_trace(os.path.join(args.trace_dir, f"rank{rank}", f"step{step}.pt"), tensors)


def save_checkpoint(path, state):
    """Temp file, fsync, rename: a kill never leaves half a checkpoint."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=sorted(MODELS), default="resnet8")
    parser.add_argument("--data-dir", required=True,
                        help="directory with data_batch_*.bin and test_batch.bin")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=0,
                        help="stop after this many steps in all (0: no limit)")
    parser.add_argument("--batch-size", type=int, default=128, help="per worker")
    parser.add_argument("--lr", type=float, default=0.1, help="per worker; x world size")
    parser.add_argument("--warmup-epochs", type=float, default=0.0,
                        help="linear warm-up over this many epochs, as ours (--warmup-epochs)")
    parser.add_argument("--warmup-steps", type=int, default=0,
                        help="warm-up lasts at least this many optimizer steps, as ours "
                             "(--warmup-steps)")
    parser.add_argument("--recompute-bn", type=int, default=0,
                        help="before each evaluation, batch norm's statistics re-estimated over "
                             "this many training images, as ours (--recompute-bn); 0: the "
                             "running averages, as PyTorch")
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--weight-decay", type=float, default=5e-4)
    parser.add_argument("--train-samples", type=int, default=0,
                        help="train on the first N training images only; 0: all of them")
    parser.add_argument("--test-samples", type=int, default=0, help="0: the whole test set")
    parser.add_argument("--no-eval", action="store_true", help="skip the test set")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads per worker")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="cuda: every rank on the one visible GPU (Gloo moves the "
                             "gradients; TF32 off, so fp32 stays fp32)")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp64"],
                        help="bf16: torch.autocast('cpu', torch.bfloat16) over forward and loss; "
                             "fp64: model, inputs and loss in float64 (as ours' --precision=fp64)")
    parser.add_argument("--memory-format", default="contiguous",
                        choices=["contiguous", "channels-last"])
    parser.add_argument("--checkpoint", default="",
                        help="file rank 0 writes after each epoch and every "
                             "--checkpoint-every steps; a (re)started job resumes from it")
    parser.add_argument("--checkpoint-every", type=int, default=0, help="steps; 0: epochs only")
    parser.add_argument("--order", default="distributed", choices=["distributed", "elastic"],
                        help="ablation: DistributedSampler's order, or ours (elastic: the same "
                             "permutation and per-rank shares as //trainer:cifar)")
    parser.add_argument("--augmentation", default="torch", choices=["torch", "elastic"],
                        help="ablation: crop and flip from a torch.Generator per (seed, epoch, "
                             "rank), or ours (elastic: the hash of (seed, epoch, sample))")
    parser.add_argument("--trace-dir", default="",
                        help="write every step's and evaluation's state as ours' --trace-dir "
                             "does (trainer/state_trace.h), for bench/float64_check.py")
    parser.add_argument("--step-lines", action="store_true",
                        help="print a STEP line after every step (for restart timing)")
    args = parser.parse_args(argv)
    for name in ("epochs", "batch_size", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.lr <= 0:
        parser.error("--lr must be > 0")
    if not os.path.isdir(args.data_dir):
        parser.error(f"--data-dir {args.data_dir}: no such directory")
    return args


def init_world():
    """torchrun's environment, or a world of one when run directly."""
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="0")
        store = dist.TCPStore("127.0.0.1", 0, 1, True)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    else:
        dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size()


def memory_format(args):
    return torch.channels_last if args.memory_format == "channels-last" else torch.contiguous_format


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    rank, world = init_world()
    if rank == 0:
        emit("START", time=_STARTED, import_seconds=_IMPORTED - _STARTED,
             init_seconds=time.time() - _IMPORTED, restart=restart, world=world)

    torch.manual_seed(args.seed)
    model = MODELS[args.model]()
    count = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if count != PARAMETERS[args.model]:
        sys.exit(f"ddp_peer: {args.model} has {count} parameters, expected {PARAMETERS[args.model]}")
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    model = model.to(args.device, dtype=weight_type(args), memory_format=memory_format(args))
    if args.trace_dir:
        os.makedirs(os.path.join(args.trace_dir, f"rank{rank}"), exist_ok=True)
    images, labels = load_cifar10(args.data_dir)
    if args.train_samples > 0:
        images, labels = images[:args.train_samples], labels[:args.train_samples]
    test_images, test_labels = load_test_set(args.data_dir, args.test_samples)
    base_lr = args.lr * world  # ours: per-worker --lr x world size
    optimizer = torch.optim.SGD(model.parameters(), lr=base_lr, momentum=args.momentum,
                                weight_decay=args.weight_decay)

    epoch, samples_done, step = 0, 0, 0
    if args.checkpoint and os.path.exists(args.checkpoint):
        state = torch.load(args.checkpoint)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        epoch, samples_done, step = state["epoch"], state["samples_done"], state["step"]
    ddp = DistributedDataParallel(model)  # broadcasts rank 0's parameters
    sampler = DistributedSampler(IndexSet(images.shape[0]), num_replicas=world, rank=rank,
                                 shuffle=True, seed=args.seed)
    n = images.shape[0]
    global_batch = world * args.batch_size
    generator = torch.Generator()

    def checkpoint():
        if rank == 0 and args.checkpoint:
            save_checkpoint(args.checkpoint, {
                "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "epoch": epoch, "samples_done": samples_done, "step": step})

    done = False
    while epoch < args.epochs and not done:
        sampler.set_epoch(epoch)
        if args.order == "elastic":
            order = torch.tensor(elastic_rank_order(n, args.seed, epoch, rank, world, global_batch),
                                 dtype=torch.int64)
        else:
            order = torch.tensor(list(iter(sampler)), dtype=torch.int64)
        generator.manual_seed(args.seed * 1000003 + epoch * 1009 + rank)
        first = samples_done // global_batch  # resume inside the epoch after a restart
        steps_in_epoch = math.ceil(order.numel() / args.batch_size)
        epoch_start = time.time()
        images_seen, loss_sum, correct = 0, 0.0, 0
        for i in range(first, steps_in_epoch):
            index = order[i * args.batch_size:(i + 1) * args.batch_size]
            if args.augmentation == "elastic":
                x, y = elastic_augmented_batch(images, labels, index, args.seed, epoch)
            else:
                x, y = augmented_batch(images, labels, index, generator)
            samples_done = min(n, (i + 1) * global_batch)
            for group in optimizer.param_groups:
                group["lr"] = cosine_lr(base_lr, epoch + samples_done / n, args.epochs,
                                        args.warmup_epochs, step + 1, args.warmup_steps)
            x = x.to(args.device, weight_type(args)).contiguous(memory_format=memory_format(args))
            y = y.to(args.device)
            optimizer.zero_grad()
            with autocast(args):
                out = ddp(x)
                loss = F.cross_entropy(widened(out), y)
            loss.backward()
            optimizer.step()
            loss_sum += loss.item() * y.numel()
            correct += (out.argmax(1) == y).sum().item()
            images_seen += y.numel() * world
            step += 1
            if args.trace_dir:
                trace_step(args, rank, step, loss.item(), optimizer.param_groups[0]["lr"], model,
                           optimizer)
            if args.step_lines:
                # The world's mean loss of this step (ours prints the epoch's running mean).
                step_loss = torch.tensor([loss.item() * y.numel(), float(y.numel())],
                                         dtype=torch.float64)
                dist.all_reduce(step_loss)
                if rank == 0:
                    emit("STEP", time=time.time(), restart=restart, epoch=epoch, step=step,
                         loss=step_loss[0].item() / step_loss[1].item(),
                         rank0_loss=loss.item(), world=world,
                         samples=int(step_loss[1].item()), samples_done=samples_done)
            if args.checkpoint_every and step % args.checkpoint_every == 0:
                checkpoint()
            if args.max_steps and step >= args.max_steps:
                done = True
                break
        train_seconds = time.time() - epoch_start
        if args.no_eval:
            accuracy, test_loss = float("nan"), float("nan")
        else:
            if args.recompute_bn > 0:
                recompute_batch_norm(model, images, epoch, rank, world, args)
            sums = evaluate(model, test_images, test_labels, rank, world, args.batch_size, args)
            count = max(sums[2].item(), 1)
            accuracy, test_loss = sums[0].item() / count, sums[1].item() / count
            if args.trace_dir:
                write_trace(os.path.join(args.trace_dir, f"rank{rank}", f"eval{epoch + 1}.pt"),
                            {"loss_sum": sums[1], "hits": sums[0], "count": sums[2]})
        epoch_seconds = time.time() - epoch_start
        rate = images_seen / train_seconds if train_seconds > 0 else 0.0
        seen_here = max(images_seen // world, 1)
        if rank == 0:
            emit("RESULT", kind="epoch", model=args.model, world=world, epoch=epoch + 1,
                 epochs=args.epochs, steps=step, batch_size=args.batch_size, threads=args.threads,
                 images_per_second=round(rate, 2), per_worker_images_per_second=round(rate / world, 2),
                 train_seconds=round(train_seconds, 3), epoch_seconds=round(epoch_seconds, 3),
                 elapsed_seconds=round(time.time() - _STARTED, 3), train_loss=loss_sum / seen_here,
                 train_accuracy=correct / seen_here, test_accuracy=accuracy, test_loss=test_loss,
                 restart=restart)
        if not done:
            epoch += 1
            samples_done = 0
            checkpoint()
    if rank == 0:
        emit("RESULT", kind="done", model=args.model, world=world, epochs=epoch, steps=step,
             elapsed_seconds=round(time.time() - _STARTED, 3), restart=restart)
    dist.barrier()
    # torch 1.13 can deadlock when the interpreter tears DDP down (the Reducer's
    # ProcessGroupGloo destructor waits for a Gloo thread that waits for the
    # GIL; seen here with 2 workers), so leave without running destructors.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
