"""Saves a model of bench/torch_peer_models.py as a user of --model-file
would: torch.jit.script(model).save(OUT), for bench/model_file_bench.

  script_model.py resnet18|resnet8 OUT.pt [--seed 0]

Run with /usr/bin/python3 (Debian's python3-torch 1.13.1, the LibTorch of the
build): a file from a newer PyTorch is refused by the C++ side."""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_peer_models import MODELS, PARAMETERS  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    model = MODELS[args.model]()
    count = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if count != PARAMETERS[args.model]:
        sys.exit(f"{args.model}: {count} parameters, expected {PARAMETERS[args.model]}")
    # Saved in training mode, as a user's module usually is; the trainer sets
    # the mode itself either way.
    torch.jit.script(model).save(args.out)
    print(f"model={args.model} parameters={count} out={args.out}")


if __name__ == "__main__":
    main()
