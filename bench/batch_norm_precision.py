"""How far PyTorch's CPU batch norm in float32 is from float64, contiguous
against channels-last, as a channel's mean grows against its spread
(docs/benchmarks.md, "Accuracy, a second look"). Training mode, one forward
and backward on 64x32x16x16 inputs of spread 1.

  OMP_NUM_THREADS=1 /usr/bin/python3 bench/batch_norm_precision.py
"""

import torch
import torch.nn.functional as F

QUANTITIES = ("output", "input gradient", "weight gradient", "running variance")


def batch_norm(x, upstream, weight, bias, dtype, channels_last):
    """The quantities above, as float64, computed in `dtype`."""
    x = x.to(dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    x = x.detach().clone(memory_format=torch.preserve_format).requires_grad_(True)
    w = weight.to(dtype).clone().requires_grad_(True)
    b = bias.to(dtype).clone().requires_grad_(True)
    running_mean = torch.zeros(x.shape[1], dtype=dtype)
    running_var = torch.ones(x.shape[1], dtype=dtype)
    y = F.batch_norm(x, running_mean, running_var, w, b, training=True)
    y.backward(upstream.to(dtype))
    return [t.detach().double() for t in (y, x.grad, w.grad, running_var)]


def relative(value, reference):
    return ((value - reference).abs().max() / reference.abs().max()).item()


def main():
    torch.manual_seed(0)
    print("| channel mean / spread | layout | " + " | ".join(QUANTITIES) + " |")
    print("| --- | --- |" + " --- |" * len(QUANTITIES))
    for mean in (0.0, 10.0, 100.0):
        x = torch.randn(64, 32, 16, 16, dtype=torch.float64) + mean
        upstream = torch.randn_like(x)
        weight = torch.rand(32, dtype=torch.float64) + 0.5
        bias = torch.randn(32, dtype=torch.float64)
        exact = batch_norm(x, upstream, weight, bias, torch.float64, False)
        for channels_last in (False, True):
            got = batch_norm(x, upstream, weight, bias, torch.float32, channels_last)
            cells = [f"{relative(g, e):.1e}" for g, e in zip(got, exact)]
            layout = "channels-last" if channels_last else "contiguous"
            print(f"| {mean:g} | {layout} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
