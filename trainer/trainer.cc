#include "trainer/trainer.h"

#include <sys/stat.h>
#include <torch/torch.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>

#include "collectives/gradient_reducer.h"
#include "collectives/tensor_ops.h"
#include "models/registry.h"
#include "trainer/checkpoint.h"
#include "trainer/checksum.h"
#include "trainer/device.h"

namespace elastic::trainer {
namespace {

// This process's index among the ranks on its machine (mpirun says it), which
// picks its GPU with --device=cuda.
int64_t LocalRank() {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  return local != nullptr ? std::atoll(local) : 0;
}

void MakeDirectories(const std::string& dir) {
  for (size_t slash = 1; slash != std::string::npos;) {
    slash = dir.find('/', slash + 1);
    const std::string prefix = dir.substr(0, slash);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST)
      throw CheckpointError("cannot create checkpoint directory " + prefix + ": " +
                            std::strerror(errno));
  }
}

int64_t Limit(int64_t size, int64_t limit) { return limit > 0 ? std::min(size, limit) : size; }

using collectives::Communicator;
using collectives::DataType;
using collectives::ReduceOp;

// Rank 0's `bytes` on every rank. Rank 0 passes null when it has nothing to
// send (it failed): every other rank then throws instead of waiting for it.
// Every rank refuses a size over `limit` (Learner::StateSizeLimit) rather
// than allocating it.
std::string BroadcastFromRankZero(Communicator& world, const std::string* bytes, uint64_t limit) {
  int64_t size =
      world.rank() == 0 ? (bytes != nullptr ? static_cast<int64_t>(bytes->size()) : -1) : 0;
  world.Broadcast(&size, 1, DataType::kInt64, 0);
  if (size < 0) {
    if (world.rank() == 0) return std::string();  // the caller reports its own error
    throw std::runtime_error("rank 0 failed to read the training state (see its error)");
  }
  if (static_cast<uint64_t>(size) > limit) {
    throw std::runtime_error("rank 0 announced a training state of " + std::to_string(size) +
                             " bytes; one of this model is at most " + std::to_string(limit) +
                             " bytes (4 x this rank's own + 64 MiB): not allocating it");
  }
  // As int64 words: every backend moves those.
  std::vector<int64_t> words((static_cast<size_t>(size) + 7) / 8, 0);
  if (world.rank() == 0) std::memcpy(words.data(), bytes->data(), bytes->size());
  world.Broadcast(words.data(), words.size(), DataType::kInt64, 0);
  return std::string(reinterpret_cast<const char*>(words.data()), static_cast<size_t>(size));
}

// Calls the GradientReducer between backward and the optimizer step: every
// rank then steps on the same summed, share-weighted gradients.
class ReduceGradients : public GradientHook {
 public:
  explicit ReduceGradients(collectives::GradientReducer& reducer) : reducer_(reducer) {}
  void AfterBackward(const std::vector<torch::Tensor>&) override { reducer_.Finish(); }

 private:
  collectives::GradientReducer& reducer_;
};

}  // namespace

std::string Arithmetic::Summary() const {
  return std::string(PrecisionName(precision)) +
         (channels_last ? ", channels-last" : ", contiguous");
}

Arithmetic ChooseArithmetic(const TrainOptions& o, const torch::Device& device) {
  Arithmetic a;
  const PrecisionChoice precision = ChoosePrecision(
      o.precision, device.is_cuda(), DetectCpuFeaturesFor(o.precision, device.is_cuda()));
  a.precision = precision.precision;
  const bool prefers = models::PrefersChannelsLast(o.model);
  a.channels_last = ChooseChannelsLast(o.memory_format, prefers);
  a.why = std::string("precision ") + PrecisionName(a.precision) + " (" + precision.why +
          "), memory format " + (a.channels_last ? "channels-last" : "contiguous") + " (" +
          (o.memory_format != "auto"
               ? "--memory-format=" + o.memory_format
               : "auto: " + o.model +
                     (prefers ? " measured faster channels-last" : " measured faster contiguous")) +
          ")";
  return a;
}

