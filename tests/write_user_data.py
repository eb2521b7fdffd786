"""Writes the CIFAR-10 subset's binary files out as a user's data would come
(tests/user_data_test.cc): .npy arrays and an ImageFolder tree.

  write_user_data.py npy CIFAR_DIR OUT [--layout nhwc|nchw]
      OUT/train_x.npy uint8 images, OUT/train_y.npy int64 labels, and the
      same for test_.
  write_user_data.py folder CIFAR_DIR OUT [--jpeg-every K] [--quality Q]
      OUT/train/<class>/NNNNN.png and OUT/test/<class>/...; every K-th image
      (by index) a JPEG of quality Q instead of a PNG.
"""
import argparse
import glob
import os

import numpy as np
from PIL import Image


def read_split(cifar_dir, split):
    names = ["test_batch.bin"] if split == "test" else sorted(
        os.path.basename(p) for p in glob.glob(os.path.join(cifar_dir, "data_batch_*.bin")))
    raw = np.concatenate(
        [np.fromfile(os.path.join(cifar_dir, n), dtype=np.uint8).reshape(-1, 3073) for n in names])
    return raw[:, 1:].reshape(-1, 3, 32, 32), raw[:, 0].astype(np.int64)


def class_names(cifar_dir):
    with open(os.path.join(cifar_dir, "batches.meta.txt")) as f:
        return [line.strip() for line in f if line.strip()]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("format", choices=["npy", "folder"])
    parser.add_argument("cifar_dir")
    parser.add_argument("out")
    parser.add_argument("--layout", choices=["nhwc", "nchw"], default="nhwc")
    parser.add_argument("--jpeg-every", type=int, default=0)
    parser.add_argument("--quality", type=int, default=95)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    names = class_names(args.cifar_dir)
    for split in ["train", "test"]:
        images, labels = read_split(args.cifar_dir, split)
        if args.format == "npy":
            x = images.transpose(0, 2, 3, 1) if args.layout == "nhwc" else images
            np.save(os.path.join(args.out, split + "_x.npy"), np.ascontiguousarray(x))
            np.save(os.path.join(args.out, split + "_y.npy"), labels)
            continue
        for i, (image, label) in enumerate(zip(images, labels)):
            folder = os.path.join(args.out, split, names[label])
            os.makedirs(folder, exist_ok=True)
            picture = Image.fromarray(image.transpose(1, 2, 0))
            if args.jpeg_every and i % args.jpeg_every == 0:
                picture.save(os.path.join(folder, "%05d.jpg" % i), quality=args.quality)
            else:
                picture.save(os.path.join(folder, "%05d.png" % i))


if __name__ == "__main__":
    main()
