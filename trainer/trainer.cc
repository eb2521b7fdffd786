#include "trainer/trainer.h"

#include <torch/torch.h>

#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <utility>

#include "models/registry.h"
#include "trainer/checkpoint.h"
#include "trainer/compute_threads.h"
#include "trainer/device.h"
#include "trainer/zoo_task.h"

namespace elastic::trainer {
namespace {

// This process's index among the ranks on its machine (mpirun says it), which
// picks its GPU with --device=cuda.
int64_t LocalRank() {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  return local != nullptr ? std::atoll(local) : 0;
}

int64_t Limit(int64_t size, int64_t limit) { return limit > 0 ? std::min(size, limit) : size; }

// `auto_why`: why --memory-format=auto chooses as `prefers_channels_last` says.
Arithmetic Choose(const TrainOptions& o, const std::string& auto_why, bool prefers_channels_last,
                  const torch::Device& device) {
  Arithmetic a;
  const PrecisionChoice precision = ChoosePrecision(
      o.precision, device.is_cuda(), DetectCpuFeaturesFor(o.precision, device.is_cuda()));
  a.precision = precision.precision;
  a.channels_last = ChooseChannelsLast(o.memory_format, prefers_channels_last, a.precision);
  a.why = std::string("precision ") + PrecisionName(a.precision) + " (" + precision.why +
          "), memory format " + (a.channels_last ? "channels-last" : "contiguous") + " (" +
          (o.memory_format != "auto" ? "--memory-format=" + o.memory_format : "auto: " + auto_why) +
          ")";
  return a;
}

}  // namespace

std::string Arithmetic::Summary() const {
  return std::string(PrecisionName(precision)) +
         (channels_last ? ", channels-last" : ", contiguous");
}

Arithmetic ChooseArithmetic(const TrainOptions& o, const Task& task, const torch::Device& device) {
  const std::string why =
      task.model_file
          ? "a --model-file module is not measured; --memory-format=channels-last "
            "tries it"
          : task.model_name + (task.prefers_channels_last ? " measured faster channels-last"
                                                          : " measured faster contiguous");
  return Choose(o, why, task.prefers_channels_last, device);
}

void CheckArithmetic(const TrainOptions& options) {
  torch::Device device = torch::kCPU;
  try {
    device = ResolveDevice(options.device, 0);
  } catch (const std::runtime_error&) {
    return;
  }
  Choose(options, "", models::PrefersChannelsLast(options.model), device);
}

LearnerOptions MakeLearnerOptions(const TrainOptions& o, const Task& task,
                                  const Arithmetic& arithmetic, int world_size,
                                  int64_t global_batch) {
  // Each step averages the gradients of world_size x --batch-size samples: the
  // learning rate grows with it (the linear scaling rule), unless the global
  // batch is fixed.
  const double lr = global_batch == 0 ? o.lr * world_size : o.lr;
  LearnerOptions l;
  l.model_name = task.model_name;
  l.num_classes = task.objective->num_classes();
  l.objective = task.objective;
  l.optimizer.kind = o.optimizer;
  l.optimizer.lr = lr;
  l.optimizer.momentum = o.momentum;
  l.optimizer.nesterov = o.nesterov;
  l.optimizer.weight_decay = o.weight_decay;
  l.optimizer.adam_beta1 = o.adam_beta1;
  l.optimizer.adam_beta2 = o.adam_beta2;
  l.optimizer.lookahead = o.lookahead;
  l.optimizer.lookahead_k = o.lookahead_k;
  l.optimizer.lookahead_alpha = o.lookahead_alpha;
  l.schedule.kind = ParseScheduleKind(o.schedule);
  l.schedule.base_lr = lr;
  l.schedule.min_lr = o.min_lr;
  l.schedule.warmup_epochs = o.warmup_epochs;
  l.schedule.warmup_steps = o.warmup_steps;
  l.schedule.total_epochs = static_cast<double>(o.epochs);
  l.schedule.decay_steps = o.decay_steps;
  l.schedule.step_size = static_cast<double>(o.step_size);
  l.schedule.gamma = o.gamma;
  l.schedule.plateau_patience = o.plateau_patience;
  l.schedule.plateau_factor = o.plateau_factor;
  l.patience = o.patience;
  l.clip_grad = o.clip_grad;
  l.precision = arithmetic.precision;
  l.channels_last = arithmetic.channels_last;
  l.seed = static_cast<uint64_t>(o.seed);
  return l;
}

std::unique_ptr<Learner> MakeLearner(const TrainOptions& options, const Task& task,
                                     const Arithmetic& arithmetic, const torch::Device& device,
                                     int world_size, int64_t global_batch) {
  SeedTorch(static_cast<uint64_t>(options.seed));
  return std::make_unique<Learner>(
      task.model(), MakeLearnerOptions(options, task, arithmetic, world_size, global_batch),
      device);
}

std::unique_ptr<Learner> MakeLearnerOver(std::shared_ptr<models::Net> model,
                                         const TrainOptions& options, const Task& task,
                                         const Arithmetic& arithmetic, const torch::Device& device,
                                         int world_size, int64_t global_batch) {
  // As for a fresh Learner; the restored state then sets the generator as
  // committed (Learner::RestoreState).
  SeedTorch(static_cast<uint64_t>(options.seed));
  return std::make_unique<Learner>(
      std::move(model), MakeLearnerOptions(options, task, arithmetic, world_size, global_batch),
      device);
}

LoopConfig MakeLoopConfig(const TrainOptions& o, const Task& task, const Arithmetic& arithmetic) {
  LoopConfig c;
  c.limits.train_size = Limit(task.train->size(), o.train_samples);
  c.limits.epochs = o.epochs;
  c.limits.max_steps = o.max_steps;
  c.limits.commit_every = 1;
  c.limits.checkpoint_every = o.checkpoint_every;
  c.limits.eval_every = o.eval_every;
  c.batch_size = o.batch_size;
  c.test_size = Limit(task.test->size(), o.test_samples);
  c.augment = o.augment;
  c.balance = o.balance;
  c.loader_threads = o.loader_threads;
  c.precision = arithmetic.precision;
  c.channels_last = arithmetic.channels_last;
  c.arithmetic = arithmetic.Summary();
  c.checkpoint_dir = o.checkpoint_dir;
  c.trace_dir = o.trace_dir;
  c.recompute_bn = o.recompute_bn;
  return c;
}

MetricLabel MetricLabelOf(const Task& task) {
  const Objective& objective = *task.objective;
  MetricLabel label;
  label.percent = objective.metric_is_fraction();
  label.name = objective.metric_name() == "accuracy" ? "acc" : objective.metric_name();
  label.long_name = objective.metric_name();
  label.perplexity = dynamic_cast<const LanguageModel*>(&objective) != nullptr;
  if (task.tokens_per_sample > 0) {
    label.unit = "tok";
    label.units_per_sample = task.tokens_per_sample;
  }
  return label;
}

MetricLabel LanguageModelLabel(int64_t context) {
  Task task;
  task.objective = std::make_shared<LanguageModel>(2);
  task.tokens_per_sample = context;
  return MetricLabelOf(task);
}

Trainer::Trainer(const TrainOptions& options, Task task, std::FILE* out,
                 collectives::Communicator* world, RunObserver* observer)
    : options_(options), task_(std::move(task)) {
  task_.Check();
  world_ = std::make_unique<FixedWorld>(world, out, options_.epochs, options_.log_every,
                                        MetricLabelOf(task_), observer);
  if (options_.threads > 0) SetComputeThreads(static_cast<int>(options_.threads));
  const torch::Device device = ResolveDevice(options_.device, LocalRank());
  arithmetic_ = ChooseArithmetic(options_, task_, device);
  std::fprintf(world_->out(), "training %s on %s: %s\n", task_.model_name.c_str(),
               device.str().c_str(), arithmetic_.why.c_str());
  learner_ = MakeLearner(options_, task_, arithmetic_, device, world_->size());
  loop_ = std::make_unique<TrainingLoop>(task_, MakeLoopConfig(options_, task_, arithmetic_),
                                         *learner_, state_, *world_);
  RestoreOrSync();
}

Trainer::Trainer(const TrainOptions& options, std::shared_ptr<const Dataset> train,
                 std::shared_ptr<const Dataset> test, std::FILE* out,
                 collectives::Communicator* world)
    : Trainer(options, ZooTask(options, std::move(train), std::move(test)), out, world) {}

Trainer::~Trainer() {
  loop_.reset();  // its gradient hooks go before the model
}

std::unique_ptr<Trainer> Trainer::FromOptions(const TrainOptions& options, std::FILE* out,
                                              collectives::Communicator* world) {
  return std::make_unique<Trainer>(options, ZooTaskFromOptions(options), out, world);
}

void Trainer::RestoreOrSync() {
  const std::string path = CheckpointPath(options_.checkpoint_dir);
  std::exception_ptr read_error;
  if (world_->rank() == 0) {
    try {
      state_.commit.learner = options_.resume ? ReadCheckpointFile(path) : learner_->CaptureState();
    } catch (...) {
      read_error = std::current_exception();
    }
  }
  try {
    loop_->Sync(0, !read_error);
  } catch (const std::exception& e) {
    if (read_error) std::rethrow_exception(read_error);
    if (!options_.resume) throw;
    throw CheckpointError("checkpoint " + path + " does not fit this run: " + e.what());
  }
  if (!options_.resume) return;
  const TrainingProgress& p = learner_->progress();
  if (learner_->seed() != static_cast<uint64_t>(options_.seed)) {
    std::fprintf(world_->out(),
                 "note: the checkpoint was trained with --seed=%llu; continuing with it\n",
                 static_cast<unsigned long long>(learner_->seed()));
  }
  std::fprintf(world_->out(), "resumed from %s at epoch %lld, position %lld, step %lld\n",
               path.c_str(), static_cast<long long>(p.epoch + 1),
               static_cast<long long>(p.position), static_cast<long long>(p.step));
}

TrainResult Trainer::Run() {
  const int64_t start_epoch = learner_->progress().epoch;
  loop_->Run();
  TrainResult result;
  result.epochs_completed = learner_->progress().epoch - start_epoch;
  result.steps = learner_->progress().step;
  result.early_stopped = state_.stopped_early;
  result.last_eval = loop_->last_eval();
  result.train_images_per_second = world_->train_images_per_second();
  return result;
}

}  // namespace elastic::trainer