void CheckArithmetic(const TrainOptions& options) {
  torch::Device device = torch::kCPU;
  try {
    device = ResolveDevice(options.device, 0);
  } catch (const std::runtime_error&) {
    return;
  }
  ChooseArithmetic(options, device);
}

LearnerOptions MakeLearnerOptions(const TrainOptions& o, int64_t num_classes,
                                  const Arithmetic& arithmetic) {
  LearnerOptions l;
  l.model_name = o.model;
  l.num_classes = num_classes;
  l.optimizer.kind = o.optimizer;
  l.optimizer.lr = o.lr;
  l.optimizer.momentum = o.momentum;
  l.optimizer.nesterov = o.nesterov;
  l.optimizer.weight_decay = o.weight_decay;
  l.optimizer.adam_beta1 = o.adam_beta1;
  l.optimizer.adam_beta2 = o.adam_beta2;
  l.optimizer.lookahead = o.lookahead;
  l.optimizer.lookahead_k = o.lookahead_k;
  l.optimizer.lookahead_alpha = o.lookahead_alpha;
  l.schedule.kind = ParseScheduleKind(o.schedule);
  l.schedule.base_lr = o.lr;
  l.schedule.min_lr = o.min_lr;
  l.schedule.warmup_epochs = o.warmup_epochs;
  l.schedule.total_epochs = static_cast<double>(o.epochs);
  l.schedule.step_size = static_cast<double>(o.step_size);
  l.schedule.gamma = o.gamma;
  l.schedule.plateau_patience = o.plateau_patience;
  l.schedule.plateau_factor = o.plateau_factor;
  l.patience = o.patience;
  l.label_smoothing = o.label_smoothing;
  l.clip_grad = o.clip_grad;
  l.precision = arithmetic.precision;
  l.channels_last = arithmetic.channels_last;
  l.seed = static_cast<uint64_t>(o.seed);
  return l;
}

Trainer::Trainer(const TrainOptions& options, std::shared_ptr<const Dataset> train,
                 std::shared_ptr<const Dataset> test, std::FILE* out,
                 collectives::Communicator* world)
    : options_(options),
      world_(world),
      rank_(world != nullptr ? world->rank() : 0),
      world_size_(world != nullptr ? world->size() : 1),
      train_(std::move(train)),
      test_(std::move(test)) {
  if (!train_ || !test_) throw std::invalid_argument("Trainer: missing data set");
  if (train_->num_classes() != test_->num_classes())
    throw std::invalid_argument("Trainer: train and test splits have different classes");
  if (rank_ != 0) {
    // The job's progress is rank 0's to print; the others print nothing.
    quiet_ = std::fopen("/dev/null", "w");
    if (quiet_ == nullptr) throw std::runtime_error("cannot open /dev/null");
    out = quiet_;
  }
  reporter_ = std::make_unique<ProgressReporter>(out, ProgressReporter::IsTerminal(out),
                                                 options_.log_every);
  if (options_.threads > 0) torch::set_num_threads(static_cast<int>(options_.threads));
  train_size_ = Limit(train_->size(), options_.train_samples);
  // Each rank evaluates every world-th test sample; the sums are added up.
  for (int64_t i = rank_; i < Limit(test_->size(), options_.test_samples); i += world_size_)
    test_indices_.push_back(i);
  class_names_ = train_->class_names();

  // Each step averages the gradients of world_size_ x --batch-size samples: the
  // learning rate grows with it (the linear scaling rule, as the elastic trainer).
  TrainOptions scaled = options_;
  scaled.lr = options_.lr * world_size_;
  const torch::Device device = ResolveDevice(options_.device, LocalRank());
  arithmetic_ = ChooseArithmetic(options_, device);
  std::fprintf(out, "training %s on %s: %s\n", options_.model.c_str(), device.str().c_str(),
               arithmetic_.why.c_str());
  SeedTorch(static_cast<uint64_t>(options_.seed));
  learner_ = std::make_unique<Learner>(
      models::CreateModel(options_.model, train_->num_classes()),
      MakeLearnerOptions(scaled, train_->num_classes(), arithmetic_), device);
  RestoreOrSync(out);
  sampler_ = std::make_unique<ElasticSampler>(train_size_, learner_->seed());

  LoaderOptions train_loader;
  train_loader.batch_size = options_.batch_size;
  train_loader.augment = options_.augment;
  train_loader.threads = static_cast<int>(options_.loader_threads);
  train_loader.seed = learner_->seed();
  train_loader.channels_last = arithmetic_.channels_last;
  train_loader_ = std::make_unique<Loader>(train_, train_loader);
  LoaderOptions test_loader = train_loader;
  test_loader.augment = false;
  test_loader.batch_size = std::max<int64_t>(options_.batch_size, 256);
  test_loader_ = std::make_unique<Loader>(test_, test_loader);

  if (world_ != nullptr) {
    LoaderOptions filler;
    filler.batch_size = 1;
    filler.augment = false;
    filler.threads = 1;
    filler_loader_ = std::make_unique<Loader>(train_, filler);
    // Summed, not averaged: each rank weights its loss by its share of the
    // step (TrainEpoch), which keeps the short last step of an epoch exact,
    // where ranks hold unequal shares (or none).
    collectives::GradientReducerOptions sum;
    sum.op = ReduceOp::kSum;
    reducer_ = std::make_unique<collectives::GradientReducer>(learner_->parameters(), world_, sum);
  }
}

