// model_file_bench: what training a module from Python (--model-file) costs
// against the same network from our zoo. For each model, Python
// (bench/script_model.py) torch.jit.script()s the class of
// bench/torch_peer_models.py (layer for layer the zoo's) and saves it; then,
// side by side in one run, on the same batch, threads, CIFAR-10 data,
// precision and memory format, it times
//   1. ours, the zoo's model (models::CreateModel) through Learner::Step;
//   2. ours, the scripted module (OpenModelFile(path)->Create()) through
//      Learner::Step, as the trainer runs --model-file;
//   3. PyTorch eager running the same Python class (bench/torch_peer.py).
// Warm-up steps are not timed; each figure is the median of --repeats runs of
// --steps steps, the three measured alternately so that a shared machine
// slowing down slows all three. Targets: scripted within 10% of the zoo
// (scripted / zoo >= 0.90) and scripted / eager >= 1.0x. Not a test: it prints
// a table; the last line is the headline.
//
//   bazel run //bench:model_file_bench -- --repeats=5
//   bazel run //bench:model_file_bench -- --precision=fp32 --memory-format=channels-last
//
// --jit-optimize runs the scripted module as LibTorch does by default, through
// the optimising graph executor (differentiable subgraphs), instead of as the
// trainer runs it on the CPU (TorchScriptNet::set_optimize_on_cpu);
// --no-jit-profiling with it picks the legacy executor. There is no fusion to
// switch: Debian's LibTorch has no LLVM, so NNC fuses nothing on the CPU.
#include <stdlib.h>
#include <sys/wait.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/step_timing.h"
#include "models/model_file.h"
#include "models/registry.h"
#include "models/torchscript.h"
#include "trainer/allocator.h"
#include "trainer/amp.h"
#include "trainer/data/dataset.h"
#include "trainer/data/loader.h"
#include "trainer/device.h"
#include "trainer/flags.h"
#include "trainer/learner.h"
#include "trainer/precision.h"
#include "trainer/sampler.h"

namespace {

using namespace elastic::trainer;
using elastic::bench::Figure;
using elastic::bench::Join;
using elastic::bench::Median;
using elastic::bench::SplitList;
using elastic::bench::ValueAfter;
namespace fs = std::filesystem;

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
  std::string script = "bench/script_model.py";
  std::string peer = "bench/torch_peer.py";
  std::string device = "cpu";
  std::string precision = "auto";
  std::string memory_format = "contiguous";
  // As the trainer runs a module (models/torchscript.h): not optimised on the
  // CPU; LibTorch's default executor where it is.
  bool jit_optimize = false;
  bool jit_profiling = true;
};

// What all three sides run.
struct Setting {
  Precision precision = Precision::kFloat32;
  bool channels_last = false;
  std::string Name() const {
    return std::string(PrecisionName(precision)) +
           (channels_last ? " channels-last" : " contiguous");
  }
};

