#!/usr/bin/env bash
# Side by side on this machine: our trainer vs PyTorch DDP (bench/ddp_peer.py,
# Gloo, launched by torchrun), same data, model, batch, optimizer, augmentation
# and worker count (1 intra-op thread per worker). Prints one table; its last
# line is the headline ratio (ours / DDP per-worker training throughput).
#
#   bench/compare.sh [CIFAR10_SUBSET_DIR]     (default: $CIFAR10_SUBSET, then
#                                               ../shared/data/cifar10-subset)
#
# Knobs (environment): EPOCHS (10) and TARGET (0.40) for the accuracy rows,
# MODEL (resnet8), BATCH (64 per worker), R18_SAMPLES (384: ResNet18 trains 2 epochs
# of the first 384 images, 64 test images; 0 skips it),
# RESCALE (1; 0 skips the rescale rows), ALLREDUCE (1), OUT (a new temp dir; every
# log is kept there), BAZEL (the bazel command, e.g. "bazel --output_base=..."),
# OURS_BIN / ELASTIC_BIN / ALLREDUCE_BIN (use these binaries instead of building),
# PRECISION (auto: bf16 where this CPU has AMX-BF16 or AVX512-BF16, as our
# --precision=auto; or fp32, bf16) and MEMORY_FORMAT (auto: each model's, as
# our --memory-format=auto; or contiguous, channels-last): both sides get the
# same, resolved here and passed explicitly.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
DATA=${1:-${CIFAR10_SUBSET:-$ROOT/../shared/data/cifar10-subset}}
if [[ ! -f "$DATA/data_batch_1.bin" || ! -f "$DATA/test_batch.bin" ]]; then
  echo "compare.sh: no CIFAR-10 subset at '$DATA' (need data_batch_*.bin and test_batch.bin);" >&2
  echo "  pass its directory as the first argument or set CIFAR10_SUBSET." >&2
  exit 2
fi
DATA=$(cd "$DATA" && pwd)
PY=/usr/bin/python3  # the interpreter that sees Debian's python3-torch
EPOCHS=${EPOCHS:-10}
TARGET=${TARGET:-0.40}
MODEL=${MODEL:-resnet8}
BATCH=${BATCH:-64}
R18_SAMPLES=${R18_SAMPLES:-384}
RESCALE=${RESCALE:-1}
ALLREDUCE=${ALLREDUCE:-1}
OUT=${OUT:-$(mktemp -d /tmp/compare.XXXXXX)}
mkdir -p "$OUT"
BAZEL=${BAZEL:-bazel}
PRECISION=${PRECISION:-auto}
MEMORY_FORMAT=${MEMORY_FORMAT:-auto}
if [[ $PRECISION == auto ]]; then
  if grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo; then PRECISION=bf16; else PRECISION=fp32; fi
fi
export OMP_NUM_THREADS=1

say() { echo "compare.sh: $*" >&2; }

# --- binaries ---------------------------------------------------------------
if [[ -z "${OURS_BIN:-}" || -z "${ALLREDUCE_BIN:-}" ]]; then
  say "building //trainer:cifar //bench:allreduce_bench"
  $BAZEL build //trainer:cifar //bench:allreduce_bench >"$OUT/build.log" 2>&1 ||
    { say "build failed, see $OUT/build.log"; exit 1; }
  BIN=$($BAZEL info bazel-bin 2>/dev/null)
  OURS_BIN=${OURS_BIN:-$BIN/examples/cifar/cifar}
  ALLREDUCE_BIN=${ALLREDUCE_BIN:-$BIN/bench/allreduce_bench}
fi
# The multi-worker trainer is //trainer:cifar --workers N.
ELASTIC_WHY=""
if [[ $("$OURS_BIN" --help 2>/dev/null) == *--workers* ]]; then  # (grep -q + pipefail: SIGPIPE)
  ELASTIC_BIN=$OURS_BIN
