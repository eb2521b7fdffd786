// elastic::Main: the flags, then one of the ways a program runs (api/elastic.h).
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "api/elastic.h"
#include "api/fixed_run_events.h"
#include "collectives/mpi_communicator.h"
#include "runtime/preforked_workers.h"
#include "trainer/allocator.h"
#include "trainer/checkpoint.h"
#include "trainer/compute_threads.h"
#include "trainer/elastic/controller/journal.h"
#include "trainer/elastic/controller/run_events.h"
#include "trainer/elastic/elastic.h"
#include "trainer/elastic/elastic_options.h"
#include "trainer/flags.h"
#include "trainer/model_export.h"
#include "trainer/mpi_mode.h"
#include "trainer/trainer.h"
#include "trainer/training_loop.h"

namespace elastic {
namespace {

using trainer::FlagError;
using trainer::FlagSet;

int ListModels() {
  std::printf("%-18s %14s  %-14s %s\n", "model", "parameters", "memory format", "architecture");
  for (const models::ModelInfo& info : models::AvailableModels()) {
    const int64_t count = models::CountParameters(*models::CreateModel(info.name, 10));
    std::printf("%-18s %14lld  %-14s %s\n", info.name.c_str(), static_cast<long long>(count),
                models::PrefersChannelsLast(info.name) ? "channels-last" : "contiguous",
                info.paper.c_str());
  }
  std::printf(
      "(parameter counts for 10 classes; memory format: what --memory-format=auto picks, "
      "measured per model)\n");
  return 0;
}

void PrintDone(const trainer::TrainResult& result, const trainer::Task& task,
               const std::string& checkpoint_dir) {
  // "test accuracy 91.20%", "test mean abs error 0.0312".
  const trainer::MetricLabel label = trainer::MetricLabelOf(task);
  std::printf("done: %lld epochs, %lld steps, test %s, %.0f train %s/s%s\n",
              static_cast<long long>(result.epochs_completed), static_cast<long long>(result.steps),
              label.FormatLong(result.last_eval.metric()).c_str(),
              label.Rate(result.train_images_per_second), label.unit.c_str(),
              result.early_stopped ? " (early stop)" : "");
  std::printf("%s\n",
              trainer::TrainedModelNote(checkpoint_dir, task.model_file != nullptr).c_str());
  if (result.last_eval.count == 0 || result.last_eval.class_count.empty()) return;
  std::printf("test accuracy by class:");
  for (size_t c = 0; c < task.class_names.size() && c < result.last_eval.class_count.size(); ++c)
    std::printf(" %s %.1f%%", task.class_names[c].c_str(), 100 * result.last_eval.ClassAccuracy(c));
  std::printf("\n");
}

// The event log of a run in a fixed world (api/fixed_run_events.h): rank 0's
// --run-dir (else DefaultRunDirectory()), the same file on every rank of
// `world` (null: one process). Rank 0 says where. A --run-dir that cannot be
// written is an error; the default is not worth stopping for: a warning, and
// the run goes on without a log (as a full disk later would).
class FixedRunLog {
 public:
  FixedRunLog(const std::string& run_dir, collectives::Communicator* world,
              const std::string& program) {
    std::string dir = run_dir.empty() ? trainer::DefaultRunDirectory() : run_dir;
    // A default named by the clock could differ between the ranks by a second.
    if (world != nullptr) dir = trainer::BroadcastBytes(*world, 0, &dir, 1 << 16);
    const bool says = world == nullptr || world->rank() == 0;
    try {
      log_ = std::make_unique<trainer::EventLog>(
          (std::filesystem::path(dir) / trainer::kEventsFile).string(),
          [program](const std::string& line) {
            std::fprintf(stderr, "%s: %s\n", program.c_str(), line.c_str());
          });
    } catch (const std::exception& e) {
      if (!run_dir.empty()) throw;
      std::fprintf(stderr, "%s: warning: no event log: %s\n", program.c_str(), e.what());
      return;
    }
    if (says) std::printf("events in %s\n", log_->path().c_str());
  }

