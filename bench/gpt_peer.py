"""The PyTorch DDP peer of our trainer for language models, for
bench/nanogpt_bench.py and bench/spot_trace_bench.py --task gpt: nanoGPT's
training loop (AdamW with its decay groups, gradient-norm clipping, warm-up
and cosine decay counted in steps) around the GPT of tests/gpt_model.py, on the
token files of tools/prepare_tokens.py, with DistributedDataParallel over Gloo.

Launch it the way users do, with torchrun (Debian's python3-torch 1.13.1 under
Python 3.11 needs --redirects/--tee and underscore flag names):

  OMP_NUM_THREADS=1 /usr/bin/python3 -m torch.distributed.run --redirects 1 --tee 1 \\
      --standalone --nproc_per_node 2 bench/gpt_peer.py --data-dir DIR --init gpt.pt \\
      --max-steps 2000 --eval-every 250

Without torchrun's environment it runs as a world of one.

Same work as ours (`cifar --dataset tokens --model-file gpt.pt`):
  - the initial weights: --init, the TorchScript file ours is given
    (tests/gpt_model.py script), loaded into the eager module of the same
    architecture;
  - the windows: an epoch is every window of --context + 1 tokens of
    train.bin at stride --context, from an offset in [0, context) drawn from
    (seed, epoch), as ours cuts them (trainer/data/token_stream.h), in
    DistributedSampler's order; evaluation is every window of val.bin from
    offset 0, sharded over the ranks and summed, as ours;
  - a step: --batch-size windows in all, split over the ranks (ours' default),
    or per rank at lr x world with --per-worker-batch (ours' flag).

What it prints (stdout of rank 0, one JSON line each, as bench/ddp_peer.py):
  START {json}    the process is up
  STEP {json}     with --step-lines, after every step: wall time, restart,
                  epoch, step, world, samples (windows of the step, all ranks),
                  samples_done (the epoch's position after it)
  EVAL {json}     every --eval-every steps and at the end: step, val_loss,
                  wall time
  RESULT {json}   at the end ("kind": "done"): steps, train seconds (steps
                  only), tokens/s of the whole world, the last val_loss
--checkpoint makes a (re)started job resume where the last checkpoint left it,
as torchrun's documentation asks elastic scripts to do.
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, HERE)
from ddp_peer import IndexSet, init_world, mix, save_checkpoint  # noqa: E402
from gpt_model import Gpt  # noqa: E402


def emit(tag, **fields):
    print(f"{tag} {json.dumps(fields, sort_keys=True)}", flush=True)


def tokens_of(data_dir, split):
    with open(os.path.join(data_dir, "meta.json")) as f:
        meta = json.load(f)
    dtype = np.uint16 if meta["dtype"] == "uint16" else np.uint32
    path = os.path.join(data_dir, f"{split}.bin")
    if not os.path.exists(path):
        sys.exit(f"gpt_peer: {path} is missing (tools/prepare_tokens.py)")
    return np.memmap(path, dtype=dtype, mode="r"), meta


def train_windows(tokens, context):
    """Ours' count of training windows: every cut, at any offset, fits."""
    return (len(tokens) - context) // context


def epoch_offset(seed, epoch, context):
    """TokenWindows::Offset: where epoch `epoch`'s cut starts."""
    return mix(mix(seed) ^ epoch) % context


def windows(tokens, starts, context):
    batch = np.stack([tokens[s:s + context + 1].astype(np.int64) for s in starts])
    return torch.from_numpy(batch)