else
  ELASTIC_BIN=""
  ELASTIC_WHY="$OURS_BIN has no --workers (our elastic mode)"
fi
{
  echo "date: $(date -u +%FT%TZ)"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "ours: $OURS_BIN; elastic: ${ELASTIC_BIN:-none}"
  echo "data: $DATA"
  echo "precision: $PRECISION; memory format: $MEMORY_FORMAT (auto: per model, from --list-models)"
} >"$OUT/meta.txt"

# --- runs ---------------------------------------------------------------------
# Prefixes every line with the wall-clock time it arrived, so that both
# systems' epochs are timed by the same clock (bash 5's EPOCHREALTIME).
stamp() {
  local line
  while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done
}

# run NAME COMMAND...: stamped output in $OUT/NAME.log, start/end/rc in $OUT/NAME.wall
run() {
  local name=$1; shift
  say "$name: $*"
  local start end
  start=$(date +%s.%N)
  timeout 1800 "$@" 2>&1 | stamp >"$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  end=$(date +%s.%N)
  echo "$start $end $rc" >"$OUT/$name.wall"
  [[ $rc -eq 0 ]] || say "$name exited with $rc (see $OUT/$name.log)"
}

# The memory format MODEL trains in on both sides: MEMORY_FORMAT, or for
# auto the one our --list-models shows for it.
memory_format() {
  if [[ $MEMORY_FORMAT != auto ]]; then echo "$MEMORY_FORMAT"; return; fi
  "$OURS_BIN" --list-models | awk -v m="$1" '$1 == m { print $3 }'
}

# ours WORKERS NAME MODEL FLAGS...
ours() {
  local workers=$1 name=$2 model=$3; shift 3
  local common=(--model="$model" --dataset=cifar10 --data-dir="$DATA" --batch-size="$BATCH"
                --threads=1 --loader-threads=1 --seed=0 --log-every=1000000
                --precision="$PRECISION" --memory-format="$(memory_format "$model")" "$@")
  if [[ -n "$ELASTIC_BIN" ]]; then
    run "$name" "$ELASTIC_BIN" --workers="$workers" --per-worker-batch "${common[@]}"
  elif [[ $workers -eq 1 ]]; then
    run "$name" "$OURS_BIN" "${common[@]}"  # the single-process trainer
  else
    echo "not measured: $ELASTIC_WHY" >"$OUT/$name.skip"
  fi
}

# ddp WORKERS NAME MODEL FLAGS...
ddp() {
  local workers=$1 name=$2 model=$3; shift 3
  # As --standalone, but on a free port: --standalone's fixed 29400 collides
  # with any other torchrun on the machine.
  local port
  port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  run "$name" "$PY" -m torch.distributed.run --redirects 1 --tee 1 --nnodes=1 \
    --rdzv_backend=c10d --rdzv_endpoint="127.0.0.1:$port" --rdzv_id="compare$$" \
    --nproc_per_node="$workers" bench/ddp_peer.py --model="$model" --data-dir="$DATA" \
    --batch-size="$BATCH" --threads=1 --seed=0 --precision="$PRECISION" \
    --memory-format="$(memory_format "$model")" "$@"
}

for w in 1 2; do
  ours "$w" "ours_${MODEL}_$w" "$MODEL" --epochs="$EPOCHS"
  ddp "$w" "ddp_${MODEL}_$w" "$MODEL" --epochs="$EPOCHS"
done
if [[ $R18_SAMPLES -gt 0 ]]; then
  for w in 1 2; do
    ours "$w" "ours_resnet18_$w" resnet18 --epochs=2 --train-samples="$R18_SAMPLES" --test-samples=64
    ddp "$w" "ddp_resnet18_$w" resnet18 --epochs=2 --train-samples="$R18_SAMPLES" --test-samples=64
  done