// Runs `command` through the shell; its stdout and stderr, and whether it
// exited 0.
bool RunCommand(const std::string& command, std::string& output) {
  output.clear();
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return false;
  std::array<char, 4096> buffer;
  for (size_t n; (n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0;)
    output.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// Images per second of our Learner::Step on a fresh model from `create` at
// `setting` (step_timing.h). A scripted module's executor, where it
// optimises, profiles its graph in the first runs, which fall in the warm-up.
double MeasureOurs(const std::function<std::shared_ptr<elastic::models::Net>()>& create,
                   const std::string& model_name, const std::shared_ptr<const Dataset>& data,
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
  return elastic::bench::MeasureLearnerStep(create(), model_name, data, timing);
}

// Images per second of bench/torch_peer.py at `setting` (PyTorch eager, the
// same Python class the scripted module was made from); 0 when it failed.
double MeasureEager(const std::string& model, const BenchOptions& o, const Setting& setting) {
  std::ostringstream command;
  command << "OMP_NUM_THREADS=" << o.threads << " " << o.python << " " << o.peer
          << " --model=" << model << " --data-dir=" << o.data_dir
          << " --batch-size=" << o.batch_size << " --threads=" << o.threads
          << " --warmup-steps=" << o.warmup_steps << " --steps=" << o.steps
          << " --device=" << (o.device == "cpu" ? "cpu" : "cuda")
          << " --precision=" << PrecisionName(setting.precision)
          << " --memory-format=" << (setting.channels_last ? "channels-last" : "contiguous");
  std::string output;
  if (!RunCommand(command.str(), output) ||
      output.find("images_per_second=") == std::string::npos) {
    std::fprintf(stderr, "PyTorch peer failed (%s):\n%s\n", command.str().c_str(), output.c_str());
    return 0;
  }
  return ValueAfter(output, "images_per_second");
}

// "1-, 5- and 15-minute load average": on a shared machine, how busy it was.
std::string LoadAverage() {
  double load[3] = {0, 0, 0};
  if (::getloadavg(load, 3) != 3) return "unknown";
  char text[64];
  std::snprintf(text, sizeof(text), "%.2f, %.2f, %.2f", load[0], load[1], load[2]);
  return text;
}

// A path given relative to the workspace (what `bazel run` starts in), or else
// beside the binary's runfiles.
std::string Resolve(const std::string& path, const char* argv0) {
  if (::access(path.c_str(), R_OK) == 0) return path;
  return std::string(argv0) + ".runfiles/elastic/" + path;
}

}  // namespace

int main(int argc, char** argv) {
  elastic::trainer::KeepFreedMemoryForReuse();  // as in the trainer
  BenchOptions o;
  FlagSet flags("model_file_bench",
                "Training images/s of a torch.jit.script()ed module from Python (--model-file) "
                "against the same network from our zoo, both through our step, and against "
                "PyTorch eager on the same Python class; same batch, threads, data, precision "
                "and memory format.");
  flags.AddString("models", &o.models,
                  "Comma-separated models (classes of bench/torch_peer_models.py: resnet18, "
                  "resnet8).");
  flags.AddString("data-dir", &o.data_dir,
                  "CIFAR-10 binary files (data_batch_*.bin, test_batch.bin).");
  flags.AddInt("batch-size", &o.batch_size, "Images per step.");
  flags.AddInt("threads", &o.threads, "Compute threads, all sides.");
  flags.AddInt("loader-threads", &o.loader_threads, "Threads of our loader.");
  flags.AddInt("warmup-steps", &o.warmup_steps, "Untimed steps first.");
  flags.AddInt("steps", &o.steps, "Timed steps.");
  flags.AddInt("repeats", &o.repeats,
               "Times the three are measured, alternately; the table shows medians.");
  flags.AddString("python", &o.python, "Interpreter that has torch (Debian python3-torch).");
  flags.AddString("script", &o.script, "Path of bench/script_model.py.");
  flags.AddString("peer", &o.peer, "Path of bench/torch_peer.py.");
  flags.AddString("device", &o.device, "cpu, cuda or cuda:N, all sides (--config=cuda build).");
  flags.AddString("precision", &o.precision,
                  "All sides, as the trainer's --precision (auto: what the trainer picks here).",
                  {"auto", "fp32", "bf16", "fp16"});
  flags.AddString("memory-format", &o.memory_format, "All sides.", {"contiguous", "channels-last"});
  flags.AddBool("jit-optimize", &o.jit_optimize,
                "Run the scripted module through LibTorch's optimising graph executor on the "
                "CPU (LibTorch's default; the trainer turns it off: "
                "TorchScriptNet::set_optimize_on_cpu).");
  flags.AddBool("jit-profiling", &o.jit_profiling,
                "With --jit-optimize: the profiling executor (torch::jit::getProfilingMode); "
                "off: the legacy one.");
  try {
    flags.Parse(argc, argv);
  } catch (const FlagError& e) {
    std::fprintf(stderr, "model_file_bench: %s\n", e.what());
    return 2;
  }
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  o.script = Resolve(o.script, argv[0]);
  o.peer = Resolve(o.peer, argv[0]);
  torch::set_num_threads(static_cast<int>(o.threads));
  torch::jit::getProfilingMode() = o.jit_profiling;

  std::shared_ptr<const Dataset> train;
  try {
    train = LoadCifar10(o.data_dir, Split::kTrain);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "model_file_bench: %s\n", e.what());
    return 1;
  }
  const torch::Device device = ResolveDevice(o.device, 0);
  const CpuFeatures cpu = DetectCpuFeaturesFor(o.precision, device.is_cuda());
  PrecisionChoice precision;
  try {
    precision = ChoosePrecision(o.precision, device.is_cuda(), cpu);
  } catch (const FlagError& e) {
    std::fprintf(stderr, "model_file_bench: %s\n", e.what());
    return 2;
  }
  Setting setting;
  setting.precision = precision.precision;
  setting.channels_last = o.memory_format == "channels-last";

  char dir_template[] = "/tmp/model_file_bench.XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) {
    std::perror("model_file_bench: mkdtemp");
    return 1;
  }
  const fs::path dir = dir_template;
  const std::string load_before = LoadAverage();

  std::printf(
      "training throughput on %s (%s), batch %lld, %lld compute threads, %lld CIFAR-10 images "
      "from %s, SGD momentum 0.9, %lld warm-up + %lld timed steps, median of %lld\n"
      "setting (all sides): %s (precision: %s)\nscripted module on the CPU: %s\n"
      "targets: scripted / zoo >= 0.90 (within 10%%), scripted / eager >= 1.00x\n",
      o.device.c_str(), DescribeCpu(cpu).c_str(), static_cast<long long>(o.batch_size),
      static_cast<long long>(o.threads), static_cast<long long>(train->size()), o.data_dir.c_str(),
      static_cast<long long>(o.warmup_steps), static_cast<long long>(o.steps),
      static_cast<long long>(o.repeats), setting.Name().c_str(), precision.why.c_str(),
      !o.jit_optimize   ? "op by op, eager autograd (as the trainer runs it)"
      : o.jit_profiling ? "LibTorch's profiling executor, optimising"
                        : "LibTorch's legacy executor, optimising");
  double load[1] = {0};
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  // Busy: another whole thread's worth of load where the compute threads fill the CPUs.
  const double idle_cpus = std::max<double>(0, static_cast<double>(cpus - o.threads));
  if (::getloadavg(load, 1) == 1 && cpus > 0 && load[0] >= idle_cpus + 1) {
    // Compute threads that wait for a descheduled peer spin (OpenMP's
    // default): on a busy machine a step can take ten times as long.
    std::printf(
        "warning: load average %.2f on %ld CPUs before the first run: figures will be noisy\n",
        load[0], cpus);
  }
  std::printf(
      "\n| model | zoo (ours) img/s | scripted (ours) img/s | PyTorch eager img/s | scripted / "
      "zoo | scripted / eager |\n| --- | --- | --- | --- | --- | --- |\n");
  std::fflush(stdout);

  std::string headline_model;
  double headline_vs_eager = 0, headline_vs_zoo = 0;
  int failures = 0;
  for (const std::string& model : SplitList(o.models)) {
    // The module a user would bring: saved by Python, opened as --model-file opens it.
    const std::string path = (dir / (model + ".pt")).string();
    std::string output;
    if (!RunCommand(o.python + " " + o.script + " " + model + " " + path, output)) {
      std::fprintf(stderr, "model_file_bench: scripting %s failed:\n%s\n", model.c_str(),
                   output.c_str());
      ++failures;
      continue;
    }
    std::shared_ptr<const elastic::models::ModelFile> file;
    try {
      file = elastic::models::OpenModelFile(path);
    } catch (const elastic::models::ModelFileError& e) {
      std::fprintf(stderr, "model_file_bench: %s\n", e.what());
      ++failures;
      continue;
    }
    for (const std::string& warning : file->warnings()) {
      std::fprintf(stderr, "warning: %s\n", warning.c_str());
    }
    const auto zoo = [&model] { return elastic::models::CreateModel(model, 10); };
    const auto scripted = [&file, &o] {
      std::shared_ptr<elastic::models::Net> net = file->Create();
      if (auto* module = dynamic_cast<elastic::models::TorchScriptNet*>(net.get())) {
        module->set_optimize_on_cpu(o.jit_optimize);
      }
      return net;
    };
    // The same network or the comparison means nothing.
    const int64_t zoo_parameters = elastic::models::CountParameters(*zoo());
    const int64_t scripted_parameters = elastic::models::CountParameters(*scripted());
    if (zoo_parameters != scripted_parameters) {
      std::fprintf(stderr, "model_file_bench: %s has %lld parameters in the zoo, %lld scripted\n",
                   model.c_str(), static_cast<long long>(zoo_parameters),
                   static_cast<long long>(scripted_parameters));
      ++failures;
      continue;
    }

    std::vector<double> zoo_runs, scripted_runs, eager_runs;
    for (int64_t i = 0; i < std::max<int64_t>(o.repeats, 1); ++i) {
      zoo_runs.push_back(MeasureOurs(zoo, model, train, o, setting));
      scripted_runs.push_back(MeasureOurs(scripted, "file:" + model + ".pt", train, o, setting));
      const double eager = MeasureEager(model, o, setting);
      if (eager > 0) eager_runs.push_back(eager);
    }
    std::fprintf(stderr, "%s: zoo %s img/s; scripted %s img/s; eager %s img/s\n", model.c_str(),
                 Join(zoo_runs).c_str(), Join(scripted_runs).c_str(), Join(eager_runs).c_str());
    const double zoo_rate = Median(zoo_runs), scripted_rate = Median(scripted_runs),
                 eager_rate = Median(eager_runs);
    std::printf("| %s | %.1f | %.1f | %s | %.2f | %s |\n", model.c_str(), zoo_rate, scripted_rate,
                Figure("%.1f", eager_rate).c_str(), scripted_rate / zoo_rate,
                Figure("%.2fx", scripted_rate, eager_rate).c_str());
    std::fflush(stdout);
    // ResNet18 is the headline's model where it ran; else the first one.
    if (headline_model.empty() || model == "resnet18") {
      headline_model = model;
      headline_vs_zoo = scripted_rate / zoo_rate;
      headline_vs_eager = eager_rate > 0 ? scripted_rate / eager_rate : 0;
    }
  }
  std::error_code ignored;
  fs::remove_all(dir, ignored);

  std::printf("\nload average (1, 5, 15 min): %s before, %s after\n", load_before.c_str(),
              LoadAverage().c_str());
  if (!headline_model.empty()) {
    std::printf("\nheadline: scripted %s step %s PyTorch eager, %.2f of the zoo's (%s)\n",
                headline_model.c_str(), Figure("%.2fx", headline_vs_eager).c_str(), headline_vs_zoo,
                setting.Name().c_str());
  }
  return failures == 0 ? 0 : 1;
}
