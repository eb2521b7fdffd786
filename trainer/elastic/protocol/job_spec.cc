#include "trainer/elastic/protocol/job_spec.h"

#include <map>
#include <set>

#include "trainer/elastic/protocol/control_messages.h"
#include "trainer/flags.h"

namespace elastic::trainer {
namespace {

// Every TrainOptions field with its TrainSpec name: text fields, then values.
// job_spec_test gives every training flag a value other than its default and
// checks that it comes back, so a field missing here fails there.
// clang-format off
#define ELASTIC_TRAIN_TEXT(X) \
  X(model, Model) \
  X(model_file, ModelFile) \
  X(dataset, Dataset) \
  X(data_dir, DataDir) \
  X(image_index, ImageIndex) \
  X(image_index_dir, ImageIndexDir) \
  X(normalize, Normalize) \
  X(optimizer, Optimizer) \
  X(schedule, Schedule) \
  X(precision, Precision) \
  X(memory_format, MemoryFormat) \
  X(checkpoint_dir, CheckpointDir) \
  X(trace_dir, TraceDir) \
  X(device, Device)

#define ELASTIC_TRAIN_VALUE(X) \
  X(list_models, ListModels) \
  X(image_size, ImageSize) \
  X(context, Context) \
  X(train_samples, TrainSamples) \
  X(test_samples, TestSamples) \
  X(epochs, Epochs) \
  X(max_steps, MaxSteps) \
  X(eval_every, EvalEvery) \
  X(batch_size, BatchSize) \
  X(lr, Lr) \
  X(momentum, Momentum) \
  X(nesterov, Nesterov) \
  X(weight_decay, WeightDecay) \
  X(adam_beta1, AdamBeta1) \
  X(adam_beta2, AdamBeta2) \
  X(lookahead, Lookahead) \
  X(lookahead_k, LookaheadK) \
  X(lookahead_alpha, LookaheadAlpha) \
  X(warmup_epochs, WarmupEpochs) \
  X(warmup_steps, WarmupSteps) \
  X(recompute_bn, RecomputeBn) \
  X(step_size, StepSize) \
  X(gamma, Gamma) \
  X(plateau_patience, PlateauPatience) \
  X(plateau_factor, PlateauFactor) \
  X(min_lr, MinLr) \
  X(decay_steps, DecaySteps) \
  X(patience, Patience) \
  X(label_smoothing, LabelSmoothing) \
  X(clip_grad, ClipGrad) \
  X(augment, Augment) \
  X(balance, Balance) \
  X(seed, Seed) \
  X(checkpoint_every, CheckpointEvery) \
  X(resume, Resume) \
  X(threads, Threads) \
  X(loader_threads, LoaderThreads) \
  X(log_every, LogEvery)

#define ELASTIC_ELASTIC_TEXT(X) \
  X(admit_at, AdmitAt) \
  X(log_samples, LogSamples)

#define ELASTIC_ELASTIC_VALUE(X) \
  X(min_workers, MinWorkers) \
  X(max_workers, MaxWorkers) \
  X(commit_every, CommitEvery) \
  X(join_window, JoinWindow) \
  X(drain_timeout, DrainTimeout) \
  X(rendezvous_timeout, RendezvousTimeout) \
  X(heartbeat_timeout, HeartbeatTimeout) \
  X(reconnect_timeout, ReconnectTimeout) \
  X(global_batch, GlobalBatch) \
  X(per_worker_batch, PerWorkerBatch) \
  X(state_copy_every, StateCopyEvery) \
  X(step_timeout, StepTimeout) \
  X(blacklist_after, BlacklistAfter) \
  X(blacklist_seconds, BlacklistSeconds) \
  X(let_go_below, LetGoBelow)
// clang-format on

#define ELASTIC_SET_TEXT(field, Name) spec.set##Name(options.field.c_str());
#define ELASTIC_SET_VALUE(field, Name) spec.set##Name(options.field);
#define ELASTIC_GET_TEXT(field, Name) options.field = spec.get##Name().cStr();
#define ELASTIC_GET_VALUE(field, Name) options.field = spec.get##Name();

// Flags whose change means another job, not the same job on other settings.
const std::set<std::string>& FlagsOfAnotherJob() {
  static const std::set<std::string> flags = {"model", "model-file", "dataset"};
  return flags;
}

}  // namespace

void WriteTrainSpec(const TrainOptions& options, proto::TrainSpec::Builder spec){
    ELASTIC_TRAIN_TEXT(ELASTIC_SET_TEXT) ELASTIC_TRAIN_VALUE(ELASTIC_SET_VALUE)}

TrainOptions ReadTrainSpec(proto::TrainSpec::Reader spec) {
  TrainOptions options;
  ELASTIC_TRAIN_TEXT(ELASTIC_GET_TEXT)
  ELASTIC_TRAIN_VALUE(ELASTIC_GET_VALUE)
  return options;
}

void WriteElasticSpec(const ElasticOptions& options, proto::ElasticSpec::Builder spec) {
  ELASTIC_ELASTIC_TEXT(ELASTIC_SET_TEXT)
  ELASTIC_ELASTIC_VALUE(ELASTIC_SET_VALUE)
}

void ReadElasticSpec(proto::ElasticSpec::Reader spec, ElasticOptions* elastic) {
  ElasticOptions& options = *elastic;
  ELASTIC_ELASTIC_TEXT(ELASTIC_GET_TEXT)
  ELASTIC_ELASTIC_VALUE(ELASTIC_GET_VALUE)
}

void TakeElasticScope(const ElasticOptions& from, ElasticOptions* to) {
#define ELASTIC_COPY(field, Name) to->field = from.field;
  ELASTIC_ELASTIC_TEXT(ELASTIC_COPY)
  ELASTIC_ELASTIC_VALUE(ELASTIC_COPY)
#undef ELASTIC_COPY
}

std::string EncodeJobSpec(const std::string& job_id, const JobSettings& job) {
  return EncodeMessage<proto::JobSpec>([&](proto::JobSpec::Builder spec) {
    spec.setJobId(job_id);
    WriteTrainSpec(job.train, spec.initTrain());
    WriteElasticSpec(job.elastic, spec.initElastic());
  });
}

JobSettings SettingsFromFlags(const std::vector<std::string>& flags) {
  JobSettings job;
  FlagSet set("cifar", "");
  RegisterTrainFlags(set, job.train);
  RegisterElasticFlags(set, job.elastic);
  std::vector<const char*> argv = {"cifar"};
  for (const std::string& flag : flags) argv.push_back(flag.c_str());
  set.Parse(static_cast<int>(argv.size()), argv.data());
  return job;
}

std::vector<FlagChange> ChangesToJob(const JobSettings& job, const JobSettings& command_line,
                                     const std::vector<std::string>& given) {
  JobSettings job_copy = job;
  JobSettings line_copy = command_line;
  FlagSet job_flags("cifar", "");
  RegisterTrainFlags(job_flags, job_copy.train);
  RegisterElasticFlags(job_flags, job_copy.elastic);
  FlagSet line_flags("cifar", "");
  RegisterTrainFlags(line_flags, line_copy.train);
  RegisterElasticFlags(line_flags, line_copy.elastic);
  std::map<std::string, std::string> before = job_flags.Values(FlagScope::kTraining);
  std::map<std::string, std::string> after = line_flags.Values(FlagScope::kTraining);
  before.merge(job_flags.Values(FlagScope::kElastic));
  after.merge(line_flags.Values(FlagScope::kElastic));
  std::vector<FlagChange> changes;
  std::set<std::string> seen;
  for (const std::string& name : given) {
    // Process-scope flags are in neither map: this process's own, never a change.
    const auto job_value = before.find(name);
    if (job_value == before.end() || !seen.insert(name).second) continue;
    const std::string& given_value = after.at(name);
    if (job_value->second != given_value) {
      changes.push_back(FlagChange{name, job_value->second, given_value});
    }
  }
  return changes;
}

std::string RefusalOfChanges(const std::vector<FlagChange>& changes, const std::string& state_dir) {
  for (const FlagChange& change : changes) {
    if (FlagsOfAnotherJob().count(change.name) == 0) continue;
    return "--" + change.name + "=" + change.given_value + " is not the job's (--" + change.name +
           "=" + change.job_value + ") in --state-dir " + state_dir +
           ": a job taken over keeps what it trains; start a new job with another --state-dir, "
           "or drop the flag to take this one over";
  }
  return "";
}

}  // namespace elastic::trainer