Trainer::~Trainer() {
  reducer_.reset();  // its hooks go before the model
  if (quiet_ != nullptr) std::fclose(quiet_);
}

std::unique_ptr<Trainer> Trainer::FromOptions(const TrainOptions& options, std::FILE* out,
                                              collectives::Communicator* world) {
  std::shared_ptr<const Dataset> train =
      LoadDataset(options.dataset, options.data_dir, Split::kTrain);
  std::shared_ptr<const Dataset> test =
      LoadDataset(options.dataset, options.data_dir, Split::kTest);
  return std::make_unique<Trainer>(options, std::move(train), std::move(test), out, world);
}

void Trainer::RestoreOrSync(std::FILE* out) {
  if (!options_.resume && world_ == nullptr) return;
  const std::string path = CheckpointPath(options_.checkpoint_dir);
  std::string state;
  std::exception_ptr read_error;
  if (rank_ == 0) {
    try {
      state = options_.resume ? ReadCheckpointFile(path) : learner_->CaptureState();
    } catch (...) {
      read_error = std::current_exception();
    }
  }
  // Even the fresh model is sent: the ranks start from rank 0's bytes, not
  // from the hope that they seeded the same way.
  if (world_ != nullptr) {
    state =
        BroadcastFromRankZero(*world_, read_error ? nullptr : &state, learner_->StateSizeLimit());
  }
  if (read_error) std::rethrow_exception(read_error);
  if (options_.resume || rank_ != 0) {
    try {
      learner_->RestoreState(state);
    } catch (const std::exception& e) {
      throw CheckpointError("checkpoint " + path + " does not fit this run: " + e.what());
    }
  }
  if (options_.resume) {
    const TrainingProgress& p = learner_->progress();
    if (learner_->seed() != static_cast<uint64_t>(options_.seed)) {
      std::fprintf(out, "note: the checkpoint was trained with --seed=%llu; continuing with it\n",
                   static_cast<unsigned long long>(learner_->seed()));
    }
    std::fprintf(out, "resumed from %s at epoch %lld, position %lld, step %lld\n", path.c_str(),
                 static_cast<long long>(p.epoch + 1), static_cast<long long>(p.position),
                 static_cast<long long>(p.step));
  }
  if (world_ != nullptr) CheckRanksAgree("start");
}

void Trainer::CheckRanksAgree(const char* when) {
  if (world_ == nullptr) return;
  const int64_t mine = static_cast<int64_t>(ParameterChecksum(learner_->parameters()));
  std::vector<int64_t> all(static_cast<size_t>(world_size_));
  world_->Allgather(&mine, all.data(), 1, DataType::kInt64);
  std::fprintf(stderr, "rank %d of %d: parameters at %s: checksum=%016llx\n", rank_, world_size_,
               when, static_cast<unsigned long long>(mine));
  std::fflush(stderr);
  for (int r = 1; r < world_size_; ++r) {
    if (all[static_cast<size_t>(r)] != all[0]) {
      throw std::runtime_error(std::string("parameters differ between ranks at ") + when +
                               ": rank " + std::to_string(r) + " is not rank 0's");
    }
  }
}

