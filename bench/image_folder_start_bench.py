"""Image-folder start: time from launch to the first training step on a
folder of small JPEGs, ours (//trainer:cifar --dataset image-folder) next to
torchvision's ImageFolder + DataLoader up to its first batch, both in one run.

The folders are generated in a temporary directory (--work-dir): N files of
32x32 JPEG (64 distinct images, ~700 bytes each, copied round-robin), 90% in
train/ and 10% in test/, in N/1000 classes (at least 10, at most 1000).

Rows, per folder size and page cache (cold: `sync; echo 3 >
/proc/sys/vm/drop_caches` right before the timed launch, which needs root;
warm: the same launch once before, untimed); each figure is the median of
--repeats launches (3), the four kinds and the sizes taking turns:

  ours, first job   `cifar --workers 1` on a folder without an index: the
                    driver lists the folder, reads every header, decodes
                    1,000 images for the normalisation, writes the index, then
                    starts its worker, which reads the index. Launch -> the
                    first step ("epoch 1/... step 1/").
  ours, next job    the same with the index in place: the driver lists the
                    folder (names and sizes) and finds the index current;
                    nothing is probed or decoded before training.
  ours, joiner      `cifar --join HOST:PORT --workers 1` into a running job of
                    one worker (--commit-every 1): the joiner's worker reads
                    the index its job pinned and lists nothing. Launch of the
                    joiner -> the first step of the generation that has it
                    (the driver's "rescale: generation G (2 workers ...):
                    first step" line). Beside it, from the joiner's
                    worker's ELASTIC_IMAGE_FOLDER_COUNTERS file: its
                    seconds in LoadImageFolder (mapping and viewing the
                    index) and its header probes (0).
  torchvision       /usr/bin/python3: import torch and torchvision,
                    ImageFolder(train/) (lists the folder, reads no image),
                    DataLoader(batch 128, shuffle, num_workers 0) with
                    Resize(32), ToTensor(), Normalize(...). Launch -> first
                    batch. Its listing time alone is shown beside.

  /usr/bin/python3 bench/image_folder_start_bench.py --ours bazel-bin/examples/cifar/cifar
  /usr/bin/python3 bench/image_folder_start_bench.py --ours bazel-bin/examples/cifar/cifar --million

The last line is the headline: a joiner's time to its first step at each
size, against torchvision's first batch, from a cold page cache.
"""

import argparse
import io
import json
import os
import queue
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

PYTHON = "/usr/bin/python3"  # the interpreter that sees Debian's torch and torchvision

FIRST_STEP = re.compile(r"^epoch 1/\d+ step 1/")
RESCALE = re.compile(r"driver: rescale: generation (\d+) \((\d+) workers.*first step")
LISTEN = re.compile(r"head listening on ([\d.]+):(\d+)")

TORCHVISION_PEER = r"""
import sys, time
t0 = time.time()
import torch, torchvision
from torchvision import transforms
torch.set_num_threads(1)
imported = time.time()
tf = transforms.Compose([transforms.Resize((32, 32)), transforms.ToTensor(),
                         transforms.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))])
data = torchvision.datasets.ImageFolder(sys.argv[1], transform=tf)
listed = time.time()
loader = torch.utils.data.DataLoader(data, batch_size=128, shuffle=True, num_workers=0)
x, y = next(iter(loader))
print("FIRST_BATCH", len(data), f"{imported - t0:.3f}", f"{listed - imported:.3f}", flush=True)
"""