fi
if [[ $RESCALE -eq 1 ]]; then
  if [[ -n "$ELASTIC_BIN" ]]; then
    run rescale "$PY" bench/rescale_bench.py --ours="$ELASTIC_BIN" --data-dir="$DATA" \
      --workers=2 --events=kill --model="$MODEL" --batch-size="$BATCH" \
      --json="$OUT/rescale.json" --log="$OUT/rescale_processes.log"
  else
    echo "not measured: $ELASTIC_WHY" >"$OUT/rescale.skip"
  fi
fi
if [[ $ALLREDUCE -eq 1 ]]; then
  run allreduce "$ALLREDUCE_BIN" --ranks=2 --max_mb=64 --rebuild_ranks=2 --cycles=3
fi
# The machine's peak at PRECISION on one thread and each model's FLOPs, for
# the fraction-of-peak rows.
"$PY" bench/peak_flops.py --precision="$PRECISION" --models="$MODEL,resnet18" --threads=1 \
  >"$OUT/peak.json" 2>"$OUT/peak.log" || say "peak measurement failed, see $OUT/peak.log"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/meta.txt"

# --- the table ----------------------------------------------------------------
"$PY" - "$OUT" "$MODEL" "$EPOCHS" "$TARGET" "$BATCH" "$R18_SAMPLES" "$DATA" <<'EOF'
import glob, json, os, re, statistics, sys

out, model, epochs, target, batch, r18_samples, data = sys.argv[1:]
try:
    PEAK = json.load(open(os.path.join(out, "peak.json")))
except (OSError, ValueError):
    PEAK = None
