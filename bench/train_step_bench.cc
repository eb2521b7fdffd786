// train_step_bench: training throughput of our C++ step against PyTorch from
// Python on the same models, batch, threads, data, precision and memory format;
// beside it our fp32 contiguous step (the default before --precision and
// --memory-format) and ours at the same settings with ATen's batch norm, add
// and ReLU in place of the fused node (models/batch_norm_act.h), and each
// side's achieved FLOP/s against the machine's peak
// (a large matmul on the same threads, fp32 and bf16). Then, optionally, the
// memory-format sweep over the zoo that decides --memory-format=auto, and how
// long epochs of the real CIFAR-10 subset take. Not a test: it prints tables;
// the last line is the headline.
//
//   bazel run -c opt //bench:train_step_bench -- --threads=1
//   bazel run -c opt //bench:train_step_bench -- --sweep=all --models= --subset-epochs=0
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench/step_timing.h"
#include "models/batch_norm_act.h"
#include "models/registry.h"
#include "trainer/allocator.h"
#include "trainer/amp.h"
#include "trainer/data/dataset.h"
#include "trainer/data/loader.h"
#include "trainer/device.h"
#include "trainer/flags.h"
#include "trainer/learner.h"
#include "trainer/precision.h"
#include "trainer/sampler.h"
#include "trainer/trainer.h"

namespace {

using namespace elastic::trainer;
using elastic::bench::Figure;
using elastic::bench::Join;
using elastic::bench::Median;
using elastic::bench::SplitList;
using elastic::bench::ValueAfter;

struct BenchOptions {
  std::string models = "resnet18,resnet8";
  std::string data_dir = "/work/shared/data/cifar10-subset";
  int64_t batch_size = 128;
  int64_t threads = 2;
  int64_t loader_threads = 1;
  int64_t warmup_steps = 3;
  int64_t steps = 20;
  int64_t repeats = 3;
  std::string python = "/usr/bin/python3";
  std::string peer = "bench/torch_peer.py";
  std::string subset_model = "resnet8";
  int64_t subset_epochs = 10;
  std::string device = "cpu";
  std::string precision = "auto";
  std::string memory_format = "auto";
  std::string sweep;  // models for the memory-format sweep; "all": the zoo
};

// One configuration of the step: what both sides run.
struct Setting {
  Precision precision = Precision::kFloat32;
  bool channels_last = false;
  bool fused_batch_norm = true;  // models/batch_norm_act.h; false: ATen's ops
  std::string Name() const {
    return std::string(PrecisionName(precision)) +
           (channels_last ? " channels-last" : " contiguous");
  }
};

// Images per second of our Learner::Step at `setting`, fed by our Loader, after warm-up.
double MeasureOurs(const std::string& model, const std::shared_ptr<const Dataset>& data,
                   const BenchOptions& o, const Setting& setting) {
  elastic::bench::StepTiming timing;
  timing.batch_size = o.batch_size;
  timing.loader_threads = o.loader_threads;
  timing.warmup_steps = o.warmup_steps;
  timing.steps = o.steps;
  timing.device = o.device;
  timing.precision = setting.precision;
  timing.channels_last = setting.channels_last;
  SeedTorch(0);
  elastic::models::EnableFusedBatchNorm(setting.fused_batch_norm);
  const double rate = elastic::bench::MeasureLearnerStep(elastic::models::CreateModel(model, 10),
                                                         model, data, timing);
  elastic::models::EnableFusedBatchNorm(true);
  return rate;
}

struct PeerResult {
  double images_per_second = 0;  // 0: the peer failed
  double train_flops_per_image = 0;
};

// Runs the Python peer at `setting` and reads its last lines.
PeerResult MeasurePyTorch(const std::string& model, const BenchOptions& o, const Setting& setting) {
  std::ostringstream command;
  command << "OMP_NUM_THREADS=" << o.threads << " " << o.python << " " << o.peer
          << " --model=" << model << " --data-dir=" << o.data_dir
          << " --batch-size=" << o.batch_size << " --threads=" << o.threads
          << " --warmup-steps=" << o.warmup_steps << " --steps=" << o.steps
          << " --device=" << (o.device == "cpu" ? "cpu" : "cuda")
          << " --precision=" << PrecisionName(setting.precision)
          << " --memory-format=" << (setting.channels_last ? "channels-last" : "contiguous")
          << " 2>&1";
  PeerResult result;
  FILE* pipe = ::popen(command.str().c_str(), "r");
  if (pipe == nullptr) return result;
  std::string output;
  std::array<char, 4096> buffer;
  for (size_t n; (n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0;)
    output.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
      output.find("images_per_second=") == std::string::npos) {
    std::fprintf(stderr, "PyTorch peer failed (%s):\n%s\n", command.str().c_str(), output.c_str());
    return result;
  }
  result.images_per_second = ValueAfter(output, "images_per_second");
  result.train_flops_per_image = ValueAfter(output, "train_flops_per_image");
  return result;
}

// Best FLOP/s of `run` (which does `flops` each time) over 3 rounds of 0.5 s.
template <typename Run>
double BestRate(const Run& run, double flops) {
  run();  // warm-up
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    const auto start = std::chrono::steady_clock::now();
    int reps = 0;
    double seconds = 0;
    do {
      run();
      ++reps;
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    } while (seconds < 0.5);
    best = std::max(best, flops * reps / seconds);
  }
  return best;
}

