"""nanoGPT's own training loop for its CPU recipe, as its train.py writes it,
to say what that recipe reaches on this machine with Debian's torch 1.13.

  /usr/bin/python3 bench/nanogpt_loop.py --data-dir DIR [--seed 1337 --bias 0 --threads 2]

bench/nanogpt_bench.py compares ours with a DDP peer on the same windows and
the same evaluation; this script is the third point, nanoGPT's procedure itself,
which neither side follows exactly:
  - its model: the GPT of tests/gpt_model.py with nanoGPT's `bias` (False in
    train_shakespeare_char.py) and its init, seeded with torch.manual_seed(seed);
  - its data: every step 12 windows of 64 tokens at random offsets of train.bin
    (get_batch's torch.randint), not epochs of whole windows;
  - its recipe: 2,000 iterations, get_lr's linear warm-up over 100 and cosine
    decay to 1e-4 at 2,000, AdamW (0.9, 0.99) with weight decay 0.1 on the
    parameters of 2 dimensions or more, gradient norm clipped to 1, dropout 0;
  - its evaluation: estimate_loss, the mean of --eval-iters (20) random
    batches of val.bin and of train.bin, every 250 iterations; nanoGPT's
    published 1.88 is that estimate at iteration 2,000.
At the end it also evaluates every window of val.bin as the bench does
(tests/gpt_model.py evaluate: window i = tokens [64 i, 64 i + 65)), and
--estimates N repeats estimate_loss N times on the final model to show how far
one 20-batch estimate strays from that.

The last line: `RESULT {"val_loss_estimate", "train_loss_estimate", "val_loss"
(every window), "estimate_spread" (min, median, max of the repeats),
"tokens_per_second", "seconds", ...}`; EVAL lines before it every 250 iterations.
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from gpt_model import Gpt, evaluate  # noqa: E402


def emit(tag, **fields):
    print(f"{tag} {json.dumps(fields, sort_keys=True)}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True, help="tools/prepare_tokens.py's output")
    parser.add_argument("--seed", type=int, default=1337, help="train.py's torch.manual_seed")
    parser.add_argument("--bias", type=int, choices=(0, 1), default=0)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--max-iters", type=int, default=2000)
    parser.add_argument("--eval-interval", type=int, default=250)
    parser.add_argument("--eval-iters", type=int, default=20)
    parser.add_argument("--estimates", type=int, default=50,
                        help="estimate_loss repeats on the final model (0: none)")
    args = parser.parse_args()
    meta_path = os.path.join(args.data_dir, "meta.json")
    if not os.path.exists(meta_path):
        parser.error(f"--data-dir {args.data_dir}: no meta.json (tools/prepare_tokens.py)")
    with open(meta_path) as f:
        meta = json.load(f)
    dtype = np.uint16 if meta["dtype"] == "uint16" else np.uint32
    data = {split: np.memmap(os.path.join(args.data_dir, f"{split}.bin"), dtype=dtype, mode="r")
            for split in ("train", "val")}
    torch.set_num_threads(args.threads)
    batch, block, lr, min_lr, warmup = 12, 64, 1e-3, 1e-4, 100
    decay = args.max_iters

    torch.manual_seed(args.seed)
    model = Gpt(meta["vocab_size"], block, 4, 4, 128, 0.0, bool(args.bias))
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(
        [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
         {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
        lr=lr, betas=(0.9, 0.99))

    def get_batch(split):
        tokens = data[split]
        ix = torch.randint(len(tokens) - block, (batch,))
        x = torch.stack([torch.from_numpy(tokens[i:i + block].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(tokens[i + 1:i + 1 + block].astype(np.int64))
                         for i in ix])
        return x, y

    def loss_of(x, y):
        logits = model(x)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))

    @torch.no_grad()
    def estimate_loss(split):
        model.eval()
        losses = [loss_of(*get_batch(split)).item() for _ in range(args.eval_iters)]
        model.train()
        return sum(losses) / len(losses)

    def get_lr(it):
        if it < warmup:
            return lr * (it + 1) / (warmup + 1)
        if it > decay:
            return min_lr
        ratio = (it - warmup) / (decay - warmup)
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)

    started, train_seconds, estimate = time.time(), 0.0, {}
    for it in range(args.max_iters + 1):
        for group in optimizer.param_groups:
            group["lr"] = get_lr(it)
        if it % args.eval_interval == 0 or it == args.max_iters:
            estimate = {"train": estimate_loss("train"), "val": estimate_loss("val")}
            emit("EVAL", iter=it, train_loss_estimate=estimate["train"],
                 val_loss_estimate=estimate["val"], elapsed_seconds=time.time() - started)
        if it == args.max_iters:
            break  # train.py's one more update after this evaluation changes nothing it reports
        step_started = time.time()
        loss = loss_of(*get_batch("train"))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        train_seconds += time.time() - step_started

    full = evaluate(model, args.data_dir, block, 0)
    repeats = sorted(estimate_loss("val") for _ in range(args.estimates))
    spread = [repeats[0], repeats[len(repeats) // 2], repeats[-1]] if repeats else []
    emit("RESULT", seed=args.seed, bias=args.bias, iters=args.max_iters,
         val_loss_estimate=estimate["val"], train_loss_estimate=estimate["train"],
         val_loss=full, estimate_spread=spread,
         tokens_per_second=args.max_iters * batch * block / train_seconds,
         seconds=time.time() - started)


if __name__ == "__main__":
    main()
