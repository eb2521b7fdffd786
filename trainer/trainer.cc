#include "trainer/trainer.h"

#include <sys/stat.h>
#include <torch/utils.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "models/registry.h"
#include "trainer/checkpoint.h"

namespace elastic::trainer {
namespace {

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

}  // namespace

LearnerOptions MakeLearnerOptions(const TrainOptions& o, int64_t num_classes) {
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
  l.amp = o.amp;
  l.seed = static_cast<uint64_t>(o.seed);
  return l;
}

Trainer::Trainer(const TrainOptions& options, std::shared_ptr<const Dataset> train,
                 std::shared_ptr<const Dataset> test, std::FILE* out)
    : options_(options),
      train_(std::move(train)),
      test_(std::move(test)),
      reporter_(out, ProgressReporter::IsTerminal(out), options.log_every) {
  if (!train_ || !test_) throw std::invalid_argument("Trainer: missing data set");
  if (train_->num_classes() != test_->num_classes())
    throw std::invalid_argument("Trainer: train and test splits have different classes");
  if (options_.threads > 0) torch::set_num_threads(static_cast<int>(options_.threads));
  train_size_ = Limit(train_->size(), options_.train_samples);
  for (int64_t i = 0; i < Limit(test_->size(), options_.test_samples); ++i)
    test_indices_.push_back(i);
  class_names_ = train_->class_names();

  SeedTorch(static_cast<uint64_t>(options_.seed));
  learner_ = std::make_unique<Learner>(models::CreateModel(options_.model, train_->num_classes()),
                                       MakeLearnerOptions(options_, train_->num_classes()),
                                       torch::Device(torch::kCPU));
  if (options_.resume) {
    const std::string path = CheckpointPath(options_.checkpoint_dir);
    try {
      learner_->RestoreState(ReadCheckpointFile(path));
    } catch (const CheckpointError&) {
      throw;
    } catch (const std::exception& e) {
      throw CheckpointError("checkpoint " + path + " does not fit this run: " + e.what());
    }
    const TrainingProgress& p = learner_->progress();
    if (learner_->seed() != static_cast<uint64_t>(options_.seed)) {
      std::fprintf(out, "note: the checkpoint was trained with --seed=%llu; continuing with it\n",
                   static_cast<unsigned long long>(learner_->seed()));
    }
    std::fprintf(out, "resumed from %s at epoch %lld, position %lld, step %lld\n", path.c_str(),
                 static_cast<long long>(p.epoch + 1), static_cast<long long>(p.position),
                 static_cast<long long>(p.step));
  }
  sampler_ = std::make_unique<ElasticSampler>(train_size_, learner_->seed());

  LoaderOptions train_loader;
  train_loader.batch_size = options_.batch_size;
  train_loader.augment = options_.augment;
  train_loader.threads = static_cast<int>(options_.loader_threads);
  train_loader.seed = learner_->seed();
  train_loader_ = std::make_unique<Loader>(train_, train_loader);
  LoaderOptions test_loader = train_loader;
  test_loader.augment = false;
  test_loader.batch_size = std::max<int64_t>(options_.batch_size, 256);
  test_loader_ = std::make_unique<Loader>(test_, test_loader);
}

std::unique_ptr<Trainer> Trainer::FromOptions(const TrainOptions& options, std::FILE* out) {
  std::shared_ptr<const Dataset> train =
      LoadDataset(options.dataset, options.data_dir, Split::kTrain);
  std::shared_ptr<const Dataset> test =
      LoadDataset(options.dataset, options.data_dir, Split::kTest);
  return std::make_unique<Trainer>(options, std::move(train), std::move(test), out);
}

bool Trainer::TrainEpoch(double* loss_sum, int64_t* correct, int64_t* seen) {
  TrainingProgress& p = learner_->progress();
  const std::vector<int64_t> permutation = sampler_->Permutation(static_cast<uint64_t>(p.epoch));
  const int64_t batch = options_.batch_size;
  const int64_t steps_done = (p.position + batch - 1) / batch;
  const int64_t steps_in_epoch = steps_done + sampler_->StepsLeft(p.position, batch);
  reporter_.StartEpoch(p.epoch + 1, options_.epochs, steps_in_epoch);
  train_loader_->Start(std::vector<int64_t>(permutation.begin() + p.position, permutation.end()),
                       static_cast<uint64_t>(p.epoch));
  int64_t step_in_epoch = steps_done;
  while (true) {
    std::optional<Batch> next = train_loader_->Next();
    if (!next) return true;
    if (options_.max_steps > 0 && p.step >= options_.max_steps) return false;
    const int64_t size = next->images.size(0);
    const double epochs_done =
        static_cast<double>(p.epoch) +
        static_cast<double>(p.position + size) / static_cast<double>(train_size_);
    const StepStats stats = learner_->Step(next->images, next->labels, epochs_done);
    p.position += size;
    ++p.step;
    ++step_in_epoch;
    *loss_sum += stats.loss_sum;
    *correct += stats.correct;
    *seen += stats.count;
    reporter_.Step(step_in_epoch, p.step, *seen, *loss_sum / static_cast<double>(*seen),
                   static_cast<double>(*correct) / static_cast<double>(*seen), stats.lr);
  }
}

void Trainer::WriteCheckpoint() {
  if (options_.checkpoint_dir.empty()) return;
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
    const double train_seconds = reporter_.epoch_seconds();
    images += seen;
    train_seconds_total += train_seconds;
    if (seen == 0 && !finished) break;  // --max-steps was already reached

    result.last_eval =
        Evaluate(learner_->model(), *test_loader_, test_indices_,
                 static_cast<int64_t>(class_names_.size()), learner_->device(), options_.amp);
    EpochSummary summary;
    summary.epoch = p.epoch + 1;
    summary.epochs = options_.epochs;
    summary.train_loss = seen > 0 ? loss_sum / static_cast<double>(seen) : 0;
    summary.train_accuracy =
        seen > 0 ? static_cast<double>(correct) / static_cast<double>(seen) : 0;
    summary.test_loss = result.last_eval.loss();
    summary.test_accuracy = result.last_eval.accuracy();
    summary.images_per_second = train_seconds > 0 ? static_cast<double>(seen) / train_seconds : 0;
    summary.seconds = reporter_.epoch_seconds();
    summary.lr = learner_->schedule().LearningRate(static_cast<double>(p.epoch) +
                                                   static_cast<double>(p.position) /
                                                       static_cast<double>(train_size_));
    reporter_.EndEpoch(summary);

    if (finished) {
      result.early_stopped = learner_->EndEpoch(result.last_eval.loss());
      ++p.epoch;
      p.position = 0;
      ++result.epochs_completed;
    }
    const bool last = !finished || result.early_stopped || p.epoch >= options_.epochs;
    if (last || p.epoch % options_.checkpoint_every == 0) WriteCheckpoint();
    if (result.early_stopped) {
      reporter_.Note("early stopping: test loss has not improved for --patience epochs");
    }
    if (last) break;
  }
  result.steps = p.step;
  result.train_images_per_second =
      train_seconds_total > 0 ? static_cast<double>(images) / train_seconds_total : 0;
  return result;
}

}  // namespace elastic::trainer