// The machine's peak FLOP/s on these threads, as ATen reaches it: the better
// of an n x n matmul and a 1x1 convolution of the same size at `dtype`. fp32
// matmuls go to the BLAS (Debian's OpenBLAS, which stays on one thread here),
// convolutions to oneDNN, which is what the models' steps run on.
double PeakFlops(torch::ScalarType dtype) {
  constexpr int64_t n = 2048;
  torch::NoGradGuard no_grad;
  const torch::Tensor a = torch::randn({n, n}).to(dtype), b = torch::randn({n, n}).to(dtype);
  const double matmul = BestRate([&] { return torch::mm(a, b); }, 2.0 * n * n * n);
  const torch::Tensor x =
      torch::randn({n / 256, n, 16, 16}).to(dtype).contiguous(at::MemoryFormat::ChannelsLast);
  const torch::Tensor w =
      torch::randn({n, n, 1, 1}).to(dtype).contiguous(at::MemoryFormat::ChannelsLast);
  const double convolution = BestRate([&] { return torch::conv2d(x, w); }, 2.0 * n * n * n);
  return std::max(matmul, convolution);
}

std::string Flops(double flops_per_image, double images_per_second, double peak) {
  if (flops_per_image <= 0 || images_per_second <= 0) return "-";
  const double achieved = flops_per_image * images_per_second;
  char text[64];
  std::snprintf(text, sizeof(text), "%.1f (%.0f%%)", achieved / 1e9, 100 * achieved / peak);
  return text;
}

