#include "trainer/training_loop.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "collectives/tensor_ops.h"
#include "trainer/accumulation.h"
#include "trainer/batch_norm_statistics.h"
#include "trainer/checkpoint.h"
#include "trainer/checksum.h"
#include "trainer/evaluate.h"
#include "trainer/model_export.h"

namespace elastic::trainer {

using collectives::Communicator;
using collectives::DataType;
using collectives::ReduceOp;

// This rank's part of the rest of an epoch: the epoch's permutation and a
// loader started on this rank's samples, one step's share per batch.
struct TrainingLoop::EpochRun {
  std::vector<int64_t> permutation;
  std::unique_ptr<Loader> loader;
  int64_t steps_in_epoch = 0;  // of the whole epoch, for the progress line
};

std::string BroadcastBytes(Communicator& comm, int root, const std::string* bytes, uint64_t limit) {
  int64_t size =
      comm.rank() == root ? (bytes != nullptr ? static_cast<int64_t>(bytes->size()) : -1) : 0;
  comm.Broadcast(&size, 1, DataType::kInt64, root);
  if (size < 0) {
    if (comm.rank() == root) return std::string();  // the caller reports its own error
    throw std::runtime_error("rank " + std::to_string(root) +
                             " failed to read the training state (see its error)");
  }
  // A size no state of this model can have is a corrupt or hostile root, not
  // a reason to allocate it. (The root checks its own too: it then fails
  // with the others instead of waiting for them in the next broadcast.)
  if (static_cast<uint64_t>(size) > limit) {
    throw std::runtime_error("rank " + std::to_string(root) + " announced a training state of " +
                             std::to_string(size) + " bytes; one of this model is at most " +
                             std::to_string(limit) +
                             " bytes (4 x this rank's own + 64 MiB): not allocating it");
  }
  // As int64 words: every backend moves those.
  std::vector<int64_t> words((static_cast<size_t>(size) + 7) / 8, 0);
  if (comm.rank() == root) std::memcpy(words.data(), bytes->data(), bytes->size());
  comm.Broadcast(words.data(), words.size(), DataType::kInt64, root);
  return std::string(reinterpret_cast<const char*>(words.data()), static_cast<size_t>(size));
}

TrainingLoop::TrainingLoop(const Task& task, const LoopConfig& config, Learner& learner,
                           LoopState& state, World& world)
    : task_(task),
      config_(config),
      learner_(learner),
      state_(state),
      world_(world),
      sampler_(config.limits.train_size, learner.seed()),
      // Each rank loads its share of a step as one batch and trains it in
      // micro-batches of at most --batch-size, so the update is that of one
      // batch of step_samples (accumulation.h).
      shape_(ShapeSteps(config.global_batch, config.batch_size, world.size(), world.rank())),
      last_eval_(task.objective->num_classes()) {
  if (world_.data() != nullptr)
    hook_ = std::make_unique<SummingGradientHook>(learner_.parameters(), *world_.data());
  if (!config_.trace_dir.empty())
    trace_ = std::make_unique<StateTrace>(config_.trace_dir, world_.rank());
}

TrainingLoop::~TrainingLoop() = default;

StatePoint TrainingLoop::Point() const {
  const TrainingProgress& p = learner_.progress();
  return {p.epoch, p.position, p.step};
}

bool TrainingLoop::Finished() const {
  return TrainingFinished(config_.limits, Point(), state_.stopped_early);
}

void TrainingLoop::Sync(int root, bool root_has_state) {
  const bool is_root = world_.rank() == root;
  if (Communicator* comm = world_.control()) {
    // Even a fresh model is sent: the ranks start from the root's bytes, not
    // from the hope that they seeded the same way.
    const std::string sealed = is_root && root_has_state ? state_.commit.Seal(world_.token()) : "";
    const std::string bytes =
        BroadcastBytes(*comm, root, root_has_state ? &sealed : nullptr, learner_.StateSizeLimit());
    if (!is_root)
      state_.commit = Commit::Open(world_.token(), bytes, "rank " + std::to_string(root));
  }
  if (is_root && !root_has_state)
    throw std::runtime_error("this rank holds no training state to send");
  learner_.RestoreState(state_.commit.learner);
  state_.holds_commit = true;
  state_.committed = Point();
  world_.OnSynced(Point(), CheckRanksAgree("start"));
}

uint64_t TrainingLoop::CheckRanksAgree(const char* when) {
  const uint64_t mine = ParameterChecksum(learner_.parameters());
  Communicator* comm = world_.control();
  if (comm == nullptr) return mine;
  std::vector<int64_t> all(static_cast<size_t>(comm->size()));
  const int64_t mine_signed = static_cast<int64_t>(mine);
  comm->Allgather(&mine_signed, all.data(), 1, DataType::kInt64);
  for (int r = 1; r < comm->size(); ++r) {
    if (all[static_cast<size_t>(r)] != all[0]) {
      throw std::runtime_error(std::string("parameters differ between ranks at ") + when +
                               ": rank " + std::to_string(r) + " is not rank 0's (checksum " +
                               std::to_string(all[static_cast<size_t>(r)]) + " against " +
                               std::to_string(all[0]) + ")");
    }
  }
  return mine;
}

TrainingLoop::End TrainingLoop::Run() {
  const TrainingProgress& p = learner_.progress();
  bool first_step = true;
  while (!Finished()) {
    if (EpochTrained(config_.limits, p.position)) {
      const Boundary boundary = EpochBoundary(shape_);
      if (boundary == Boundary::kStop) return End::kStopped;
      if (boundary == Boundary::kFinish) break;
      continue;
    }
    // Train the rest of the epoch (or up to the next stop).
    EpochRun run = StartEpochRun(shape_);
    int64_t steps_since_commit = 0;
    while (StepsRemain(config_.limits, Point())) {
      const std::vector<int64_t> indices =
          sampler_.StepIndices(run.permutation, p.position, shape_.rank, shape_.shares);
      const StepStats stats = TrainStep(run, shape_, indices);
      if (trace_) trace_->AfterStep(p.step, stats, learner_);
      // Before the commit, which may stop this world: the next one goes on
      // after this step and would not evaluate it.
      if (EvaluationDue(config_.limits, Point())) EvaluateInsideEpoch(shape_);
      bool stop = false;
      if (CommitDue(config_.limits, Point(), ++steps_since_commit)) {
        steps_since_commit = 0;
        stop = CommitPoint(CommitAt::kStep);
      }
      ReportProgress(run, shape_, stats.lr, first_step);
      first_step = false;
      if (stop) return End::kStopped;
      // The loader's batches ahead were cut for the old split.
      if (shares_changed_ && StepsRemain(config_.limits, Point())) StartLoader(run, shape_);
    }
  }
  // --max-steps ended the job inside an epoch, or at its last step: that
  // epoch is evaluated and summarised as --help promises, and ended if it was
  // trained (EpochBoundary ends nothing it did not train).
  if (!state_.stopped_early && p.position > 0) EpochBoundary(shape_);
  FinishTraining();
  return End::kFinished;
}

TrainingLoop::EpochRun TrainingLoop::StartEpochRun(const StepShape& shape) {
  const TrainingProgress& p = learner_.progress();
  EpochRun run;
  run.permutation = sampler_.Permutation(static_cast<uint64_t>(p.epoch));
  StartLoader(run, shape);
  run.steps_in_epoch = sampler_.StepsLeft(0, shape.step_samples);
  world_.OnEpochStart(p.epoch, run.steps_in_epoch);
  return run;
}

void TrainingLoop::StartLoader(EpochRun& run, const StepShape& shape) {
  const TrainingProgress& p = learner_.progress();
  LoaderOptions options;
  options.batch_size = std::max<int64_t>(1, shape.share);  // one step's share per batch
  options.augment = config_.augment;
  options.threads = static_cast<int>(std::max<int64_t>(1, config_.loader_threads));
  options.seed = learner_.seed();
  options.channels_last = config_.channels_last;
  run.loader = std::make_unique<Loader>(task_.train, options);
  run.loader->Start(RankSamples(sampler_, run.permutation, p.position, shape),
                    static_cast<uint64_t>(p.epoch));
  shares_changed_ = false;
}

StepStats TrainingLoop::TrainStep(EpochRun& run, const StepShape& shape,
                                  const std::vector<int64_t>& indices) {
  TrainingProgress& p = learner_.progress();
  const auto started = std::chrono::steady_clock::now();
  const int64_t step_total =
      std::min<int64_t>(shape.step_samples, config_.limits.train_size - p.position);
  world_.BeforeStep(Point(), indices);
  const std::vector<MicroBatch> micro = LoadStep(run, indices, step_total);
  const double epochs_done =
      static_cast<double>(p.epoch) +
      static_cast<double>(p.position + step_total) / static_cast<double>(config_.limits.train_size);
  const StepStats stats = learner_.Step(micro, epochs_done, hook_.get());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  // The rank's own work: the step less its wait for the others' gradients.
  const double waited = hook_ ? hook_->TakeWaitedSeconds() : 0.0;
  pace_.samples += static_cast<double>(indices.size());
  pace_.busy_seconds += std::max(0.0, seconds - waited);
  pace_.waited_seconds += waited;
  ++pace_.steps;
  world_.AfterStep(seconds);
  p.position = sampler_.NextPosition(p.position, shape.step_samples);
  ++p.step;
  pending_.step_samples += static_cast<double>(step_total);
  if (!indices.empty()) {
    pending_.loss += stats.loss_sum;
    pending_.metric += stats.metric_sum;
    pending_.seen += static_cast<double>(stats.count);
  }
  pending_.seconds += seconds;
  return stats;
}

std::vector<MicroBatch> TrainingLoop::LoadStep(EpochRun& run, const std::vector<int64_t>& indices,
                                               int64_t step_total) {
  if (indices.empty()) {
    // No share of this step (a short last step, or more ranks than
    // --global-batch): take part with a zero-weighted sample so that every
    // rank runs the same collectives.
    if (!filler_) {
      LoaderOptions filler;
      filler.batch_size = 1;
      filler.augment = false;
      filler.threads = 1;
      filler.channels_last = config_.channels_last;
      filler_ = std::make_unique<Loader>(task_.train, filler);
    }
    filler_->Start({run.permutation[0]}, static_cast<uint64_t>(learner_.progress().epoch));
    const std::optional<Batch> next = filler_->Next();
    if (!next) throw std::logic_error("the filler loader produced no batch");
    return {MicroBatch{next->inputs, next->targets, 0.0}};
  }
  const std::optional<Batch> next = run.loader->Next();
  if (!next) throw std::logic_error("the loader ran out of batches before the epoch ended");
  // The loader cuts batches of one full step's share: they must be exactly
  // this step's samples, or the sample accounting is wrong.
  if (next->indices != indices) throw std::logic_error("a loader batch is not this step's share");
  return SplitIntoMicroBatches(next->inputs, next->targets, config_.batch_size, step_total);
}

bool TrainingLoop::CommitPoint(CommitAt at) {
  // Five sums and, to plan the shares, each rank's pace in three slots of its
  // own (the others' zeros): one allreduce carries both.
  const bool balance = config_.balance && world_.size() > 1;
  std::vector<double> control = {pending_.loss, pending_.metric, pending_.seen, pending_.seconds,
                                 0};
  if (world_.rank() == 0 && world_.StopRequested(at)) control[4] = 1;
  if (balance) {
    const size_t mine = 5 + 3 * static_cast<size_t>(world_.rank());
    control.resize(5 + 3 * static_cast<size_t>(world_.size()), 0.0);
    control[mine] = pace_.samples;
    control[mine + 1] = pace_.busy_seconds;
    control[mine + 2] = pace_.waited_seconds;
  }
  if (Communicator* comm = world_.control())
    comm->Allreduce(control.data(), control.size(), DataType::kFloat64, ReduceOp::kSum);
  Commit& commit = state_.commit;
  commit.loss_sum += control[0];
  commit.metric_sum += control[1];
  commit.seen += control[2];
  // Seconds are summed over ranks that ran in lock step: their mean is the wall time.
  commit.train_seconds += control[3] / world_.size();
  pending_ = Pending();
  // A fixed world keeps only the boundaries' states (its checkpoints).
  const bool keep = world_.keeps_commits() || at != CommitAt::kStep;
  if (keep) {
    commit.learner = learner_.CaptureState();
    state_.holds_commit = true;
    state_.committed = Point();
  }
  const bool stop = control[4] > 0;
  world_.OnCommit({Point(), stop, keep, &commit});
  // A split planned where this world ends would never be trained.
  if (balance && !stop && at != CommitAt::kLastBoundary) ReplanShares(control.data() + 5);
  return stop;
}

void TrainingLoop::ReplanShares(const double* gathered) {
  std::vector<RankPace> paces(static_cast<size_t>(shape_.world));
  // The gradient sum alone: the least any rank waited for it (the last one
  // to finish its backward pass waits only for the transfer).
  double allreduce_seconds = gathered[2];
  for (size_t r = 0; r < paces.size(); ++r) {
    paces[r] = {gathered[3 * r], gathered[3 * r + 1]};
    allreduce_seconds = std::min(allreduce_seconds, gathered[3 * r + 2]);
  }
  if (!PacesCoverWindow(paces, config_.share_rule)) return;  // measured over more steps
  if (pace_.steps > 0) allreduce_seconds /= static_cast<double>(pace_.steps);
  pace_ = Pace();
  // Every rank plans from the same numbers, so all agree on the split.
  const std::vector<int64_t> planned =
      PlanShares(shape_.shares, paces, shape_.step_samples, config_.share_rule);
  const bool changed = planned != shape_.shares &&
                       PlanConfirmed(shape_.shares, planned, unconfirmed_plan_, config_.share_rule);
  unconfirmed_plan_ = planned != shape_.shares && !changed ? planned : std::vector<int64_t>();
  if (changed) {
    shape_ = WithShares(shape_, planned);
    shares_changed_ = true;
  }
  if (world_.rank() == 0) ReportShares(paces, changed);
  LetGoIfTooSlow(paces, allreduce_seconds);
}

void TrainingLoop::ReportShares(const std::vector<RankPace>& paces, bool changed) {
  ShareReport report;
  report.at = Point();
  report.changed = changed;
  report.step_samples = shape_.step_samples;
  report.shares = shape_.shares;
  for (const RankPace& pace : paces) report.speeds.push_back(pace.speed());
  report.slowdowns = Slowdowns(paces);
  world_.OnShares(report);
}

void TrainingLoop::LetGoIfTooSlow(const std::vector<RankPace>& paces, double allreduce_seconds) {
  if (config_.let_go.below <= 0) return;
  const int slow =
      RankToLetGo({paces, allreduce_seconds}, shape_.step_samples, config_.let_go, slow_streak_);
  if (slow < 0) return;
  char why[160];
  std::snprintf(why, sizeof(why),
                "%.1fx slower than the median for %d plans, and a step of %d workers without it "
                "is faster",
                Slowdowns(paces)[static_cast<size_t>(slow)], config_.let_go.commits,
                shape_.world - 1);
  world_.OnLetGo(slow, why);
}

void TrainingLoop::ReportProgress(const EpochRun& run, const StepShape& shape, double lr,
                                  bool first) {
  const TrainingProgress& p = learner_.progress();
  const Commit& commit = state_.commit;
  // Only commits sum every rank's loss and metric; since the last one, this
  // rank's own steps stand for all ranks' so that the live line moves with
  // every step. The sample count is exact: all ranks step in lock step.
  const double samples = commit.seen + pending_.step_samples;
  const double seen = samples > 0 ? samples : 1;
  const double scale = pending_.seen > 0 ? pending_.step_samples / pending_.seen : 0;
  StepReport report;
  report.at = Point();
  report.steps_in_epoch = run.steps_in_epoch;
  report.step_in_epoch = (p.position + shape.step_samples - 1) / shape.step_samples;
  report.first = first;
  report.step_samples = shape.step_samples;
  report.seen = samples;
  report.loss = (commit.loss_sum + scale * pending_.loss) / seen;
  report.metric = (commit.metric_sum + scale * pending_.metric) / seen;
  report.lr = lr;
  report.world = shape.world;
  world_.OnProgress(report);
}

TrainingLoop::Boundary TrainingLoop::EpochBoundary(const StepShape& shape) {
  TrainingProgress& p = learner_.progress();
  const auto eval_start = std::chrono::steady_clock::now();
  last_eval_ = EvaluateShard();
  if (trace_) trace_->AfterEvaluation(p.epoch + 1, last_eval_);
  state_.last_metric = last_eval_.metric();
  const double eval_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - eval_start).count();
  const Commit& commit = state_.commit;
  if (world_.rank() == 0) {
    const double seen = commit.seen > 0 ? commit.seen : 1;
    EpochSummary summary;
    summary.epoch = p.epoch + 1;
    summary.epochs = config_.limits.epochs;
    summary.world = shape.world;
    summary.train_loss = commit.loss_sum / seen;
    summary.train_accuracy = commit.metric_sum / seen;
    summary.test_loss = last_eval_.loss();
    summary.test_accuracy = last_eval_.metric();
    summary.images_per_second = commit.train_seconds > 0 ? commit.seen / commit.train_seconds : 0;
    summary.seconds = commit.train_seconds + eval_seconds;
    summary.lr = learner_.schedule().LearningRate(
        static_cast<double>(p.epoch) +
            static_cast<double>(p.position) / static_cast<double>(config_.limits.train_size),
        p.step);
    summary.arithmetic = config_.arithmetic;
    world_.OnEpochEnd(summary);
  }
  // Run crosses a boundary only once the epoch is trained; an epoch that is
  // not would be evaluated but neither ended nor committed.
  if (!EpochTrained(config_.limits, p.position)) return Boundary::kFinish;
  state_.stopped_early = learner_.EndEpoch(last_eval_.loss());
  ++p.epoch;
  p.position = 0;
  state_.commit.loss_sum = state_.commit.metric_sum = state_.commit.seen =
      state_.commit.train_seconds = 0;
  const bool last = TrainingFinished(config_.limits, Point(), state_.stopped_early);
  const bool stop = CommitPoint(last ? CommitAt::kLastBoundary : CommitAt::kEpochBoundary);
  const EpochEnd end = PlanEpochEnd(config_.limits, Point(), state_.stopped_early, stop);
  if (world_.rank() == 0 && end.checkpoint) WriteCheckpoint(state_.commit.learner, Point());
  if (end.leave) return Boundary::kStop;
  return end.finish ? Boundary::kFinish : Boundary::kNextEpoch;
}

