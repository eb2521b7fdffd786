// train_step_bench: training throughput of our C++ step against PyTorch from
// Python on the same models, batch, threads and data, then how long one epoch
// of the real CIFAR-10 subset takes and the accuracy a fixed number of epochs
// reaches. Not a test: it prints a table, the last line is the headline ratio.
//
//   bazel run //bench:train_step_bench -- --threads=2
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "models/registry.h"
#include "trainer/allocator.h"
#include "trainer/data/dataset.h"
#include "trainer/data/loader.h"
#include "trainer/device.h"
#include "trainer/elastic/sampler.h"
#include "trainer/flags.h"
#include "trainer/learner.h"
#include "trainer/trainer.h"

namespace {

using namespace elastic::trainer;

struct BenchOptions {
  std::string models = "resnet18,resnet8";
  std::string data_dir = "/work/shared/data/cifar10-subset";
  int64_t batch_size = 128;
  int64_t threads = 2;
  int64_t loader_threads = 1;
  int64_t warmup_steps = 3;
  int64_t steps = 20;
  std::string python = "/usr/bin/python3";
  std::string peer = "bench/torch_peer.py";
  std::string subset_model = "resnet8";
  int64_t subset_epochs = 10;
  std::string device = "cpu";
  bool amp = false;
};

std::vector<std::string> SplitList(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// Images per second of our Learner::Step, fed by our Loader, after warm-up.
double MeasureOurs(const std::string& model, const std::shared_ptr<const Dataset>& data,
                   const BenchOptions& o) {
  LoaderOptions loader_options;
  loader_options.batch_size = o.batch_size;
  loader_options.threads = static_cast<int>(o.loader_threads);
  loader_options.drop_last = true;
  Loader loader(data, loader_options);
  ElasticSampler sampler(data->size(), 0);

  LearnerOptions learner_options;
  learner_options.model_name = model;
  learner_options.optimizer.lr = 0.1;
  learner_options.optimizer.momentum = 0.9;
  learner_options.optimizer.weight_decay = 5e-4;
  learner_options.schedule.kind = ScheduleKind::kConstant;
  learner_options.schedule.base_lr = 0.1;
  learner_options.amp = o.amp;
  SeedTorch(0);
  Learner learner(elastic::models::CreateModel(model, 10), learner_options,
                  ResolveDevice(o.device, 0));

  uint64_t epoch = 0;
  loader.Start(sampler.Permutation(epoch), epoch);
  std::chrono::steady_clock::time_point start;
  for (int64_t step = 0; step < o.warmup_steps + o.steps; ++step) {
    if (step == o.warmup_steps) start = std::chrono::steady_clock::now();
    std::optional<Batch> batch = loader.Next();
    if (!batch) {
      ++epoch;
      loader.Start(sampler.Permutation(epoch), epoch);
      batch = loader.Next();
    }
    learner.Step(batch->images, batch->labels, 1.0);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return static_cast<double>(o.steps * o.batch_size) / seconds;
}

// Runs the Python peer and reads its `images_per_second=` line; 0 on failure.
double MeasurePyTorch(const std::string& model, const BenchOptions& o) {
  std::ostringstream command;
  command << "OMP_NUM_THREADS=" << o.threads << " " << o.python << " " << o.peer
          << " --model=" << model << " --data-dir=" << o.data_dir
          << " --batch-size=" << o.batch_size << " --threads=" << o.threads
          << " --warmup-steps=" << o.warmup_steps << " --steps=" << o.steps
          << " --device=" << (o.device == "cpu" ? "cpu" : "cuda") << (o.amp ? " --amp" : "")
          << " 2>&1";
  FILE* pipe = ::popen(command.str().c_str(), "r");
  if (pipe == nullptr) return 0;
  std::string output;
  std::array<char, 4096> buffer;
  for (size_t n; (n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0;)
    output.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  const size_t at = output.rfind("images_per_second=");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || at == std::string::npos) {
    std::fprintf(stderr, "PyTorch peer failed (%s):\n%s\n", command.str().c_str(), output.c_str());
    return 0;
  }
  return std::atof(output.c_str() + at + std::strlen("images_per_second="));
}

}  // namespace

int main(int argc, char** argv) {
  elastic::trainer::KeepFreedMemoryForReuse();  // as in the trainer
  BenchOptions o;
  FlagSet flags("train_step_bench",
                "Training images/s of the C++ step vs PyTorch from Python (same models, batch, "
                "threads, data), then epochs of the CIFAR-10 subset.");
  flags.AddString("models", &o.models, "Comma-separated models to time.");
  flags.AddString("data-dir", &o.data_dir,
                  "CIFAR-10 binary files (data_batch_*.bin, test_batch.bin).");
  flags.AddInt("batch-size", &o.batch_size, "Images per step.");
  flags.AddInt("threads", &o.threads, "Compute threads, both sides.");
  flags.AddInt("loader-threads", &o.loader_threads, "Threads of our loader.");
  flags.AddInt("warmup-steps", &o.warmup_steps, "Untimed steps first.");
  flags.AddInt("steps", &o.steps, "Timed steps.");
  flags.AddString("python", &o.python, "Interpreter that has torch (Debian python3-torch).");
  flags.AddString("peer", &o.peer, "Path of bench/torch_peer.py.");
  flags.AddString("subset-model", &o.subset_model, "Model trained on the CIFAR-10 subset.");
  flags.AddInt("subset-epochs", &o.subset_epochs, "Epochs on the subset; 0: skip.");
  flags.AddString("device", &o.device, "cpu, cuda or cuda:N, both sides (--config=cuda build).");
  flags.AddBool("amp", &o.amp, "Mixed precision, both sides (float16 + loss scaling on CUDA).");
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

  std::printf(
      "training throughput on %s%s, batch %lld, %lld compute threads, %lld CIFAR-10 images "
      "from %s, SGD momentum 0.9\n\n",
      o.device.c_str(), o.amp ? " with --amp" : "", static_cast<long long>(o.batch_size),
      static_cast<long long>(o.threads), static_cast<long long>(train->size()), o.data_dir.c_str());
  std::printf(
      "| model | parameters | C++ (ours) img/s | PyTorch (Python) img/s | ours / PyTorch |\n");
  std::printf("| --- | --- | --- | --- | --- |\n");
  double ratio_product = 1;
  int ratios = 0;
  for (const std::string& model : SplitList(o.models)) {
    const int64_t parameters =
        elastic::models::CountParameters(*elastic::models::CreateModel(model, 10));
    const double ours = MeasureOurs(model, train, o);
    const double theirs = MeasurePyTorch(model, o);
    std::printf("| %s | %lld | %.1f | %.1f | %.2fx |\n", model.c_str(),
                static_cast<long long>(parameters), ours, theirs, theirs > 0 ? ours / theirs : 0);
    std::fflush(stdout);
    if (theirs > 0) {
      ratio_product *= ours / theirs;
      ++ratios;
    }
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
    t.amp = o.amp;
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
        100 * result.last_eval.accuracy(), static_cast<long long>(result.epochs_completed));
  }
  if (ratios > 0) {
    std::printf(
        "\nheadline: ours / PyTorch training throughput, geometric mean over %d models: "
        "%.2fx\n",
        ratios, std::pow(ratio_product, 1.0 / ratios));
  }
  return 0;
}
