"""nanoGPT's CPU recipe on tiny Shakespeare, ours against PyTorch DDP, side by
side in one run on this machine.

  /usr/bin/python3 bench/nanogpt_bench.py --ours bazel-bin/examples/cifar/cifar \\
      --text ../shared/data/tinyshakespeare/input.txt --workers 1,2

The recipe (nanoGPT's README, "I only have a macbook"): 4 layers, 4 heads,
128-wide embeddings, context 64, batch 12, 2,000 iterations, lr 1e-3 with 100
warm-up steps and cosine decay to 1e-4 at step 2,000, AdamW (beta2 0.99,
weight decay 0.1 on matrices and embeddings), gradient norm clipped to 1,
dropout 0; a validation loss every 250 steps.

Both sides get the same:
  - model and initial weights: tests/gpt_model.py's GPT, scripted once with
    --seed; ours trains the file (`cifar --dataset tokens --model-file`), the
    peer (bench/gpt_peer.py, under torchrun) loads its weights into the eager
    module;
  - data: tools/prepare_tokens.py's train.bin/val.bin, windows of 65 tokens at
    stride 64 (a new offset each epoch); a step takes 12 windows in all, split
    over the workers;
  - evaluation: every window of val.bin, every 250 steps and at the end;
  - threads: --cores / workers intra-op threads a worker (OMP_NUM_THREADS for
    the peer), ours with one loader thread a worker.

Measured per system and world:
  val loss    the last evaluation's (after step 2,000)
  tok/s       training tokens per second of the whole world, steps only
              (ours: its epoch lines' tok/s weighted by their steps; the
              peer: its RESULT line)
  to 1.88     wall seconds from launching the command to the first
              evaluation at or below --target (nanoGPT's published 1.88),
              timed by this script as the lines arrive, evaluations included
  wall        wall seconds of the whole command
  alone x workers
              at worlds above 1 (--solo-steps, 600): the same side run as one
              worker with one thread on one worker's share of the step
              (batch / workers windows), times the workers: what the world
              would train if its workers never slowed or waited for each
              other, the allreduce included; "of that" is tok/s over it. The
              solo runs say how much of a gap is the step itself and how much
              the distribution (the line `alone: ... Zx` compares the sides'
              solo speeds).

The last line: `headline: at N workers ours X tok/s, DDP Y tok/s: Zx;
val loss ours A, DDP B`.
"""

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PYTHON = "/usr/bin/python3"

OUR_EVAL = re.compile(r"^eval step (\d+) .*\| test loss ([0-9.]+|nan|inf)")
OUR_EPOCH = re.compile(r"^epoch (\d+)/\d+ world (\d+) \| .*\| test loss ([0-9.]+|nan|inf) "
                       r".*\| ([0-9.]+) tok/s \|")
PEER_LINE = re.compile(r"(EVAL|RESULT) (\{.*\})")


def recipe(args):
    return {"layers": 4, "heads": 4, "embd": 128, "context": 64, "batch": 12,
            "steps": args.max_steps, "lr": 1e-3, "min_lr": 1e-4, "warmup": 100,
            "decay": args.max_steps, "beta2": 0.99, "weight_decay": 0.1, "clip": 1.0}


def prepare(args, work):
    """The token files: --data-dir, or prepared from --text into the work directory."""
    if args.data_dir:
        return args.data_dir
    out = os.path.join(work, "shakespeare_char")
    subprocess.run([PYTHON, os.path.join(ROOT, "tools", "prepare_tokens.py"), "--input",
                    args.text, "--out", out], check=True, stdout=subprocess.DEVNULL)
    return out


def script_model(args, work, r):
    path = os.path.join(work, "gpt.pt")
    subprocess.run([PYTHON, os.path.join(ROOT, "tests", "gpt_model.py"), "script", path,
                    "--vocab", str(args.vocab), "--block", str(r["context"]), "--layers",
                    str(r["layers"]), "--heads", str(r["heads"]), "--embd", str(r["embd"]),
                    "--dropout", "0", "--bias", str(args.bias), "--seed", str(args.seed)],
                   check=True,
                   stdout=subprocess.DEVNULL)
    return path


def timed_lines(command, log_path, env=None):
    """Runs command; yields (seconds since launch, line) as lines arrive."""
    started = time.time()
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, env=env, cwd=ROOT)
        for line in process.stdout:
            log.write(line)
            yield time.time() - started, line.rstrip("\n")
        if process.wait() != 0:
            raise RuntimeError(f"{command[0]} exited with {process.returncode}; log {log_path}")
    yield time.time() - started, None