class Job:
    """A process group of ours whose output lines are read as they come,
    each stamped with the time it was read."""

    def __init__(self, argv, env=None):
        self.argv = argv
        self.lines = queue.Queue()
        self.output = []
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     env=env, start_new_session=True, text=True, bufsize=1)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put((time.time(), line.rstrip("\n")))
        self.lines.put((time.time(), None))

    def wait_for(self, pattern, timeout):
        """(read time, match) of the first line matching `pattern`."""
        deadline = time.time() + timeout
        while True:
            left = deadline - time.time()
            if left <= 0:
                raise TimeoutError(f"no line matching {pattern.pattern!r} in {timeout:.0f} s from "
                                   f"{' '.join(self.argv[:2])}:\n" + "\n".join(self.output[-30:]))
            try:
                now, line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise RuntimeError(f"{' '.join(self.argv[:2])} exited with {self.proc.wait()}:\n" +
                                   "\n".join(self.output[-30:]))
            self.output.append(line)
            m = pattern.search(line)
            if m:
                return now, m

    def stop(self):
        """SIGKILL to the group: a measurement needs no checkpoint."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def can_drop_caches():
    return os.access("/proc/sys/vm/drop_caches", os.W_OK)


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def generate(root, n):
    """The folder of n JPEGs under root (reused when a complete one is there)."""
    marker = os.path.join(root, ".complete")
    if os.path.exists(marker):
        return
    from PIL import Image
    shutil.rmtree(root, ignore_errors=True)
    rng = random.Random(n)
    blobs = []
    for _ in range(64):
        image = Image.new("RGB", (32, 32))
        a = [rng.randrange(256) for _ in range(6)]
        image.putdata([(a[0] + x * a[3] // 32 & 255, a[1] + y * a[4] // 32 & 255,
                        a[2] + (x + y) * a[5] // 64 & 255) for y in range(32) for x in range(32)])
        out = io.BytesIO()
        image.save(out, "JPEG", quality=90)
        blobs.append(out.getvalue())
    classes = max(10, min(1000, n // 1000))
    train = n * 9 // 10
    started = time.time()
    written = 0
    for split, count in (("train", train), ("test", n - train)):
        for k in range(classes):
            folder = os.path.join(root, split, f"class{k:04d}")
            os.makedirs(folder, exist_ok=True)
            per_class = count // classes + (1 if k < count % classes else 0)
            for i in range(per_class):
                with open(os.path.join(folder, f"{i:07d}.jpg"), "wb") as f:
                    f.write(blobs[(k * 7 + i) % len(blobs)])
                written += 1
    with open(marker, "w") as f:
        f.write(f"{n}\n")
    print(f"generated {written} JPEGs in {root} ({classes} classes) in "
          f"{time.time() - started:.1f} s", file=sys.stderr, flush=True)


def remove_index(folder, cache):
    for name in (".elastic-image-index", ".elastic-image-index.lock"):
        try:
            os.remove(os.path.join(folder, name))
        except FileNotFoundError:
            pass
    shutil.rmtree(os.path.join(cache, "image-index"), ignore_errors=True)


def job_flags(ours, folder, run_dir):
    return [ours, "--workers=1", "--dataset=image-folder", f"--data-dir={folder}",
            "--model=resnet8", "--batch-size=128", "--loader-threads=1", "--log-every=1",
            "--warmup-epochs=0", "--test-samples=128", f"--run-dir={run_dir}"]


def time_first_step(args, env, cold, timeout):
    """Seconds from launch to the job's first step (a fresh job of `args`)."""
    if cold:
        drop_caches()
    started = time.time()
    job = Job(args + ["--max-steps=3"], env)
    try:
        now, _ = job.wait_for(FIRST_STEP, timeout)
        return now - started
    finally:
        job.stop()


def time_joiner(ours, folder, work, env, cold, timeout):
    """(seconds from the joiner's launch to the first step of its generation,
    its worker's header probes, its worker's seconds in LoadImageFolder)."""
    token = os.path.join(work, "token")
    counters = os.path.join(work, "joiner-counters")
    shutil.rmtree(counters, ignore_errors=True)
    os.makedirs(counters)
    driver = Job(job_flags(ours, folder, os.path.join(work, "runs")) +
                 ["--max-steps=1000000", "--commit-every=1", f"--token-file={token}"], env)
    joiner = None
    try:
        _, listen = driver.wait_for(LISTEN, timeout)
        driver.wait_for(re.compile(r"^epoch 1/\d+ step 3/"), timeout)
        if cold:
            drop_caches()
        joiner_env = dict(env, ELASTIC_IMAGE_FOLDER_COUNTERS=counters)
        started = time.time()
        joiner = Job([ours, f"--join={listen.group(1)}:{listen.group(2)}", "--workers=1",
                      f"--token-file={token}"], joiner_env)
        while True:
            now, m = driver.wait_for(RESCALE, timeout)
            if int(m.group(2)) == 2:
                break
        probes, load = 0, 0.0
        for name in os.listdir(counters):
            with open(os.path.join(counters, name)) as f:
                counted = json.load(f)
            probes += counted["headers_probed"]
            load = max(load, counted["load_seconds"])
        return now - started, probes, load
    finally:
        if joiner:
            joiner.stop()
        driver.stop()