void TrainingLoop::EvaluateInsideEpoch(const StepShape& shape) {
  const TrainingProgress& p = learner_.progress();
  const auto start = std::chrono::steady_clock::now();
  const EvalResult result = EvaluateShard();
  if (world_.rank() != 0) return;
  EvaluationSummary summary;
  summary.step = p.step;
  summary.epoch = p.epoch + 1;
  summary.epoch_fraction =
      static_cast<double>(p.position) / static_cast<double>(config_.limits.train_size);
  summary.world = shape.world;
  summary.test_loss = result.loss();
  summary.test_accuracy = result.metric();
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  world_.OnEvaluation(summary);
}

EvalResult TrainingLoop::EvaluateShard() {
  // Evaluate rank 0's model: batch-norm statistics are per rank, parameters are not.
  if (Communicator* data = world_.data()) {
    for (const torch::Tensor& buffer : learner_.model().buffers()) {
      torch::Tensor b = buffer.contiguous();
      collectives::Broadcast(*data, b, 0);
      if (!b.is_same(buffer)) buffer.copy_(b);
    }
  }
  if (config_.recompute_bn > 0) RecomputeBatchNorm();
  std::vector<int64_t> shard;
  for (int64_t i = world_.rank(); i < config_.test_size; i += world_.size()) shard.push_back(i);
  const Objective& objective = *task_.objective;
  EvalResult result(objective.num_classes());
  if (!shard.empty()) {
    Loader loader(task_.test, UnaugmentedLoaderOptions());
    result =
        Evaluate(learner_.model(), loader, shard, objective, learner_.device(), config_.precision);
  }
  Communicator* comm = world_.control();
  if (comm == nullptr) return result;
  // Sums add up exactly (EvalResult holds no ratios).
  std::vector<double> sums = result.ToSums();
  comm->Allreduce(sums.data(), sums.size(), DataType::kFloat64, ReduceOp::kSum);
  return EvalResult::FromSums(sums, objective.num_classes());
}