epochs, target, batch = int(epochs), float(target), int(batch)
TRAIN_IMAGES = sum(os.path.getsize(f) // 3073 for f in glob.glob(os.path.join(data, "data_batch_*.bin")))
# Ours, single-process:  "epoch 3/10 train loss ... | test loss L acc A% | R img/s Ts lr X"
# Ours, elastic:         "epoch 3/10 world 2 | train ... | test loss L acc A% | R img/s | Ts"
OURS = re.compile(r"^epoch (\d+)/\d+ .*test loss \S+ acc ([\d.]+)% \| (\d+) img/s \|? ?([\d.]+)s")


def load(name):
    """Per-epoch dicts (images_per_second, test_accuracy, epoch_seconds), or a
    string saying why there are none."""
    base = os.path.join(out, name)
    if os.path.exists(base + ".skip"):
        return open(base + ".skip").read().strip()
    if not os.path.exists(base + ".log"):
        return "not run"
    epochs_seen = []
    for stamped in open(base + ".log", errors="replace"):
        arrived, _, line = stamped.partition(" ")
        if "RESULT " in line:
            r = json.loads(line.split("RESULT ", 1)[1])
            if r["kind"] == "epoch":
                epochs_seen.append(dict(r, arrived=float(arrived)))
        else:
            m = OURS.match(line.strip())
            if m:
                epochs_seen.append({"images_per_second": float(m.group(3)),
                                    "test_accuracy": float(m.group(2)) / 100,
                                    "epoch_seconds": float(m.group(4)),
                                    "arrived": float(arrived)})
    rc = open(base + ".wall").read().split()[2]
    if not epochs_seen:
        return f"failed (exit {rc}, see {base}.log)"
    return epochs_seen


def reported_rate(runs):
    """Each system's own figure (images / its training seconds), median over
    the epochs after the first."""
    if isinstance(runs, str):
        return None
    tail = runs[1:] or runs
    return statistics.median(r["images_per_second"] for r in tail)


def epoch_rate(runs, images):
    """The same clock for both: training images per epoch / seconds between
    the arrivals of consecutive epoch lines (evaluation included), median; a
    run of one epoch (ResNet18's few steps) falls back to the reported figure."""
    if isinstance(runs, str):
        return None
    gaps = [b["arrived"] - a["arrived"] for a, b in zip(runs, runs[1:])]
    if not gaps:
        return reported_rate(runs)
    return images / statistics.median(gaps)


def wall(name):
    start, end, _ = open(os.path.join(out, name + ".wall")).read().split()
    return float(end) - float(start)


def to_target(runs):
    if isinstance(runs, str):
        return None
    seconds = 0.0
    for i, r in enumerate(runs, 1):
        seconds += r["epoch_seconds"]
        if r["test_accuracy"] >= target:
            return i, seconds
    return None


rows = []  # (metric, ours, ddp, ratio text)


def num(x, fmt="{:.0f}"):
    return fmt.format(x) if isinstance(x, (int, float)) else x


def ratio(a, b, fmt="{:.2f}x"):
    return fmt.format(a / b) if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else "-"


def why(runs):
    return runs if isinstance(runs, str) else "-"


headline = None
models = [model] + (["resnet18"] if int(r18_samples) > 0 and model != "resnet18" else [])
for m in models:
    images = int(r18_samples) if m == "resnet18" else TRAIN_IMAGES
    if m == "resnet18":
        # A few steps per epoch: the epoch boundary (evaluation, commit) would
        # dominate the epoch-to-epoch clock, so the figure of the second epoch's
        # training time as each system reports it.
        note = f", epoch 2 of 2 x {images} images, training time as each reports it"
        rate = lambda runs: None if isinstance(runs, str) else runs[-1]["images_per_second"]
    else:
        note = f", {epochs} epochs, epoch to epoch (eval included)"
        rate = lambda runs: epoch_rate(runs, images)
    ours1, ddp1 = load(f"ours_{m}_1"), load(f"ddp_{m}_1")
    ours2, ddp2 = load(f"ours_{m}_2"), load(f"ddp_{m}_2")
    o1, d1, o2, d2 = rate(ours1), rate(ddp1), rate(ours2), rate(ddp2)
    if m == model:
        for w, o, d in ((1, ours1, ddp1), (2, ours2, ddp2)):
            ro, rd = reported_rate(o), reported_rate(d)
            rows.append((f"{m} images/s as each reports it (training time only), {w} worker(s)",
                         num(ro) if ro else why(o), num(rd) if rd else why(d), ratio(ro, rd)))
    rows.append((f"{m} images/s, 1 worker{note}", num(o1) if o1 else why(ours1),
                 num(d1) if d1 else why(ddp1), ratio(o1, d1)))
    rows.append((f"{m} images/s, 2 workers (whole job)", num(o2) if o2 else why(ours2),
                 num(d2) if d2 else why(ddp2), ratio(o2, d2)))
    p2o = o2 / 2 if o2 else None
    p2d = d2 / 2 if d2 else None
    rows.append((f"{m} images/s per worker, 2 workers", num(p2o) if p2o else "-",
                 num(p2d) if p2d else "-", ratio(p2o, p2d)))
    if PEAK and m in PEAK["train_flops_per_image"]:
        # One worker's training rate (as each reports it) x FLOPs per image,
        # against one thread's peak: each worker has one compute thread.
        if m == model:
            ro, rd = reported_rate(ours1), reported_rate(ddp1)
        else:
            ro, rd = o1, d1
        fraction = lambda r: r * PEAK["train_flops_per_image"][m] / PEAK["peak_flops"] if r else None
        fo, fd = fraction(ro), fraction(rd)
        rows.append((f"{m} fraction of the machine's {PEAK['precision']} peak "
                     f"({PEAK['peak_flops'] / 1e9:.0f} GFLOP/s on 1 thread), 1 worker",
                     num(fo, "{:.0%}") if fo else "-", num(fd, "{:.0%}") if fd else "-",
                     ratio(fo, fd)))
    eo = o2 / (2 * o1) if o1 and o2 else None
    ed = d2 / (2 * d1) if d1 and d2 else None
    rows.append((f"{m} scaling efficiency 1 -> 2 workers", num(eo, "{:.0%}") if eo else "-",
                 num(ed, "{:.0%}") if ed else "-", ratio(eo, ed)))
    if m == model:
        headline = (p2o, p2d)
        for w, o, d in ((1, ours1, ddp1), (2, ours2, ddp2)):
            acc_o = o[-1]["test_accuracy"] if not isinstance(o, str) else None
            acc_d = d[-1]["test_accuracy"] if not isinstance(d, str) else None
            rows.append((f"{m} test accuracy after {epochs} epochs, {w} worker(s)",
                         num(acc_o, "{:.1%}") if acc_o is not None else why(o),
                         num(acc_d, "{:.1%}") if acc_d is not None else why(d), "-"))
            to, td = to_target(o), to_target(d)
            rows.append((f"{m} epochs / training+eval seconds to {target:.0%} test acc, {w} worker(s)",
                         f"{to[0]} / {to[1]:.1f}" if to else ("not reached" if not isinstance(o, str) else "-"),
                         f"{td[0]} / {td[1]:.1f}" if td else ("not reached" if not isinstance(d, str) else "-"),
                         ratio(td[1], to[1]) if to and td else "-"))
            wo = wall(f"ours_{m}_{w}") if not isinstance(o, str) else None
            wd = wall(f"ddp_{m}_{w}") if not isinstance(d, str) else None
            rows.append((f"{m} wall seconds for the whole run (start-up included), {w} worker(s)",
                         num(wo, "{:.1f}") if wo else "-", num(wd, "{:.1f}") if wd else "-",
                         ratio(wd, wo) if wo and wd else "-"))

# Rescale: ours kill -> first step vs torchrun restart.
skip = os.path.join(out, "rescale.skip")
if os.path.exists(skip):
    rows.append(("rescale: kill 1 of 2 workers -> first step (s)", open(skip).read().strip(), "-", "-"))
elif os.path.exists(os.path.join(out, "rescale.json")):
    for r in json.load(open(os.path.join(out, "rescale.json"))):
        ours = r["ours"]
        for key in [k for k in r if k.startswith("torchrun_")]:
            theirs = r[key]
            setting = "default --monitor_interval" if key.endswith("default") else f"--monitor_interval {key.split('_', 1)[1]}"
            o = ours["seconds"] if isinstance(ours, dict) else ours
            t = theirs["seconds"] if isinstance(theirs, dict) else theirs
            rows.append((f"rescale: {r['event']} 1 of {r['workers']} workers -> first step, s (torchrun {setting})",
                         num(o, "{:.2f}"), num(t, "{:.2f}"),
                         ratio(t, o, "{:.1f}x") if isinstance(o, float) and isinstance(t, float) else "-"))
elif os.path.exists(os.path.join(out, "rescale.log")):
    rows.append(("rescale", f"failed, see {out}/rescale.log", "-", "-"))

# Allreduce: our Gloo busbw against memcpy of the same buffer (2 ranks, largest size).
log = os.path.join(out, "allreduce.log")
if os.path.exists(log):
    best = None
    for stamped in open(log):
        f = stamped.split()[1:]  # after the arrival stamp
        if len(f) == 7 and f[0] == "2" and f[1].isdigit():
            best = f
    if best:
        mib = int(best[1]) / 2**20
        rows.append((f"allreduce busbw, 2 ranks, {mib:.0f} MiB (GB/s; DDP column: memcpy)",
                     best[4], best[5], f"{float(best[4]) / float(best[5]):.1%} of memcpy"))
    else:
        rows.append(("allreduce busbw", f"failed, see {log}", "-", "-"))



def svg_plot(path, title, series):
    """Images/s against workers, one polyline per series {name: (colour, {w: rate})};
    plain SVG so that no plotting library is needed."""
    W, H, L, R, T, B = 520, 340, 70, 150, 40, 50
    xs = sorted({w for _, pts in series.values() for w in pts})
    ymax = max([v for _, pts in series.values() for v in pts.values()] + [1]) * 1.15
    px = lambda w: L + (W - L - R) * ((w - xs[0]) / max(xs[-1] - xs[0], 1))
    py = lambda v: H - B - (H - T - B) * v / ymax
    e = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
         f'font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
         f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
         f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>',
         f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">workers (1 thread each)</text>',
         f'<text x="16" y="{(T + H - B) / 2}" text-anchor="middle" '
         f'transform="rotate(-90 16 {(T + H - B) / 2})">images/s (whole job)</text>']
    for w in xs:
        e.append(f'<text x="{px(w)}" y="{H - B + 18}" text-anchor="middle">{w}</text>')
    for i in range(6):
        v = ymax * i / 5
        e.append(f'<line x1="{L - 4}" y1="{py(v)}" x2="{W - R}" y2="{py(v)}" stroke="#ddd"/>')
        e.append(f'<text x="{L - 8}" y="{py(v) + 4}" text-anchor="end">{v:.0f}</text>')
    for k, (name, (colour, pts)) in enumerate(series.items()):
        ws = sorted(pts)
        dash = ' stroke-dasharray="5,4"' if "ideal" in name else ""
        e.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2"{dash} points="'
                 + " ".join(f"{px(w):.1f},{py(pts[w]):.1f}" for w in ws) + '"/>')
        for w in ws:
            if not dash:
                e.append(f'<circle cx="{px(w):.1f}" cy="{py(pts[w]):.1f}" r="3.5" fill="{colour}"/>')
                dy = -6 if k % 2 == 0 else 16  # alternate above/below so labels do not collide
                e.append(f'<text x="{px(w) + 6:.1f}" y="{py(pts[w]) + dy:.1f}">{pts[w]:.0f}</text>')
        y = T + 10 + 18 * k
        e.append(f'<line x1="{W - R + 10}" y1="{y}" x2="{W - R + 30}" y2="{y}" stroke="{colour}" '
                 f'stroke-width="2"{dash}/>')
        e.append(f'<text x="{W - R + 35}" y="{y + 4}">{name}</text>')
    e.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(e) + "\n")


