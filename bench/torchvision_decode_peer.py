"""The torchvision side of bench/image_decode_bench: one pass after another
over an ImageFolder tree through torchvision's usual training pipeline,

    Resize(S), RandomCrop(S, padding=S // 8), RandomHorizontalFlip(),
    ToTensor(), Normalize(mean, std)

in a DataLoader with num_workers=0 (the decoding runs in this process) and
torch.set_num_threads(1): images per second per core. Prints each timed pass
and, on the last line, `images_per_second=<float>` (their median).

Run with /usr/bin/python3 (Debian's python3-torch and python3-torchvision).
"""

import argparse
import statistics
import time

import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", required=True, help="ImageFolder root (one folder per class)")
    parser.add_argument("--size", type=int, default=64, help="S: the side images are resized to")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--passes", type=int, default=3, help="timed passes after a warm-up")
    parser.add_argument("--mean", default="0.4914,0.4822,0.4465")
    parser.add_argument("--std", default="0.2470,0.2435,0.2616")
    return parser.parse_args()


def main():
    args = parse_args()
    torch.set_num_threads(1)
    mean = [float(v) for v in args.mean.split(",")]
    std = [float(v) for v in args.std.split(",")]
    transform = transforms.Compose([
        transforms.Resize(args.size),
        transforms.RandomCrop(args.size, padding=args.size // 8),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(mean, std),
    ])
    dataset = datasets.ImageFolder(args.root, transform=transform)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=False, num_workers=0)

    def one_pass():
        seen = 0
        start = time.perf_counter()
        for images, _ in loader:
            seen += images.shape[0]
        return seen / (time.perf_counter() - start)

    one_pass()  # warm-up: page cache, lazy imports
    rates = [one_pass() for _ in range(args.passes)]
    for rate in rates:
        print(f"pass images_per_second={rate:.1f}")
    print(f"images_per_second={statistics.median(rates):.1f}")


if __name__ == "__main__":
    main()