def time_torchvision(folder, cold, timeout):
    """(launch -> first batch, listing alone) of torchvision's ImageFolder."""
    if cold:
        drop_caches()
    started = time.time()
    out = subprocess.run([PYTHON, "-c", TORCHVISION_PEER, os.path.join(folder, "train")],
                         capture_output=True, text=True, timeout=timeout)
    finished = time.time()
    m = re.search(r"FIRST_BATCH (\d+) ([\d.]+) ([\d.]+)", out.stdout)
    if out.returncode != 0 or not m:
        raise RuntimeError(f"torchvision peer failed: {out.stdout}\n{out.stderr}")
    return finished - started, float(m.group(3))


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def measure(ours, sizes, work, cache_state, repeats, timeout):
    """The rows of one page-cache state: every figure the median of `repeats`
    launches, the sizes taking turns within each round, so that a change in the
    machine's load spreads over all of them rather than falling on one."""
    cold = cache_state == "cold"
    cache = os.path.join(work, "cache")
    env = dict(os.environ, ELASTIC_CACHE=cache)
    folders = {n: os.path.join(work, f"folder-{n}") for n in sizes}
    flags = {n: job_flags(ours, folders[n], os.path.join(work, "runs")) for n in sizes}
    if not cold:  # warm: everything once before, untimed
        for n in sizes:
            remove_index(folders[n], cache)
            time_first_step(flags[n], env, False, timeout)
            time_torchvision(folders[n], False, timeout)
    runs = {n: {"first_job": [], "next_job": [], "joiner": [], "joiner_probes": [], "joiner_load": [],
                "torchvision": [], "torchvision_listing": []} for n in sizes}
    for _ in range(repeats):
        for n in sizes:
            r = runs[n]
            remove_index(folders[n], cache)
            r["first_job"].append(time_first_step(flags[n], env, cold, timeout))
            r["next_job"].append(time_first_step(flags[n], env, cold, timeout))
            seconds, probed, load = time_joiner(ours, folders[n], work, env, cold, timeout)
            r["joiner"].append(seconds)
            r["joiner_probes"].append(probed)
            r["joiner_load"].append(load)
            seconds, listed = time_torchvision(folders[n], cold, timeout)
            r["torchvision"].append(seconds)
            r["torchvision_listing"].append(listed)
            print(json.dumps({"files": n, "cache": cache_state, **{k: v[-1] for k, v in r.items()}}),
                  file=sys.stderr, flush=True)
    rows = []
    for n in sizes:
        r = runs[n]
        rows.append({"files": n, "cache": cache_state, "all": r,
                     "joiner_probes": max(r["joiner_probes"]),
                     **{k: median(v) for k, v in r.items() if k != "joiner_probes"}})
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ours", required=True, help="the cifar binary (bazel-bin/examples/cifar/cifar)")
    parser.add_argument("--sizes", default="10000,100000",
                        help="folder sizes, comma-separated (default 10000,100000)")
    parser.add_argument("--million", action="store_true", help="also 1,000,000 files (~4 GB)")
    parser.add_argument("--work-dir", default="",
                        help="where the folders go (kept between runs); default a temporary "
                        "directory, removed at the end")
    parser.add_argument("--repeats", type=int, default=3,
                        help="launches per figure, interleaved; the median is shown (default 3)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per launch")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.million:
        sizes.append(1000000)
    caches = ["cold", "warm"] if can_drop_caches() else ["warm"]
    if "cold" not in caches:
        print("note: /proc/sys/vm/drop_caches is not writable (not root): warm cache only",
              file=sys.stderr)
    work = args.work_dir or tempfile.mkdtemp(prefix="image-folder-start-")
    os.makedirs(work, exist_ok=True)
    ours = os.path.abspath(args.ours)
    rows = []
    try:
        for n in sizes:
            generate(os.path.join(work, f"folder-{n}"), n)
        for cache_state in caches:
            rows += measure(ours, sizes, work, cache_state, args.repeats, args.timeout)
    finally:
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)

    print("| files | page cache | ours, first job (indexes) | ours, next job | ours, joiner "
          "(range) | joiner's index read (probes) | torchvision, first batch (listing) |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['files']:,} | {r['cache']} | {r['first_job']:.2f} s | {r['next_job']:.2f} s "
              f"| {r['joiner']:.2f} s ({min(r['all']['joiner']):.2f}-"
              f"{max(r['all']['joiner']):.2f}) | {r['joiner_load'] * 1000:.0f} ms "
              f"({r['joiner_probes']}) | {r['torchvision']:.2f} s "
              f"({r['torchvision_listing']:.2f} s) |")
    headline = caches[0]
    parts = [f"{r['files']:,} files {r['joiner']:.2f} s (torchvision {r['torchvision']:.2f} s)"
             for r in rows if r["cache"] == headline]
    print(f"headline: a joiner's launch to first step, {headline} cache: " + "; ".join(parts))


if __name__ == "__main__":
    main()
