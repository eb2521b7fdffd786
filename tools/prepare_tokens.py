#!/usr/bin/env python3
"""Prepares a text file for `--dataset tokens` at character level.

Does what nanoGPT's data/shakespeare_char/prepare.py does: the vocabulary is
the sorted set of the text's characters, the first 90% of the characters are
the training split and the rest the validation split, and the ids are written
as flat uint16 files (train.bin, val.bin). Instead of nanoGPT's meta.pkl it
writes meta.json, which the C++ reader (trainer/data/token_stream.h) reads:

    {"vocab_size": 65, "dtype": "uint16", "itos": ["\\n", " ", "!", ...]}

Usage:
    /usr/bin/python3 tools/prepare_tokens.py \
        --input ../shared/data/tinyshakespeare/input.txt --out DIR

For tiny Shakespeare: train 1,003,854 tokens, val 111,540 tokens, vocab 65.
Every file is written to a temporary name and renamed, so a reader never sees
a half-written file.
"""

import argparse
import json
import os
import sys

import numpy as np


def write_atomically(path, data):
    """Writes bytes to `path` via a temporary file in the same directory."""
    tmp = path + ".tmp.%d" % os.getpid()
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", required=True, help="the text file (UTF-8)")
    parser.add_argument("--out", required=True, help="where train.bin, val.bin and meta.json go")
    args = parser.parse_args(argv)

    with open(args.input, "r", encoding="utf-8") as f:
        data = f.read()
    if not data:
        sys.exit("%s: empty; there is nothing to tokenise" % args.input)
    chars = sorted(set(data))
    vocab_size = len(chars)
    # nanoGPT writes uint16; a text with more distinct characters needs uint32.
    dtype = np.uint16 if vocab_size <= 1 << 16 else np.uint32
    stoi = {ch: i for i, ch in enumerate(chars)}

    n = len(data)
    split = int(n * 0.9)
    train_ids = np.array([stoi[c] for c in data[:split]], dtype=dtype)
    val_ids = np.array([stoi[c] for c in data[split:]], dtype=dtype)
    meta = {"vocab_size": vocab_size, "dtype": np.dtype(dtype).name, "itos": chars}

    os.makedirs(args.out, exist_ok=True)
    # Little-endian whatever the machine, as the C++ reader expects.
    little = np.dtype(dtype).newbyteorder("<")
    write_atomically(os.path.join(args.out, "train.bin"), train_ids.astype(little).tobytes())
    write_atomically(os.path.join(args.out, "val.bin"), val_ids.astype(little).tobytes())
    write_atomically(
        os.path.join(args.out, "meta.json"),
        (json.dumps(meta, ensure_ascii=False) + "\n").encode("utf-8"),
    )

    print("length of dataset in characters: {:,}".format(n))
    print("vocab size: {:,}".format(vocab_size))
    print("train has {:,} tokens".format(len(train_ids)))
    print("val has {:,} tokens".format(len(val_ids)))
    print("wrote {}/train.bin, val.bin and meta.json ({})".format(
        args.out, np.dtype(dtype).name))


if __name__ == "__main__":
    main(sys.argv[1:])