LoaderOptions TrainingLoop::UnaugmentedLoaderOptions() const {
  LoaderOptions options;
  // Training-sized batches: at 256 images, ResNet-8's activations fell out of
  // cache and evaluating 1,017 images took 1.8 s instead of 0.2-0.3 s.
  options.batch_size = config_.batch_size;
  options.augment = false;
  options.threads = static_cast<int>(std::max<int64_t>(1, config_.loader_threads));
  options.seed = learner_.seed();
  options.channels_last = config_.channels_last;
  return options;
}

void TrainingLoop::RecomputeBatchNorm() {
  // The first --recompute-bn images of this epoch's permutation (a uniform
  // sample: a data set in file order can be sorted by class, as an image
  // folder is), unaugmented, dealt round the ranks.
  const std::vector<int64_t> order =
      sampler_.Permutation(static_cast<uint64_t>(learner_.progress().epoch));
  const int64_t samples = std::min<int64_t>(config_.recompute_bn, order.size());
  std::vector<int64_t> shard;
  for (int64_t i = world_.rank(); i < samples; i += world_.size()) shard.push_back(order[i]);
  Loader loader(task_.train, UnaugmentedLoaderOptions());
  RecomputeBatchNormStatistics(learner_.model(), loader, shard, learner_.device(),
                               config_.precision, world_.data());
}

void TrainingLoop::FinishTraining() {
  world_.OnRanksAgreeAtEnd(CheckRanksAgree("end"));
  if (world_.rank() == 0) {
    // The boundary that ended training committed the state already.
    const bool committed = state_.holds_commit && state_.committed == Point();
    WriteCheckpoint(committed ? state_.commit.learner : learner_.CaptureState(), Point());
    world_.OnFinished(Point(), state_.last_metric, state_.stopped_early);
  }
  // The others leave once rank 0 has written the checkpoint and reported the
  // end: a rank gone before that looks to an elastic job's controller like a
  // member leaving a job that still trains, and it re-formed a generation of
  // the rest for nothing.
  if (Communicator* comm = world_.control()) comm->Barrier();
}

void TrainingLoop::WriteCheckpoint(const std::string& learner_bytes, const StatePoint& at) {
  if (config_.checkpoint_dir.empty()) return;
  world_.OnCheckpoint(at, WriteCheckpointWithModel(task_, learner_bytes, config_.checkpoint_dir));
}

}  // namespace elastic::trainer