def threads(args, world):
    return max(1, args.cores // world)


def run_ours(args, data, model, world, r, log, nthreads=None):
    nthreads = nthreads or threads(args, world)
    command = [args.ours, f"--workers={world}", "--dataset=tokens", f"--data-dir={data}",
               f"--model-file={model}", f"--context={r['context']}",
               f"--batch-size={r['batch']}", f"--max-steps={r['steps']}", "--epochs=1000",
               "--optimizer=adamw", f"--lr={r['lr']}", f"--adam-beta2={r['beta2']}",
               f"--weight-decay={r['weight_decay']}", "--schedule=cosine", "--warmup-epochs=0",
               f"--warmup-steps={r['warmup']}", f"--decay-steps={r['decay']}",
               f"--min-lr={r['min_lr']}", f"--clip-grad={r['clip']}",
               f"--eval-every={r.get('eval_every', args.eval_every)}", f"--threads={nthreads}",
               "--loader-threads=1", "--precision=fp32", "--memory-format=contiguous",
               "--recompute-bn=0", "--augment=false", "--metrics-port=0", "--log-every=1000000",
               f"--seed={args.seed}"]
    evals, epochs, wall = [], [], 0.0
    for t, line in timed_lines(command, log):
        if line is None:
            wall = t
            break
        m = OUR_EVAL.match(line)
        if m:
            evals.append((t, int(m.group(1)), float(m.group(2))))
        m = OUR_EPOCH.match(line)
        if m:
            evals.append((t, None, float(m.group(3))))
            epochs.append(float(m.group(4)))
    # Epoch lines' rates, weighted by their steps: full epochs, then the cut one.
    per_epoch = math.ceil(args.train_windows / r["batch"])
    steps = [per_epoch] * (len(epochs) - 1) + [r["steps"] - per_epoch * (len(epochs) - 1)]
    rate = sum(s * e for s, e in zip(steps, epochs)) / max(sum(steps), 1) if epochs else 0.0
    return summary(evals, rate, wall, args.target)


def run_peer(args, data, model, world, r, log, nthreads=None):
    nthreads = nthreads or threads(args, world)
    command = [PYTHON, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1",
               "--standalone", f"--nproc_per_node={world}",
               os.path.join(HERE, "gpt_peer.py"), f"--data-dir={data}", f"--init={model}",
               f"--context={r['context']}", f"--batch-size={r['batch']}",
               f"--max-steps={r['steps']}", f"--lr={r['lr']}", f"--min-lr={r['min_lr']}",
               f"--warmup-steps={r['warmup']}", f"--decay-steps={r['decay']}",
               f"--beta2={r['beta2']}", f"--weight-decay={r['weight_decay']}",
               f"--clip-grad={r['clip']}", f"--eval-every={r.get('eval_every', args.eval_every)}",
               f"--threads={nthreads}", f"--seed={args.seed}"]
    env = dict(os.environ, OMP_NUM_THREADS=str(nthreads))
    evals, rate, wall = [], 0.0, 0.0
    for t, line in timed_lines(command, log, env):
        if line is None:
            wall = t
            break
        m = PEER_LINE.search(line)
        if not m:
            continue
        record = json.loads(m.group(2))
        if m.group(1) == "EVAL":
            evals.append((t, record["step"], record["val_loss"]))
        else:
            rate = record["tokens_per_second"]
    return summary(evals, rate, wall, args.target)


def solo_rate(args, data, model, world, r, system, logs):
    """One worker's speed alone at its share of a world's step: 1 thread, batch / world windows,
    --solo-steps steps, no evaluation. world x this is what the world would reach if its
    workers did not slow each other and never waited for each other or the allreduce."""
    solo = dict(r, batch=r["batch"] // world, steps=args.solo_steps,
                eval_every=args.solo_steps + 1)
    log = os.path.join(logs, f"{system}-solo-of-w{world}.log")
    print(f"  {system} alone at one worker's share of {world}: 1 thread, {solo['batch']} windows "
          f"a step; log {log}", flush=True)
    run = run_ours if system == "ours" else run_peer
    rate = run(args, data, model, 1, solo, log, nthreads=1)["tokens_per_second"]
    print(f"  {rate:.0f} tok/s alone, x {world} = {rate * world:.0f}", flush=True)
    return rate


def summary(evals, rate, wall, target):
    reached = next((t for t, _, loss in evals if loss <= target), None)
    return {"val_loss": evals[-1][2] if evals else float("nan"), "tokens_per_second": rate,
            "seconds_to_target": reached, "wall_seconds": wall,
            "evaluations": [(round(t, 1), step, loss) for t, step, loss in evals]}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ours", default=os.path.join(ROOT, "bazel-bin", "trainer", "cifar"))
    parser.add_argument("--text", default=os.path.join(ROOT, "..", "shared", "data",
                                                        "tinyshakespeare", "input.txt"),
                        help="tiny Shakespeare's input.txt (prepared into a temp directory)")
    parser.add_argument("--data-dir", default="", help="token files already prepared")
    parser.add_argument("--workers", default="1,2", help="world sizes")
    parser.add_argument("--systems", default="ours,ddp")
    parser.add_argument("--max-steps", type=int, default=2000)
    parser.add_argument("--eval-every", type=int, default=250)
    parser.add_argument("--target", type=float, default=1.88,
                        help="validation loss whose first time is reported (nanoGPT's CPU figure)")
    parser.add_argument("--cores", type=int, default=os.cpu_count(),
                        help="threads of a world, split evenly over its workers")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bias", type=int, choices=(0, 1), default=1,
                        help="biases in the GPT's linear layers and layer norms; 0 is nanoGPT's "
                        "bias=False (bench/nanogpt_loop.py)")
    parser.add_argument("--solo-steps", type=int, default=600,
                        help="at each world above 1, also time each side's worker alone at its "
                        "share for this many steps (0: not)")
    parser.add_argument("--logs", default="", help="keep every command's log here")
    parser.add_argument("--json", default="", help="write the results here")
    args = parser.parse_args(argv)
    if not args.data_dir and not os.path.exists(args.text):
        parser.error(f"--text {args.text}: no such file (or give --data-dir)")
    if "ours" in args.systems and not os.access(args.ours, os.X_OK):
        parser.error(f"--ours {args.ours}: not an executable (bazel build //trainer:cifar)")
    return args