  // Rank 0: the job started, with the task's metric; then `events()` is told the rest.
  void Start(const TrainOptions& options, const trainer::Task& task, int world) {
    if (log_ == nullptr) return;
    events_ = std::make_unique<FixedRunEvents>(*log_, trainer::MetricLabelOf(task));
    events_->Start(trainer::NewJobId(), options, world);
  }
  // Every other rank: only its `params`.
  void StartRank(const trainer::Task& task) {
    if (log_ == nullptr) return;
    events_ = std::make_unique<FixedRunEvents>(*log_, trainer::MetricLabelOf(task));
  }
  FixedRunEvents* events() { return events_.get(); }
  // Rank 0, once it started: the `end` event.
  void End(int exit_code, const std::string& reason) {
    if (events_ != nullptr) events_->End(exit_code, reason);
  }

 private:
  std::unique_ptr<trainer::EventLog> log_;
  std::unique_ptr<FixedRunEvents> events_;
};

// The task of a fixed run, checked as far as the event log's `start` needs it
// (Trainer checks the rest).
trainer::Task MakeTask(const TrainOptions& options, const Program& program) {
  trainer::Task task = program.make_task(options);
  if (!task.objective) task.Check();  // throws, naming what is missing
  return task;
}

constexpr char kDoneReason[] = "the job is done";

// One rank of the fixed-size job mpirun started: the same loop as a
// single-process run, over MPI_COMM_WORLD.
int RunMpiRank(TrainOptions options, const trainer::ElasticOptions& elastic_options,
               const Program& program) {
  std::unique_ptr<collectives::Communicator> world;
  std::unique_ptr<FixedRunLog> log;
  try {
    collectives::MpiCommunicatorFactory factory;
    world = factory.Create(collectives::MpiCommunicatorFactory::WorldMembership());
    if (options.threads == 0) options.threads = trainer::MpiThreadsPerRank();
    log = std::make_unique<FixedRunLog>(elastic_options.run_dir, world.get(), program.name);
    if (world->rank() == 0) {
      trainer::CheckNoCheckpointToReplace(options.checkpoint_dir, options.resume);
      std::printf("mpirun: %d ranks, %lld images per rank and step, lr %g x %d\n", world->size(),
                  static_cast<long long>(options.batch_size), options.lr, world->size());
    }
    trainer::Task task = MakeTask(options, program);
    if (world->rank() == 0) {
      log->Start(options, task, world->size());
    } else {
      log->StartRank(task);
    }
    trainer::Trainer run(options, std::move(task), stdout, world.get(), log->events());
    const trainer::TrainResult result = run.Run();
    if (world->rank() == 0) {
      PrintDone(result, run.task(), options.checkpoint_dir);
      log->End(trainer::kExitOk, kDoneReason);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error (MPI rank %d of %d): %s\n", program.name.c_str(),
                 world ? world->rank() : -1, world ? world->size() : 0, e.what());
    if (log != nullptr && world->rank() == 0) log->End(trainer::kExitError, e.what());
    // Leave MPI without MPI_Finalize, which would wait for ranks that may be
    // blocked in a collective with this one: mpirun sees the failed rank and
    // ends the others at once.
    if (world) world->Abort();
    return 1;
  }
  return 0;
}

// The elastic processes' view of the program. A driver with local workers
// builds the task once here: a bad --data-dir is one error, not one per
// worker, a download happens once, and an image folder is indexed once (the
// task's pinned index pins every worker and joiner to it).
int RunElasticJob(const trainer::ElasticOptions& elastic_options, const TrainOptions& options,
                  const std::vector<std::string>& given, const Program& program) {
  trainer::JobProgram job;
  job.name = program.name;
  job.title = program.title ? program.title(options) : program.name;
  job.make_task = program.make_task;
  job.defaults = program.defaults;
  job.metric = options.dataset == "tokens" ? trainer::LanguageModelLabel(options.context)
                                           : program.controller_metric;
  const bool driver_with_workers = elastic_options.role != "worker" &&
                                   elastic_options.join.empty() && !elastic_options.controller_only;
  TrainOptions job_options = options;
  if (driver_with_workers) {
    try {
      const trainer::Task task = program.make_task(options);
      task.Check();
      job.metric = trainer::MetricLabelOf(task);
      // What the task learnt once (an image folder's index) travels with the
      // job's settings to every worker and joiner.
      if (!task.pinned_index.empty()) job_options.image_index = task.pinned_index;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: error: %s\n", program.name.c_str(), e.what());
      return trainer::kExitError;
    }
  }
  // A --join agent forks its workers now, while it still has one thread: they
  // start from this process's image instead of loading the binary again
  // (runtime/preforked_workers.h), which is most of a joiner's start.
  std::unique_ptr<runtime::PreforkedWorkers> preforked;
  if (!elastic_options.join.empty() && elastic_options.role != "worker") {
    trainer::StopBlasThreadsUntilNextUse();  // OpenBLAS's pool is this process's other thread
    preforked = std::make_unique<runtime::PreforkedWorkers>(
        static_cast<uint32_t>(elastic_options.workers),
        [&program](const std::vector<std::string>& worker_args) {
          std::vector<std::string> copy = worker_args;
          std::vector<char*> argv;
          for (std::string& arg : copy) argv.push_back(arg.data());
          argv.push_back(nullptr);
          return Main(static_cast<int>(copy.size()), argv.data(), program);
        });
    job.preforked_workers = preforked.get();
  }
  return trainer::RunElastic(elastic_options, job_options, given, job);
}

}  // namespace

int Main(int argc, char** argv, const Program& program) {
  trainer::KeepFreedMemoryForReuse();
  TrainOptions options = program.defaults;
  trainer::ElasticOptions elastic_options;
  FlagSet flags(program.name, program.summary);
  trainer::RegisterTrainFlags(flags, options);
  trainer::RegisterElasticFlags(flags, elastic_options);
  try {
    if (!program.make_task) throw FlagError("the program has no task (Program::make_task)");
    flags.Parse(argc, argv);
    if (flags.help_requested()) {
      std::fputs(flags.Help().c_str(), stdout);
      return 0;
    }
    std::vector<std::string> models;
    if (program.model_from_registry) {
      for (const auto& info : models::AvailableModels()) models.push_back(info.name);
    }
    // A worker and a joining node train with the job's flags, which the
    // controller sends them (and the driver checked): their own command line
    // holds none (a --data-dir the program needs by default included).
    const bool job_flags_from_controller =
        elastic_options.role == "worker" || !elastic_options.join.empty();
    if (!job_flags_from_controller) trainer::ValidateTrainOptions(options, models);
    if (trainer::StartedByMpirun()) {
      trainer::ValidateMpiRun(flags, trainer::ProcessFlagsOfEveryMode());
    }
    trainer::ValidateElasticOptions(elastic_options, options);
    // The workers would compute here: refuse what they would get wrong now.
    if (!elastic_options.controller_only && !options.list_models) {
      trainer::CheckArithmetic(options);
    }
  } catch (const FlagError& e) {
    std::fprintf(stderr, "%s: %s\n", program.name.c_str(), e.what());
    return 2;
  }
  if (options.list_models) return ListModels();
  if (trainer::StartedByMpirun()) return RunMpiRank(options, elastic_options, program);
  if (trainer::IsElasticRun(elastic_options)) {
    return RunElasticJob(elastic_options, options, flags.given(), program);
  }
  std::unique_ptr<FixedRunLog> log;
  try {
    log = std::make_unique<FixedRunLog>(elastic_options.run_dir, nullptr, program.name);
    trainer::CheckNoCheckpointToReplace(options.checkpoint_dir, options.resume);
    trainer::Task task = MakeTask(options, program);
    log->Start(options, task, 1);
    trainer::Trainer run(options, std::move(task), stdout, nullptr, log->events());
    PrintDone(run.Run(), run.task(), options.checkpoint_dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program.name.c_str(), e.what());
    if (log != nullptr) log->End(trainer::kExitError, e.what());
    return trainer::kExitError;
  }
  log->End(trainer::kExitOk, kDoneReason);
  return trainer::kExitOk;
}

}  // namespace elastic
