"""The PyTorch side of bench/train_step_bench: trains one model from Python
on the same data, batch and thread count as the C++ trainer and prints its
throughput as `images_per_second=<float>` on the last line.

Run with /usr/bin/python3 (Debian's python3-torch 1.13.1)."""

import argparse
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_peer_models import MODELS, PARAMETERS  # noqa: E402

MEAN = torch.tensor([0.4914, 0.4822, 0.4465]).view(1, 3, 1, 1)
STD = torch.tensor([0.2470, 0.2435, 0.2616]).view(1, 3, 1, 1)


def load_cifar10(data_dir):
    """Every data_batch_*.bin in data_dir: uint8 images [N,3,32,32], int64 labels."""
    records = []
    for name in sorted(os.listdir(data_dir)):
        if name.startswith("data_batch_") and name.endswith(".bin"):
            raw = np.fromfile(os.path.join(data_dir, name), dtype=np.uint8)
            if raw.size % 3073 != 0:
                sys.exit(f"{name}: not a whole number of 3073-byte records")
            records.append(raw.reshape(-1, 3073))
    if not records:
        sys.exit(f"no data_batch_*.bin in {data_dir}")
    data = np.concatenate(records)
    images = torch.from_numpy(data[:, 1:].reshape(-1, 3, 32, 32).copy())
    labels = torch.from_numpy(data[:, 0].astype(np.int64))
    return images, labels


def augmented_batch(images, labels, index, generator):
    """Random crop 32 with 4-pixel zero padding, horizontal flip, normalise:
    what the C++ loader does, done on the whole batch with tensor ops."""
    x = images[index].float().div_(255)
    x = F.pad(x, (4, 4, 4, 4))
    n = x.shape[0]
    dy = torch.randint(0, 9, (n,), generator=generator)
    dx = torch.randint(0, 9, (n,), generator=generator)
    flip = torch.rand(n, generator=generator) < 0.5
    out = torch.empty(n, 3, 32, 32)
    for i in range(n):
        crop = x[i, :, dy[i]:dy[i] + 32, dx[i]:dx[i] + 32]
        out[i] = crop.flip(2) if flip[i] else crop
    return (out - MEAN) / STD, labels[index]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", choices=sorted(MODELS), required=True)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup-steps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--amp", action="store_true",
                        help="float16 autocast + GradScaler on CUDA, bfloat16 autocast on CPU")
    args = parser.parse_args()
    device = torch.device(args.device)
    amp_dtype = torch.float16 if args.device == "cuda" else torch.bfloat16
    scaler = torch.cuda.amp.GradScaler(enabled=args.amp and args.device == "cuda")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model = MODELS[args.model]().to(device)
    count = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if count != PARAMETERS[args.model]:
        sys.exit(f"{args.model}: {count} parameters, expected {PARAMETERS[args.model]}")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    images, labels = load_cifar10(args.data_dir)
    generator = torch.Generator().manual_seed(args.seed)
    order = torch.randperm(images.shape[0], generator=generator)
    model.train()

    position = 0
    start = None
    for step in range(args.warmup_steps + args.steps):
        if step == args.warmup_steps:
            start = time.perf_counter()
        if position + args.batch_size > order.numel():
            position = 0
        index = order[position:position + args.batch_size]
        position += args.batch_size
        x, y = augmented_batch(images, labels, index, generator)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        optimizer.zero_grad()
        with torch.autocast(args.device, dtype=amp_dtype, enabled=args.amp):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        loss.item()
    seconds = time.perf_counter() - start
    print(f"model={args.model} threads={torch.get_num_threads()} parameters={count}")
    print(f"images_per_second={args.steps * args.batch_size / seconds:.2f}")


if __name__ == "__main__":
    main()
