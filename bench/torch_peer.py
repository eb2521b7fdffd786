"""The PyTorch side of bench/train_step_bench: trains one model from Python
on the same data, batch, thread count, precision and memory format as the
C++ trainer and prints its throughput as `images_per_second=<float>` on the
last line, after `train_flops_per_image=<float>` (2 x the multiply-adds of
every convolution and linear layer in one forward pass, x 3 for forward and
backward: the usual count, which both sides share).

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
    n = len(index)
    dy = torch.randint(0, 9, (n,), generator=generator)
    dx = torch.randint(0, 9, (n,), generator=generator)
    flip = torch.rand(n, generator=generator) < 0.5
    return crop_flip_normalise(images, labels, index, dy, dx, flip)


def crop_flip_normalise(images, labels, index, dy, dx, flip):
    """Sample i's 32x32 window at (dy[i], dx[i]) of its 4-pixel zero-padded
    image, flipped when flip[i], normalised."""
    x = F.pad(images[index].float().div_(255), (4, 4, 4, 4))
    out = torch.empty(len(index), 3, 32, 32)
    for i in range(len(index)):
        crop = x[i, :, dy[i]:dy[i] + 32, dx[i]:dx[i] + 32]
        out[i] = crop.flip(2) if flip[i] else crop
    return (out - MEAN) / STD, labels[index]


def forward_flops_per_image(model):
    """2 x multiply-adds of the convolutions and linear layers for one 32x32 image."""
    total = 0

    def conv(module, inputs, output):
        nonlocal total
        kh, kw = module.kernel_size
        total += 2 * output.numel() * (module.in_channels // module.groups) * kh * kw

    def linear(module, inputs, output):
        nonlocal total
        total += 2 * output.numel() * module.in_features

    handles = []
    for m in model.modules():
        if isinstance(m, torch.nn.Conv2d):
            handles.append(m.register_forward_hook(conv))
        elif isinstance(m, torch.nn.Linear):
            handles.append(m.register_forward_hook(linear))
    was_training = model.training
    model.eval()
    with torch.no_grad():
        model(torch.zeros(1, 3, 32, 32))
    model.train(was_training)
    for h in handles:
        h.remove()
    return total


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
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"],
                        help="autocast dtype (fp16: with GradScaler, CUDA only)")
    parser.add_argument("--memory-format", default="contiguous",
                        choices=["contiguous", "channels-last"])
    args = parser.parse_args()
    device = torch.device(args.device)
    amp = args.precision != "fp32"
    amp_dtype = torch.float16 if args.precision == "fp16" else torch.bfloat16
    scaler = torch.cuda.amp.GradScaler(enabled=args.precision == "fp16")
    memory_format = (torch.channels_last if args.memory_format == "channels-last"
                     else torch.contiguous_format)

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model = MODELS[args.model]().to(device)
    count = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if count != PARAMETERS[args.model]:
        sys.exit(f"{args.model}: {count} parameters, expected {PARAMETERS[args.model]}")
    flops = forward_flops_per_image(model)
    model = model.to(memory_format=memory_format)
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
        x = x.contiguous(memory_format=memory_format)
        optimizer.zero_grad()
        with torch.autocast(args.device, dtype=amp_dtype, enabled=amp):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        loss.item()
    seconds = time.perf_counter() - start
    print(f"model={args.model} threads={torch.get_num_threads()} parameters={count} "
          f"precision={args.precision} memory_format={args.memory_format}")
    print(f"train_flops_per_image={3 * flops:.0f}")
    print(f"images_per_second={args.steps * args.batch_size / seconds:.2f}")


if __name__ == "__main__":
    main()