// Contiguous against channels-last, fp32 and bf16, for each model: the
// measurement behind models::PrefersChannelsLast.
// bf16 settings are left out ("-") where bf16 is refused on this CPU
// (its convolutions are wrong: precision.h), as a run would refuse them.
void SweepMemoryFormats(const std::vector<std::string>& models,
                        const std::shared_ptr<const Dataset>& data, const BenchOptions& o,
                        bool bf16_usable) {
  std::printf(
      "\nmemory-format sweep (ours, img/s; channels-last / contiguous; auto today):\n\n"
      "| model | fp32 contiguous | fp32 channels-last | ratio | bf16 contiguous | bf16 "
      "channels-last | ratio | auto |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (const std::string& model : models) {
    double v[4] = {0, 0, 0, 0};
    for (int i = 0; i < (bf16_usable ? 4 : 2); ++i) {
      Setting setting{i < 2 ? Precision::kFloat32 : Precision::kBFloat16, i % 2 == 1};
      v[i] = MeasureOurs(model, data, o, setting);
    }
    std::printf("| %s | %s | %s | %s | %s | %s | %s | %s |\n", model.c_str(),
                Figure("%.1f", v[0]).c_str(), Figure("%.1f", v[1]).c_str(),
                Figure("%.2fx", v[1], v[0]).c_str(), Figure("%.1f", v[2]).c_str(),
                Figure("%.1f", v[3]).c_str(), Figure("%.2fx", v[3], v[2]).c_str(),
                elastic::models::PrefersChannelsLast(model) ? "channels-last" : "contiguous");
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  elastic::trainer::KeepFreedMemoryForReuse();  // as in the trainer
  BenchOptions o;
  FlagSet flags("train_step_bench",
                "Training images/s of the C++ step vs PyTorch from Python (same models, batch, "
                "threads, data, precision and memory format), against our fp32 contiguous step "
                "and the machine's peak FLOP/s; then the memory-format sweep and epochs of the "
                "CIFAR-10 subset.");
  flags.AddString("models", &o.models, "Comma-separated models to time against the peer.");
  flags.AddString("data-dir", &o.data_dir,
                  "CIFAR-10 binary files (data_batch_*.bin, test_batch.bin).");
  flags.AddInt("batch-size", &o.batch_size, "Images per step.");
  flags.AddInt("threads", &o.threads, "Compute threads, both sides.");
  flags.AddInt("loader-threads", &o.loader_threads, "Threads of our loader.");
  flags.AddInt("warmup-steps", &o.warmup_steps, "Untimed steps first.");
  flags.AddInt("steps", &o.steps, "Timed steps.");
  flags.AddInt("repeats", &o.repeats,
               "Times ours and the peer are measured, alternately; the table shows medians.");
  flags.AddString("python", &o.python, "Interpreter that has torch (Debian python3-torch).");
  flags.AddString("peer", &o.peer, "Path of bench/torch_peer.py.");
  flags.AddString("subset-model", &o.subset_model, "Model trained on the CIFAR-10 subset.");
  flags.AddInt("subset-epochs", &o.subset_epochs, "Epochs on the subset; 0: skip.");
  flags.AddString("device", &o.device, "cpu, cuda or cuda:N, both sides (--config=cuda build).");
  flags.AddString("precision", &o.precision,
                  "Both sides, as the trainer's --precision (auto: what the trainer picks here).",
                  {"auto", "fp32", "bf16", "fp16"});
  flags.AddString("memory-format", &o.memory_format,
                  "Both sides, as the trainer's --memory-format (auto: per model, as the trainer).",
                  {"auto", "contiguous", "channels-last"});
  flags.AddString("sweep", &o.sweep,
                  "Models (comma-separated, or all) to time in fp32 and bf16, contiguous and "
                  "channels-last: the measurement behind --memory-format=auto.");
  try {
    flags.Parse(argc, argv);
  } catch (const FlagError& e) {
    std::fprintf(stderr, "train_step_bench: %s\n", e.what());
    return 2;
  }
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  if (::access(o.peer.c_str(), R_OK) != 0) {
    // Outside `bazel run`, look next to the binary's runfiles.
    o.peer = std::string(argv[0]) + ".runfiles/elastic/bench/torch_peer.py";
  }
  torch::set_num_threads(static_cast<int>(o.threads));

  std::shared_ptr<const Dataset> train;
  try {
    train = LoadCifar10(o.data_dir, Split::kTrain);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_step_bench: %s\n", e.what());
    return 1;
  }
  const torch::Device device = ResolveDevice(o.device, 0);
  const CpuFeatures cpu = DetectCpuFeaturesFor(o.precision, device.is_cuda());
  PrecisionChoice precision;
  try {
    precision = ChoosePrecision(o.precision, device.is_cuda(), cpu);
  } catch (const FlagError& e) {
    std::fprintf(stderr, "train_step_bench: %s\n", e.what());
    return 2;
  }

  const double peak_fp32 = device.is_cpu() ? PeakFlops(torch::kFloat32) : 0;
  // Where bf16 is refused its "peak" would time LibTorch's fallback GEMM,
  // which sums in bf16: a wrong figure, and minutes long on 2048^3.
  const bool bf16_usable =
      !device.is_cpu() || MeasureBf16ConvolutionError() <= kMaxBf16ConvolutionError;
  const double peak_bf16 = device.is_cpu() && bf16_usable ? PeakFlops(torch::kBFloat16) : 0;
  std::printf(
      "training throughput on %s (%s), batch %lld, %lld compute threads, %lld CIFAR-10 images "
      "from %s, SGD momentum 0.9\nprecision %s (%s)\n",
      o.device.c_str(), DescribeCpu(cpu).c_str(), static_cast<long long>(o.batch_size),
      static_cast<long long>(o.threads), static_cast<long long>(train->size()), o.data_dir.c_str(),
      PrecisionName(precision.precision), precision.why.c_str());
  if (peak_fp32 > 0) {
    std::printf(
        "peak of this machine on %lld threads (2048 x 2048 matmul or 1x1 convolution in ATen): "
        "fp32 %.1f GFLOP/s, bf16 %s\n",
        static_cast<long long>(o.threads), peak_fp32 / 1e9,
        bf16_usable ? (Figure("%.1f", peak_bf16 / 1e9) + " GFLOP/s").c_str()
                    : "- (refused on this CPU: its bf16 convolutions are wrong)");
  }
  std::printf(
      "\n| model | setting (both sides) | train GFLOP/img | ours fp32 contiguous img/s | ours "
      "with ATen's batch norm img/s | ours img/s | ours / fp32 contiguous | PyTorch img/s | ours "
      "/ PyTorch | ours GFLOP/s (of peak) | PyTorch GFLOP/s (of peak) |\n| --- | --- | --- | --- "
      "| --- | --- | --- | --- | --- | --- | --- |\n");
  double vs_peer = 1, vs_fp32 = 1;
  int peer_ratios = 0, fp32_ratios = 0;
  for (const std::string& model : SplitList(o.models)) {
    Setting setting;
    setting.precision = precision.precision;
    setting.channels_last =
        ChooseChannelsLast(o.memory_format, elastic::models::PrefersChannelsLast(model));
    const double peak = setting.precision == Precision::kFloat32 ? peak_fp32 : peak_bf16;
    const double baseline = MeasureOurs(model, train, o, Setting{});
    Setting unfused = setting;
    unfused.fused_batch_norm = false;
    const double aten_batch_norm = MeasureOurs(model, train, o, unfused);
    // Ours and the peer alternately, so a machine that slows down (a shared
    // VM) slows both; the medians go in the table.
    std::vector<double> our_runs, peer_runs;
    PeerResult theirs;
    for (int64_t i = 0; i < std::max<int64_t>(o.repeats, 1); ++i) {
      our_runs.push_back(MeasureOurs(model, train, o, setting));
      const PeerResult run = MeasurePyTorch(model, o, setting);
      if (run.images_per_second > 0) {
        peer_runs.push_back(run.images_per_second);
        theirs.train_flops_per_image = run.train_flops_per_image;
      }
    }
    const double ours = Median(our_runs);
    theirs.images_per_second = peer_runs.empty() ? 0 : Median(peer_runs);
    std::fprintf(stderr, "%s: ours %s img/s; PyTorch %s img/s\n", model.c_str(),
                 Join(our_runs).c_str(), Join(peer_runs).c_str());
    const double flops = theirs.train_flops_per_image;
    std::printf("| %s | %s | %.3f | %.1f | %.1f | %.1f | %.2fx | %.1f | %.2fx | %s | %s |\n",
                model.c_str(), setting.Name().c_str(), flops / 1e9, baseline, aten_batch_norm, ours,
                ours / baseline, theirs.images_per_second,
                theirs.images_per_second > 0 ? ours / theirs.images_per_second : 0,
                Flops(flops, ours, peak).c_str(),
                Flops(flops, theirs.images_per_second, peak).c_str());
    std::fflush(stdout);
    vs_fp32 *= ours / baseline;
    ++fp32_ratios;
    if (theirs.images_per_second > 0) {
      vs_peer *= ours / theirs.images_per_second;
      ++peer_ratios;
    }
  }

  if (!o.sweep.empty()) {
    std::vector<std::string> models;
    if (o.sweep == "all") {
      for (const auto& info : elastic::models::AvailableModels()) models.push_back(info.name);
    } else {
      models = SplitList(o.sweep);
    }
    SweepMemoryFormats(models, train, o, bf16_usable);
  }

  if (o.subset_epochs > 0) {
    TrainOptions t;
    t.model = o.subset_model;
    t.dataset = "cifar10";
    t.data_dir = o.data_dir;
    t.epochs = o.subset_epochs;
    t.batch_size = o.batch_size;
    t.threads = o.threads;
    t.loader_threads = o.loader_threads;
    t.log_every = 1000000;
    t.device = o.device;
    t.precision = o.precision;
    t.memory_format = o.memory_format;
    std::printf("\n%s on the CIFAR-10 subset, %lld epochs (SGD lr 0.1, cosine, batch %lld):\n",
                t.model.c_str(), static_cast<long long>(t.epochs),
                static_cast<long long>(t.batch_size));
    const auto start = std::chrono::steady_clock::now();
    auto trainer = Trainer::FromOptions(t, stdout);
    const TrainResult result = trainer->Run();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf(
        "subset: %.1f s per epoch (train + test), %.0f train img/s, test accuracy %.2f%% "
        "after %lld epochs\n",
        seconds / static_cast<double>(result.epochs_completed), result.train_images_per_second,
        100 * result.last_eval.metric(), static_cast<long long>(result.epochs_completed));
  }
  if (fp32_ratios > 0) {
    std::printf(
        "\nheadline: ours at our defaults / ours fp32 contiguous = %.2fx, ours / PyTorch at the "
        "same settings = %.2fx (geometric means over %d models)\n",
        std::pow(vs_fp32, 1.0 / fp32_ratios),
        peer_ratios > 0 ? std::pow(vs_peer, 1.0 / peer_ratios) : 0.0, fp32_ratios);
  }
  return 0;
}