bool Trainer::TrainEpoch(double* loss_sum, int64_t* correct, int64_t* seen) {
  TrainingProgress& p = learner_->progress();
  const std::vector<int64_t> permutation = sampler_->Permutation(static_cast<uint64_t>(p.epoch));
  const int64_t batch = options_.batch_size;
  const int64_t per_step = world_size_ * batch;
  const int64_t steps_done = (p.position + per_step - 1) / per_step;
  const int64_t steps_left = sampler_->StepsLeft(p.position, per_step);
  reporter_->StartEpoch(p.epoch + 1, options_.epochs, steps_done + steps_left);

  // This rank's share of every step left. All but the epoch's last step give
  // each rank exactly `batch` samples, so the loader's batches are the shares.
  std::vector<int64_t> mine;
  std::vector<int64_t> share;  // per step
  for (int64_t at = p.position; at < train_size_; at = sampler_->NextPosition(at, per_step)) {
    const std::vector<int64_t> step =
        sampler_->StepIndices(permutation, at, rank_, world_size_, per_step);
    share.push_back(static_cast<int64_t>(step.size()));
    mine.insert(mine.end(), step.begin(), step.end());
  }
  train_loader_->Start(std::move(mine), static_cast<uint64_t>(p.epoch));

  int64_t step_in_epoch = steps_done;
  for (const int64_t my_share : share) {
    if (options_.max_steps > 0 && p.step >= options_.max_steps) return false;
    const int64_t step_samples = std::min(per_step, train_size_ - p.position);
    std::optional<Batch> next;
    if (my_share > 0) {
      next = train_loader_->Next();
    } else {
      // No share of a short last step: train one sample at weight 0, so that
      // this rank still takes part in the step's collectives.
      filler_loader_->Start({permutation[0]}, static_cast<uint64_t>(p.epoch));
      next = filler_loader_->Next();
    }
    if (!next) throw std::logic_error("the loader ran out of batches before the epoch ended");
    const double epochs_done =
        static_cast<double>(p.epoch) +
        static_cast<double>(p.position + step_samples) / static_cast<double>(train_size_);
    StepStats stats;
    if (reducer_) {
      // The filler sample (no share) weighs 0.
      const MicroBatch mine{next->images, next->labels,
                            static_cast<double>(my_share) / static_cast<double>(step_samples)};
      ReduceGradients hook(*reducer_);
      stats = learner_->Step({mine}, epochs_done, &hook);
    } else {
      stats = learner_->Step(next->images, next->labels, epochs_done);
    }
    p.position = sampler_->NextPosition(p.position, per_step);
    ++p.step;
    ++step_in_epoch;
    // The step's loss and accuracy over all ranks (three numbers: cheap next
    // to the gradients), so that what rank 0 prints is the job's.
    double sums[3] = {0, 0, 0};
    if (my_share > 0) {
      sums[0] = stats.loss_sum;
      sums[1] = static_cast<double>(stats.correct);
      sums[2] = static_cast<double>(stats.count);
    }
    if (world_ != nullptr) world_->Allreduce(sums, 3, DataType::kFloat64, ReduceOp::kSum);
    *loss_sum += sums[0];
    *correct += static_cast<int64_t>(sums[1]);
    *seen += static_cast<int64_t>(sums[2]);
    reporter_->Step(step_in_epoch, p.step, *seen, *loss_sum / static_cast<double>(*seen),
                    static_cast<double>(*correct) / static_cast<double>(*seen), stats.lr);
  }
  return true;
}