def nanogpt_lr(step, lr, min_lr, warmup, decay):
    """nanoGPT's get_lr at the 1-based step (ours' --warmup-steps, --decay-steps)."""
    if step < warmup:
        return lr * step / warmup
    if step > decay:
        return min_lr
    ratio = (step - warmup) / (decay - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def adamw(model, args, lr):
    """nanoGPT's configure_optimizers: decay for parameters of 2 dimensions or more."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(args.beta1, args.beta2))


def evaluate(model, val, context, rank, world, batch_size):
    """Mean cross-entropy per token over every window of val.bin (offset 0,
    stride context), each rank its share, summed over the ranks."""
    count = (len(val) - 1) // context
    sums = torch.zeros(2, dtype=torch.float64)
    model.eval()
    with torch.no_grad():
        mine = list(range(rank, count, world))
        for first in range(0, len(mine), batch_size):
            batch = windows(val, [i * context for i in mine[first:first + batch_size]], context)
            logits = model(batch[:, :-1])
            sums[0] += F.cross_entropy(logits.reshape(-1, logits.size(-1)).double(),
                                       batch[:, 1:].reshape(-1), reduction="sum").item()
            sums[1] += batch[:, 1:].numel()
    model.train()
    if world > 1:
        dist.all_reduce(sums)
    return sums[0].item() / max(sums[1].item(), 1)


def from_script(path, vocab):
    """The eager GPT of the TorchScript file `path` (tests/gpt_model.py script):
    its architecture read off the module, its weights loaded, dropout 0."""
    init = torch.jit.load(path)
    state = init.state_dict()
    layers = len([k for k in state if k.endswith(".ln_1.weight")])
    heads = getattr(init.h, "0").attn.heads
    model = Gpt(vocab, init.wpe.weight.size(0), layers, heads, init.wte.weight.size(1), 0.0,
                "ln_f.bias" in state)
    model.load_state_dict(state)  # the same weights as ours starts from
    return model


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True, help="train.bin, val.bin and meta.json")
    parser.add_argument("--init", required=True,
                        help="the initial model: a TorchScript GPT of tests/gpt_model.py")
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=12,
                        help="windows a step, split over the ranks")
    parser.add_argument("--per-worker-batch", action="store_true",
                        help="--batch-size per rank, lr x world (ours' --per-worker-batch)")
    parser.add_argument("--max-steps", type=int, default=2000)
    parser.add_argument("--epochs", type=int, default=1000)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--min-lr", type=float, default=1e-4)
    parser.add_argument("--warmup-steps", type=int, default=100)
    parser.add_argument("--decay-steps", type=int, default=2000)
    parser.add_argument("--beta1", type=float, default=0.9)
    parser.add_argument("--beta2", type=float, default=0.99)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--clip-grad", type=float, default=1.0)
    parser.add_argument("--eval-every", type=int, default=250, help="steps; 0: at the end only")
    parser.add_argument("--no-eval", action="store_true", help="never evaluate")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", default="",
                        help="file rank 0 writes every --checkpoint-every steps and after each "
                             "epoch; a (re)started job resumes from it")
    parser.add_argument("--checkpoint-every", type=int, default=0, help="steps; 0: epochs only")
    parser.add_argument("--step-lines", action="store_true", help="a STEP line after every step")
    args = parser.parse_args(argv)
    for name in ("batch_size", "threads", "context", "epochs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if not 0 <= args.beta2 < 1:
        parser.error(f"--beta2 must be in [0, 1), got {args.beta2}")
    if not os.path.isdir(args.data_dir):
        parser.error(f"--data-dir {args.data_dir}: no such directory")
    return args


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    rank, world = init_world()
    if rank == 0:
        emit("START", time=_STARTED, restart=restart, world=world)
    train, meta = tokens_of(args.data_dir, "train")
    val, _ = tokens_of(args.data_dir, "val")
    n = train_windows(train, args.context)

    model = from_script(args.init, meta["vocab_size"])
    if args.per_worker_batch:
        rank_batch, lr = args.batch_size, args.lr * world
    else:
        if args.batch_size % world:
            sys.exit(f"gpt_peer: --batch-size {args.batch_size} does not split evenly over "
                     f"{world} ranks (give --per-worker-batch, or a multiple of the world)")
        rank_batch, lr = args.batch_size // world, args.lr
    global_batch = rank_batch * world
    min_lr = args.min_lr * (lr / args.lr)
    optimizer = adamw(model, args, lr)

    epoch, samples_done, step = 0, 0, 0
    if args.checkpoint and os.path.exists(args.checkpoint):
        state = torch.load(args.checkpoint)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        epoch, samples_done, step = state["epoch"], state["samples_done"], state["step"]
    ddp = DistributedDataParallel(model)  # broadcasts rank 0's parameters
    sampler = DistributedSampler(IndexSet(n), num_replicas=world, rank=rank, shuffle=True,
                                 seed=args.seed)

    def checkpoint():
        if rank == 0 and args.checkpoint:
            save_checkpoint(args.checkpoint, {
                "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "epoch": epoch, "samples_done": samples_done, "step": step})

    def evaluation():
        loss = evaluate(model, val, args.context, rank, world, 64)
        if rank == 0:
            emit("EVAL", step=step, val_loss=loss, time=time.time(),
                 elapsed_seconds=time.time() - _STARTED, restart=restart)
        return loss

    train_seconds, tokens_trained, val_loss, done = 0.0, 0, float("nan"), False
    while epoch < args.epochs and not done:
        sampler.set_epoch(epoch)
        order = list(iter(sampler))  # this rank's windows, DistributedSampler's shuffle
        offset = epoch_offset(args.seed, epoch, args.context)
        # DistributedSampler deals the epoch round the ranks; a step takes the
        # next rank_batch of each rank's share (a restart in another world
        # rounds its position down to a whole step, as bench/ddp_peer.py).
        for i in range(samples_done // global_batch, math.ceil(len(order) / rank_batch)):
            index = order[i * rank_batch:(i + 1) * rank_batch]
            started = time.time()
            batch = windows(train, [offset + w * args.context for w in index], args.context)
            for group in optimizer.param_groups:
                group["lr"] = nanogpt_lr(step + 1, lr, min_lr, args.warmup_steps,
                                         args.decay_steps)
            logits = ddp(batch[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), batch[:, 1:].reshape(-1))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # DDP averages the ranks' equal shares

            if args.clip_grad > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad)
            optimizer.step()
            step += 1
            samples_done = min(n, (i + 1) * global_batch)
            train_seconds += time.time() - started
            tokens_trained += len(index) * world * args.context
            if args.step_lines and rank == 0:
                emit("STEP", time=time.time(), restart=restart, epoch=epoch, step=step,
                     loss=loss.item(), world=world, samples=global_batch,
                     samples_done=samples_done)
            if args.checkpoint_every and step % args.checkpoint_every == 0:
                checkpoint()
            last = args.max_steps and step >= args.max_steps
            if not args.no_eval and args.eval_every and step % args.eval_every == 0 and not last:
                val_loss = evaluation()
            if last:
                done = True
                break
        if not done:
            epoch += 1
            samples_done = 0
            checkpoint()
    if not args.no_eval:
        val_loss = evaluation()
    if rank == 0:
        emit("RESULT", kind="done", world=world, steps=step, train_seconds=train_seconds,
             tokens_per_second=tokens_trained / train_seconds if train_seconds else 0.0,
             val_loss=val_loss, elapsed_seconds=time.time() - _STARTED, restart=restart)
    dist.barrier()
    # torch 1.13 can deadlock when the interpreter tears DDP down; leave at once.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
