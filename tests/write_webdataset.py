"""Writes the CIFAR-10 subset's binary files out as WebDataset shards
(tests/webdataset_job_test.cc), with Python's own tarfile, the writer that
WebDataset's TarWriter uses:

  write_webdataset.py CIFAR_DIR OUT [--shard-size N] [--jpeg-every K] [--quality Q]
      OUT/train/shard-000000.tar ... and OUT/test/shard-000000.tar ..., N
      samples per shard, in the binary files' order; sample i is
      %06d.png (lossless) and %06d.cls (its label and a newline); every
      K-th sample a JPEG of quality Q instead.
"""
import argparse
import glob
import io
import os
import tarfile

import numpy as np
from PIL import Image


def read_split(cifar_dir, split):
    names = ["test_batch.bin"] if split == "test" else sorted(
        os.path.basename(p) for p in glob.glob(os.path.join(cifar_dir, "data_batch_*.bin")))
    raw = np.concatenate(
        [np.fromfile(os.path.join(cifar_dir, n), dtype=np.uint8).reshape(-1, 3073) for n in names])
    return raw[:, 1:].reshape(-1, 3, 32, 32), raw[:, 0].astype(np.int64)


def add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("cifar_dir")
    parser.add_argument("out")
    parser.add_argument("--shard-size", type=int, default=256)
    parser.add_argument("--jpeg-every", type=int, default=0)
    parser.add_argument("--quality", type=int, default=95)
    args = parser.parse_args()
    for split in ["train", "test"]:
        images, labels = read_split(args.cifar_dir, split)
        os.makedirs(os.path.join(args.out, split), exist_ok=True)
        for shard, first in enumerate(range(0, len(labels), args.shard_size)):
            path = os.path.join(args.out, split, "shard-%06d.tar" % shard)
            with tarfile.open(path + ".part", "w", format=tarfile.PAX_FORMAT) as tar:
                for i in range(first, min(first + args.shard_size, len(labels))):
                    picture = Image.fromarray(images[i].transpose(1, 2, 0))
                    encoded = io.BytesIO()
                    if args.jpeg_every and i % args.jpeg_every == 0:
                        picture.save(encoded, format="JPEG", quality=args.quality)
                        extension = "jpg"
                    else:
                        picture.save(encoded, format="PNG")
                        extension = "png"
                    add(tar, "%06d.%s" % (i, extension), encoded.getvalue())
                    add(tar, "%06d.cls" % i, b"%d\n" % labels[i])
            os.rename(path + ".part", path)


if __name__ == "__main__":
    main()