points = {}
for who in ("ours", "ddp"):
    pts = {w: epoch_rate(load(f"{who}_{model}_{w}"), TRAIN_IMAGES) for w in (1, 2)}
    points[who] = {w: v for w, v in pts.items() if v}
if points["ours"] or points["ddp"]:
    series = {}
    if points["ours"]:
        series["ours"] = ("#1f77b4", points["ours"])
    if points["ddp"]:
        series["PyTorch DDP"] = ("#d62728", points["ddp"])
    if 1 in points["ours"]:
        series["ours, ideal"] = ("#1f77b4", {w: points["ours"][1] * w for w in (1, 2)})
    svg_plot(os.path.join(out, "throughput.svg"),
             f"{model} training throughput, CIFAR-10 subset, batch {batch}/worker", series)

meta = open(os.path.join(out, "meta.txt")).read().strip().replace("\n", "; ")
print(f"# {meta}")
print(f"# batch {batch}/worker, lr 0.1 x workers, cosine over the run, 1 thread/worker; "
      f"ours = //trainer:cifar --workers N (elastic); DDP = bench/ddp_peer.py under torchrun; logs in {out}")
print("| metric | ours | PyTorch DDP | ours vs DDP (>1: ours better) |")
print("| --- | --- | --- | --- |")
for r in rows:
    print("| " + " | ".join(str(c) for c in r) + " |")
o, d = headline if headline else (None, None)
if o and d:
    print(f"headline: per-worker training throughput ours/DDP ({model}, 2 workers) = {o / d:.2f}x "
          "(target >= 1.2x at equal accuracy)")
else:
    print(f"headline: per-worker throughput ours/DDP ({model}, 2 workers) not measured (see rows above)")
EOF