EvalResult Trainer::EvaluateAll() {
  const int64_t classes = static_cast<int64_t>(class_names_.size());
  if (world_ != nullptr) {
    // Rank 0's model: parameters are the same everywhere, batch-norm running
    // statistics are each rank's own until this broadcast.
    for (const torch::Tensor& buffer : learner_->model().buffers()) {
      torch::Tensor b = buffer.contiguous();
      collectives::Broadcast(*world_, b, 0);
      if (!b.is_same(buffer)) buffer.copy_(b);
    }
  }
  EvalResult result(classes);
  if (!test_indices_.empty()) {
    result = Evaluate(learner_->model(), *test_loader_, test_indices_, classes, learner_->device(),
                      arithmetic_.precision);
  }
  if (world_ == nullptr) return result;
  // Sums add up exactly (EvalResult holds no ratios).
  std::vector<double> sums = {result.loss_sum, static_cast<double>(result.correct),
                              static_cast<double>(result.count)};
  for (int64_t c = 0; c < classes; ++c) {
    sums.push_back(static_cast<double>(result.class_correct[c]));
    sums.push_back(static_cast<double>(result.class_count[c]));
  }
  world_->Allreduce(sums.data(), sums.size(), DataType::kFloat64, ReduceOp::kSum);
  EvalResult total(classes);
  total.loss_sum = sums[0];
  total.correct = static_cast<int64_t>(sums[1]);
  total.count = static_cast<int64_t>(sums[2]);
  for (int64_t c = 0; c < classes; ++c) {
    total.class_correct[c] = static_cast<int64_t>(sums[3 + 2 * c]);
    total.class_count[c] = static_cast<int64_t>(sums[4 + 2 * c]);
  }
  return total;
}

void Trainer::WriteCheckpoint() {
  // After EvaluateAll every rank holds the same state: rank 0's is the job's.
  if (options_.checkpoint_dir.empty() || rank_ != 0) return;
  MakeDirectories(options_.checkpoint_dir);
  WriteCheckpointFile(CheckpointPath(options_.checkpoint_dir), learner_->CaptureState());
}
TrainResult Trainer::Run() {
  TrainResult result;
  TrainingProgress& p = learner_->progress();
  int64_t images = 0;
  double train_seconds_total = 0;
  while (p.epoch < options_.epochs) {
    double loss_sum = 0;
    int64_t correct = 0, seen = 0;
    const bool finished = TrainEpoch(&loss_sum, &correct, &seen);
    const double train_seconds = reporter_->epoch_seconds();
    images += seen;
    train_seconds_total += train_seconds;
    if (seen == 0 && !finished) break;  // --max-steps was already reached

    result.last_eval = EvaluateAll();
    EpochSummary summary;
    summary.epoch = p.epoch + 1;
    summary.epochs = options_.epochs;
    summary.train_loss = seen > 0 ? loss_sum / static_cast<double>(seen) : 0;
    summary.train_accuracy =
        seen > 0 ? static_cast<double>(correct) / static_cast<double>(seen) : 0;
    summary.test_loss = result.last_eval.loss();
    summary.test_accuracy = result.last_eval.accuracy();
    summary.images_per_second = train_seconds > 0 ? static_cast<double>(seen) / train_seconds : 0;
    summary.seconds = reporter_->epoch_seconds();
    summary.arithmetic = arithmetic_.Summary();
    summary.lr = learner_->schedule().LearningRate(static_cast<double>(p.epoch) +
                                                   static_cast<double>(p.position) /
                                                       static_cast<double>(train_size_));
    reporter_->EndEpoch(summary);

    if (finished) {
      result.early_stopped = learner_->EndEpoch(result.last_eval.loss());
      ++p.epoch;
      p.position = 0;
      ++result.epochs_completed;
    }
    const bool last = !finished || result.early_stopped || p.epoch >= options_.epochs;
    if (last || p.epoch % options_.checkpoint_every == 0) WriteCheckpoint();
    if (result.early_stopped) {
      reporter_->Note("early stopping: test loss has not improved for --patience epochs");
    }
    if (last) break;
  }
  CheckRanksAgree("end");
  result.steps = p.step;
  result.train_images_per_second =
      train_seconds_total > 0 ? static_cast<double>(images) / train_seconds_total : 0;
  return result;
}

}  // namespace elastic::trainer