def show(value, digits=1):
    return "-" if value is None else f"{value:.{digits}f}"


def main():
    args = parse_args()
    work = tempfile.mkdtemp(prefix="nanogpt_bench.")
    logs = args.logs or work
    os.makedirs(logs, exist_ok=True)
    data = prepare(args, work)
    with open(os.path.join(data, "meta.json")) as f:
        meta = json.load(f)
    args.vocab = meta["vocab_size"]
    r = recipe(args)
    args.train_windows = (os.path.getsize(os.path.join(data, "train.bin")) //
                          (2 if meta["dtype"] == "uint16" else 4) - r["context"]) // r["context"]
    model = script_model(args, work, r)
    results = []
    for world in [int(w) for w in args.workers.split(",")]:
        for system in args.systems.split(","):
            log = os.path.join(logs, f"{system}-w{world}.log")
            print(f"running {system} at {world} worker(s); log {log}", flush=True)
            run = run_ours if system == "ours" else run_peer
            result = run(args, data, model, world, r, log)
            result.update(system=system, world=world)
            results.append(result)
            print(f"  val loss {result['val_loss']:.4f}, {result['tokens_per_second']:.0f} tok/s, "
                  f"to {args.target}: {show(result['seconds_to_target'])} s, "
                  f"wall {result['wall_seconds']:.1f} s", flush=True)
            if world > 1 and args.solo_steps > 0:
                result["solo_tokens_per_second"] = solo_rate(args, data, model, world, r, system,
                                                             logs)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"recipe": r, "target": args.target, "cores": args.cores,
                       "results": results}, f, indent=1)
    print()
    print(f"| system | workers | val loss | tok/s | s to {args.target} | wall s | alone x workers "
          "| of that |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for x in results:
        bound = x.get("solo_tokens_per_second", 0) * x["world"]
        alone = f"{bound:.0f} | {100 * x['tokens_per_second'] / bound:.0f}%" if bound else "- | -"
        print(f"| {'ours' if x['system'] == 'ours' else 'PyTorch DDP'} | {x['world']} | "
              f"{x['val_loss']:.4f} | {x['tokens_per_second']:.0f} | "
              f"{show(x['seconds_to_target'])} | {x['wall_seconds']:.1f} | {alone} |")
    by = {(x["system"], x["world"]): x for x in results}
    top = max(x["world"] for x in results)
    ours, ddp = by.get(("ours", top)), by.get(("ddp", top))
    if ours and ddp and ddp.get("solo_tokens_per_second"):
        print(f"alone: at one worker's share of {top}, ours {ours['solo_tokens_per_second']:.0f} "
              f"tok/s, DDP {ddp['solo_tokens_per_second']:.0f} tok/s: "
              f"{ours['solo_tokens_per_second'] / ddp['solo_tokens_per_second']:.2f}x")
    if ours and ddp and ddp["tokens_per_second"] > 0:
        print(f"headline: at {top} workers ours {ours['tokens_per_second']:.0f} tok/s, DDP "
              f"{ddp['tokens_per_second']:.0f} tok/s: "
              f"{ours['tokens_per_second'] / ddp['tokens_per_second']:.2f}x; val loss ours "
              f"{ours['val_loss']:.4f}, DDP {ddp['val_loss']:.4f}")


if __name__ == "__main__":
    main()
