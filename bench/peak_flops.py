"""The machine's peak FLOP/s as ATen reaches it, and each model's training
FLOPs per image: what bench/compare.sh needs for its fraction-of-peak rows.
Prints one JSON object.

    OMP_NUM_THREADS=1 /usr/bin/python3 bench/peak_flops.py --precision=bf16 --models=resnet8,resnet18

The peak is the best of a few timed 2048 x 2048 matmuls and 1x1 convolutions
of the same size at the precision on torch's threads (as
//bench:train_step_bench measures it); the FLOPs are
torch_peer.forward_flops_per_image x 3 (forward and backward)."""

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_peer import forward_flops_per_image  # noqa: E402
from torch_peer_models import MODELS  # noqa: E402


def best_rate(run, flops):
    """Best FLOP/s of `run` over 3 rounds of at least 0.5 s each."""
    run()
    best = 0.0
    for _ in range(3):
        start, reps = time.perf_counter(), 0
        while True:
            run()
            reps += 1
            seconds = time.perf_counter() - start
            if seconds >= 0.5:
                break
        best = max(best, flops * reps / seconds)
    return best


def peak(dtype, n=2048):
    """The better of a matmul and a 1x1 convolution of the same size: fp32
    matmuls go to the BLAS (Debian's OpenBLAS, one thread here), the
    convolutions to oneDNN, which is what the models' steps run on."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    matmul = best_rate(lambda: torch.mm(a, b), 2.0 * n ** 3)
    x = torch.randn(n // 256, n, 16, 16).to(dtype).contiguous(memory_format=torch.channels_last)
    w = torch.randn(n, n, 1, 1).to(dtype).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        conv = best_rate(lambda: torch.nn.functional.conv2d(x, w), 2.0 * n ** 3)
    return max(matmul, conv)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--models", default="resnet8,resnet18")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    flops = {m: 3 * forward_flops_per_image(MODELS[m]()) for m in args.models.split(",") if m}
    print(json.dumps({"precision": args.precision, "threads": args.threads,
                      "peak_flops": peak(dtype), "train_flops_per_image": flops}))


if __name__ == "__main__":
    main()
