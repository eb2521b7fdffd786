// One worker of an elastic job: the loop of docs/elastic.md.
//
//   wait for the controller's next generation that contains me -> build the
//   communicator of that generation -> restore the state its source holds ->
//   train until the epoch ends, the controller asks to stop, or a collective
//   fails -> (on failure) report the fault and wait for the next generation.
//
// Everything between this worker and the controller is a typed message
// (control.capnp): the controller tells this process's trainer actor
// (TrainerInbox) and the worker tells the controller actor.
#include <signal.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "collectives/gloo_communicator.h"
#include "collectives/nccl_communicator.h"
#include "collectives/tensor_ops.h"
#include "models/registry.h"
#include "runtime/actor.h"
#include "runtime/head_client.h"
#include "runtime/kv_store.h"
#include "trainer/checkpoint.h"
#include "trainer/checksum.h"
#include "trainer/data/dataset.h"
#include "trainer/data/loader.h"
#include "trainer/device.h"
#include "trainer/elastic/accumulation.h"
#include "trainer/elastic/commit_state.h"
#include "trainer/elastic/control_messages.h"
#include "trainer/elastic/elastic.h"
#include "trainer/elastic/epoch_plan.h"
#include "trainer/elastic/job_keys.h"
#include "trainer/elastic/metered_communicator.h"
#include "trainer/elastic/sampler.h"
#include "trainer/elastic/source_address.h"
#include "trainer/elastic/trainer_inbox.h"
#include "trainer/elastic/worker_stats.h"
#include "trainer/evaluate.h"
#include "trainer/learner.h"
#include "trainer/trainer.h"

namespace elastic::trainer {
namespace {

using collectives::CollectiveError;
using collectives::Communicator;
using collectives::DataType;
using collectives::ReduceOp;
using runtime::GenerationKey;
using runtime::MembershipView;

std::atomic<bool> g_terminate_requested{false};
void OnTerminate(int) { g_terminate_requested.store(true); }

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A failure that no new generation can fix (the job's state is inconsistent).
class FatalError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The controller lives in the head's process and listens on the head's
// address: it is reached at the host this worker reaches the head at, not
// the address it registered (127.0.0.1 for a head on 0.0.0.0, a container's
// own address behind a NAT or a Kubernetes Service).
runtime::Endpoint ControllerEndpoint(runtime::Endpoint registered,
                                     const runtime::WorkerEnvironment& env) {
  registered.host = env.head_host;
  return registered;
}

void MakeDirectories(const std::string& dir) {
  for (size_t slash = 1; slash != std::string::npos;) {
    slash = dir.find('/', slash + 1);
    const std::string prefix = dir.substr(0, slash);
    if (prefix.empty()) continue;
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST)
      throw std::runtime_error("cannot create directory " + prefix + ": " + std::strerror(errno));
  }
}

int64_t Limit(int64_t size, int64_t limit) { return limit > 0 ? std::min(size, limit) : size; }

// Wedges this worker's step at a given step, for the test of the step
// watchdog: ELASTIC_TEST_WEDGE_STEP="<worker index on its node>:<step>".
int64_t WedgeStepFromEnvironment(uint32_t worker_index) {
  const char* value = std::getenv("ELASTIC_TEST_WEDGE_STEP");
  if (value == nullptr) return -1;
  unsigned index = 0;
  long long step = -1;
  if (std::sscanf(value, "%u:%lld", &index, &step) != 2) {
    throw std::runtime_error("ELASTIC_TEST_WEDGE_STEP: expected <worker index>:<step>, got '" +
                             std::string(value) + "'");
  }
  return index == worker_index ? static_cast<int64_t>(step) : -1;
}

// Ends the process when a step makes no progress for --step-timeout: a worker
// whose training thread is stuck (a wedged kernel, a deadlock) would otherwise
// keep heartbeating from its other threads and hold the job. Collectives wait
// at most the communicator's timeout (below the step timeout), so a worker
// waiting for a stuck peer leaves its step with an error before this fires.
class StepWatchdog {
 public:
  explicit StepWatchdog(std::chrono::milliseconds timeout)
      : timeout_(timeout), thread_([this] { Watch(); }) {}
  ~StepWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  void Arm() {
    std::lock_guard<std::mutex> lock(mutex_);
    armed_since_ = std::chrono::steady_clock::now();
  }
  void Disarm() {
    std::lock_guard<std::mutex> lock(mutex_);
    armed_since_.reset();
  }

 private:
  void Watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
      wake_.wait_for(lock, std::chrono::milliseconds(100));
      if (armed_since_ && std::chrono::steady_clock::now() - *armed_since_ > timeout_) {
        std::fprintf(stderr,
                     "[worker pid %d] error: a step made no progress for %.1f s (--step-timeout): "
                     "this worker is hung and leaves the job so that the others go on\n",
                     static_cast<int>(::getpid()), std::chrono::duration<double>(timeout_).count());
        std::fflush(stderr);
        ::_exit(kExitError);
      }
    }
  }

  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::optional<std::chrono::steady_clock::time_point> armed_since_;
  bool stopping_ = false;
  std::thread thread_;
};

class Worker {
 public:
  // Owns the connection to the head, so that no membership callback can run
  // once the Worker is being destroyed.
  Worker(std::unique_ptr<runtime::HeadClient> head, std::unique_ptr<runtime::ActorSystem> actors,
         runtime::Endpoint controller, TrainOptions train, ElasticOptions elastic,
         std::string job_id, runtime::WorkerEnvironment env)
      : train_(std::move(train)),
        elastic_(std::move(elastic)),
        job_id_(std::move(job_id)),
        env_(std::move(env)),
        node_id_(env_.node_id),
        worker_index_(env_.worker_index),
        watchdog_(std::chrono::milliseconds(static_cast<int64_t>(elastic_.step_timeout * 1000))),
        client_(std::move(head)),
        actors_(std::move(actors)),
        controller_(actors_->Remote(kControllerActor, controller)) {}
  ~Worker() {
    actors_.reset();
    client_.reset();
  }

  int Run();

 private:
  enum class Outcome { kChange, kFailed, kDone, kStopped };

  void OnUpdate(const runtime::MembershipUpdate& update);
  // Subscribes to the head's views, registers (under the member id it had, if
  // any) and tells the controller what commit it holds.
  void Join();
  // The head's connection closed: the generation cannot go on (its commits and
  // orders need the controller), so its collectives are aborted.
  void OnHeadLost(const std::string& reason);
  // Waits up to the agent's head_reconnect_timeout for the head (a restarted
  // controller) to answer again, then Join()s keeping the commit it holds.
  // Throws FatalError when none comes back or it runs another job.
  void Reconnect();
  // Aborts the communicators of generations older than `generation`.
  void AbortOlderThan(uint64_t generation);
  // The next generation to train in, or nullopt when this worker should exit.
  std::optional<GenerationOrder> WaitForGeneration();
  Outcome RunGeneration(const GenerationOrder& order);
  // A stop generation whose rank 0 holds the state the job stops at: rank 0
  // writes the checkpoint from its own commit and nobody needs a collective
  // (a rendezvous that fails under load would lose the checkpoint).
  Outcome StopAtOwnCommit(const GenerationOrder& order, int rank);
  // Rank 0 takes the state its source holds as its commit; false (after
  // telling the controller) when it cannot.
  bool LoadSource(const GenerationOrder& order, int rank);
  bool EveryRankHasItsOwnGpu(Communicator& comm);
  void Sync(Communicator& comm, int rank, int root);
  // Trains from the learner's (epoch, position) to the next stop; see RunGeneration.
  Outcome Train(Communicator& comm, int world, int rank);

  // This rank's part of the rest of an epoch: the epoch's permutation and a
  // loader started on this rank's samples, one step's share per batch.
  struct EpochRun {
    std::vector<int64_t> permutation;
    std::unique_ptr<Loader> loader;
    int64_t steps_in_epoch = 0;  // of the whole epoch, for the progress line
  };
  EpochRun StartEpochRun(const StepShape& shape);
  // One optimizer step on `indices`, this rank's share of the step at the
  // learner's position: advances the position and step, adds to pending_ and
  // records the step time. Returns the learner's numbers for the step.
  StepStats TrainStep(EpochRun& run, const StepShape& shape, const std::vector<int64_t>& indices,
                      SummingGradientHook& hook);
  // The micro-batches of a step: this rank's share from the loader, or one
  // zero-weighted sample when it has none.
  std::vector<MicroBatch> LoadStep(EpochRun& run, const std::vector<int64_t>& indices,
                                   int64_t step_total);
  // Rank 0 after a step: the first step's wall time, then the progress line.
  void ReportStep(bool first_step, int64_t steps_in_epoch, const StepShape& shape, double lr);
  enum class Boundary { kNextEpoch, kChange, kFinish };
  // An epoch is trained: evaluates, ends the epoch (scheduler, early stop),
  // commits at the boundary and writes the checkpoint that is due. kChange
  // when the commit asked everyone to stop for a membership change.
  Boundary EpochBoundary(Communicator& comm, const StepShape& shape);
  // Rank 0 once training is over: the final checkpoint and the final numbers.
  void FinishJob();

  // Allreduces the control vector at a commit point and takes the commit.
  // Returns true when rank 0 asked everyone to stop for a membership change.
  bool CommitPoint(Communicator& comm, int rank, CommitAt at);
  EvalResult EvaluateShard(Communicator& comm, int rank, int world);
  // The epoch's summary to the controller (rank 0, after the evaluation).
  void ReportEpoch(const EvalResult& eval, int world, double eval_seconds);
  void WriteCheckpoint(const std::string& learner_bytes);  // at the learner's point
  void WriteCheckpoint(const std::string& learner_bytes, const StatePoint& point);
  void ReportDrainingOnce();
  // Rank 0: tells the controller the learner's progress and the last commit.
  void ReportProgress();
  void ReportFault(const std::string& reason, bool state_unavailable);
  void SendStats(bool always);
  void Log(const char* format, ...) __attribute__((format(printf, 2, 3)));

  // Sends a message of type T, filled by fill, to the controller.
  template <typename T, typename Fill>
  void Tell(Fill fill) {
    try {
      controller_.Tell(kControlCall, EncodeControl<T>(fill));
    } catch (const std::exception& e) {
      Log("could not reach the controller (%s): %s", ControlMember<T>::kName, e.what());
    }
  }

  bool Finished() const { return TrainingFinished(limits_, Point(), stopped_early_); }
  StatePoint Point() const {
    const TrainingProgress& p = learner_->progress();
    return {p.epoch, p.position, p.step};
  }

  // What ReportProgress needs besides the learner and the commit, as of the last step.
  struct ProgressShape {
    int64_t steps_in_epoch = 0;
    int world = 1;
    int64_t step_samples = 1;
    double lr = 0;
  };
  ProgressShape progress_shape_;

  TrainOptions train_;
  ElasticOptions elastic_;
  const std::string job_id_;  // the controller's: a controller of another job is not ours
  const runtime::WorkerEnvironment env_;
  uint64_t node_id_;
  uint32_t worker_index_;  // on its node: picks the GPU with --device=cuda
  uint64_t member_id_ = 0;
  torch::Device device_{torch::kCPU};
  Arithmetic arithmetic_;       // precision and memory format, chosen once per process
  int64_t wedge_at_step_ = -1;  // ELASTIC_TEST_WEDGE_STEP
  StepWatchdog watchdog_;

  std::shared_ptr<const Dataset> train_set_;
  std::shared_ptr<const Dataset> test_set_;
  int64_t train_size_ = 0;
  int64_t test_size_ = 0;
  TrainingLimits limits_;  // the flags that bound training (epoch_plan.h)
  std::unique_ptr<ElasticSampler> sampler_;
  std::unique_ptr<Loader> filler_;  // one-sample batches for a rank with no share of a step

  std::unique_ptr<Learner> learner_;
  Commit commit_;
  bool holds_commit_ = false;  // commit_ is the job's state (not only the fresh model)
  StatePoint committed_;       // where commit_ stands, once holds_commit_
  int64_t commits_since_copy_ = 0;
  bool said_copy_too_large_ = false;
  // What a CommitReport adds to the state it carries, with room to spare.
  static constexpr size_t kCopyFrameOverhead = size_t{64} << 10;
  // The commit sealed for the controller's copy; empty (said once) when one frame cannot
  // carry it.
  std::string SealedCopy();
  void ReportSynced(const GenerationOrder& order);
  double last_accuracy_ = 0;
  bool stopped_early_ = false;
  // Sums of the steps since the last commit point.
  struct Pending {
    double loss = 0, correct = 0, seen = 0, seconds = 0;  // this rank's
    double step_samples = 0;                              // all ranks' samples
  };
  Pending pending_;
  std::FILE* sample_log_ = nullptr;

  std::mutex mutex_;
  uint64_t newest_generation_ = 0;     // guarded by mutex_: newest seen anywhere
  runtime::MembershipView latest_;     // guarded by mutex_: the head's newest view
  Communicator* live_comm_ = nullptr;  // guarded by mutex_: aborted on a newer generation
  // The generation's data plane: gradients and model buffers. On CUDA an NCCL
  // communicator over device memory, beside the Gloo one that carries the
  // control values and state bytes in host memory; on the CPU the Gloo one.
  Communicator* grad_comm_ = nullptr;  // guarded by mutex_ like live_comm_
  uint64_t last_generation_ = 0;
  // Set when a generation's rendezvous failed: the time to stop waiting for a
  // generation that would retry it, and why it failed.
  std::optional<std::chrono::steady_clock::time_point> give_up_at_;
  std::string rendezvous_error_;
  std::string head_lost_reason_;  // guarded by mutex_
  bool drain_reported_ = false;
  // For the driver's metrics (worker_stats.h): allreduces and step times.
  WorkerStats stats_;
  WorkerStatsPublisher stats_publisher_{stats_};
  uint64_t generation_ = 0;
  int world_ = 0;
  // Where peers reach this worker's collectives: the address it reaches the
  // head from, so workers on other machines (of the head's network) connect.
  std::string collectives_host_;

  // Last: destroyed (in ~Worker, explicitly) before everything their callbacks touch.
  // client_ is replaced (on the training thread, between generations) when
  // the head is lost and comes back.
  std::unique_ptr<runtime::HeadClient> client_;
  std::unique_ptr<runtime::ActorSystem> actors_;
  runtime::ActorRef controller_;
  std::shared_ptr<TrainerInbox> inbox_;
};

void Worker::Log(const char* format, ...) {
  char text[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(text, sizeof(text), format, args);
  va_end(args);
  std::fprintf(stderr, "[worker %llu pid %d] %s\n", static_cast<unsigned long long>(member_id_),
               static_cast<int>(::getpid()), text);
  std::fflush(stderr);
}

void Worker::OnUpdate(const runtime::MembershipUpdate& update) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (update.view.generation <= latest_.generation) return;
    latest_ = update.view;
  }
  // The head's view changes before the controller's order arrives (a failure
  // needs no decision): whoever is blocked in an old collective must not wait
  // for a peer that is gone.
  AbortOlderThan(update.view.generation);
}

void Worker::Join() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    latest_ = runtime::MembershipView();  // a restarted head numbers its own views
  }
  client_->Subscribe([this](const runtime::MembershipUpdate& update) { OnUpdate(update); });
  char hostname[256] = "localhost";
  ::gethostname(hostname, sizeof(hostname) - 1);
  member_id_ = client_->RegisterMember(std::string("worker@") + hostname, node_id_,
                                       actors_->endpoint(), member_id_);
  stats_publisher_.SetMemberId(member_id_);
  client_->OnDisconnect([this](const std::string& reason) { OnHeadLost(reason); });
  Tell<proto::Hello>([&](proto::Hello::Builder m) {
    m.setMemberId(member_id_);
    m.setHoldsCommit(holds_commit_);
    if (holds_commit_) ToProto(committed_, m.initCommit());
  });
}

void Worker::OnHeadLost(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  head_lost_reason_ = reason;
  if (live_comm_ != nullptr) live_comm_->Abort();
  if (grad_comm_ != nullptr) grad_comm_->Abort();
}

void Worker::Reconnect() {
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    reason = head_lost_reason_;
  }
  const auto timeout = env_.head_reconnect_timeout;
  Log("lost the head at %s:%u (%s); holding %s, reconnecting for up to %lld ms",
      env_.head_host.c_str(), static_cast<unsigned>(env_.head_port), reason.c_str(),
      holds_commit_ ? ("the commit at " + ToString(committed_)).c_str() : "no commit",
      static_cast<long long>(timeout.count()));
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + timeout;
  std::string last_error = reason;
  while (std::chrono::steady_clock::now() < deadline) {
    try {
      auto client = std::make_unique<runtime::HeadClient>(
          env_.ClientOptions("worker-" + std::to_string(worker_index_)));
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      // A restarted driver registers its controller right after its head listens.
      const runtime::Endpoint endpoint = ControllerEndpoint(
          client->LookupActor(kControllerActor, std::max(left, std::chrono::milliseconds(1))),
          env_);
      runtime::ActorRef controller = actors_->Remote(kControllerActor, endpoint);
      MessageBytes bytes(
          controller.Ask(kControlCall, SpecRequest(), std::chrono::seconds(30)).get(), "job spec");
      const std::string job = bytes.Get<proto::JobSpec>().getJobId().cStr();
      if (job != job_id_) {
        throw FatalError(
            "the head at " + env_.head_host + ":" + std::to_string(env_.head_port) +
            " came back with another job (" + job + ", this worker's is " + job_id_ +
            "): its driver was restarted without this job's --state-dir. This worker's " +
            (holds_commit_ ? "commit at " + ToString(committed_) : std::string("state")) +
            " is not carried into another job; it exits");
      }
      client_ = std::move(client);
      controller_ = controller;
      Join();
      Log("reconnected to the head after %.1f s; member %llu of job %s",
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
          static_cast<unsigned long long>(member_id_), job_id_.c_str());
      return;
    } catch (const FatalError&) {
      throw;
    } catch (const std::exception& e) {
      last_error = e.what();
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
  }
  throw FatalError("lost the connection to the head and it did not come back within " +
                   std::to_string(timeout.count()) +
                   " ms (the node agent's head_reconnect_timeout)" +
                   "; last attempt: " + last_error);
}

void Worker::AbortOlderThan(uint64_t generation) {
  std::lock_guard<std::mutex> lock(mutex_);
  newest_generation_ = std::max(newest_generation_, generation);
  if (live_comm_ != nullptr && live_comm_->generation() < generation) live_comm_->Abort();
  if (grad_comm_ != nullptr && grad_comm_->generation() < generation) grad_comm_->Abort();
}

void Worker::ReportProgress() {
  const TrainingProgress& p = learner_->progress();
  const ProgressShape& shape = progress_shape_;
  const int64_t per_step = shape.step_samples;
  // Only commits sum every rank's loss and accuracy; since the last one, rank
  // 0's own steps stand for all ranks' so that the live line moves with every
  // step. The image count is exact: all ranks step in lock step.
  const double images = commit_.seen + pending_.step_samples;
  const double seen = images > 0 ? images : 1;
  const double scale = pending_.seen > 0 ? pending_.step_samples / pending_.seen : 0;
  Tell<proto::Progress>([&](proto::Progress::Builder m) {
    m.setGeneration(generation_);
    m.setEpoch(p.epoch);
    m.setStep(p.step);
    m.setStepsInEpoch(shape.steps_in_epoch);
    m.setStepInEpoch((p.position + per_step - 1) / per_step);
    m.setSeen(images);
    m.setLoss((commit_.loss_sum + scale * pending_.loss) / seen);
    m.setAccuracy((commit_.correct + scale * pending_.correct) / seen);
    m.setLr(shape.lr);
    m.setWorld(shape.world);
  });
}

void Worker::ReportDrainingOnce() {
  if (drain_reported_ || !g_terminate_requested.load()) return;
  drain_reported_ = true;
  Log("SIGTERM: leaving at the next epoch boundary (or commit after --drain-timeout)");
  Tell<proto::Draining>([&](proto::Draining::Builder m) { m.setMemberId(member_id_); });
}

void Worker::ReportFault(const std::string& reason, bool state_unavailable) {
  Tell<proto::Fault>([&](proto::Fault::Builder m) {
    m.setGeneration(generation_);
    m.setMemberId(member_id_);
    m.setReason(reason);
    m.setStateUnavailable(state_unavailable);
  });
}

void Worker::SendStats(bool always) {
  const WorkerStatsPublisher::Sink send = [this](const WorkerStatsRecord& record) {
    Tell<proto::WorkerStats>(
        [&](proto::WorkerStats::Builder m) { ToProto(member_id_, record, m); });
  };
  if (always) {
    stats_publisher_.Publish(send);
  } else {
    stats_publisher_.PublishIfDue(send);
  }
}

std::optional<GenerationOrder> Worker::WaitForGeneration() {
  while (true) {
    ReportDrainingOnce();
    if (const std::optional<std::string> over = inbox_->Over()) {
      Log("the job is over: %s", over->c_str());
      return std::nullopt;
    }
    const std::optional<GenerationOrder> order =
        inbox_->Next(last_generation_, std::chrono::milliseconds(200));
    if (order) {
      last_generation_ = order->generation;
      give_up_at_.reset();
      if (order->RankOf(member_id_) >= 0) return order;
      if (drain_reported_) return std::nullopt;  // left the job
      continue;                                  // not admitted (yet)
    }
    // Without its head this worker can neither be told nor rendezvous.
    if (!client_->connected()) Reconnect();
    bool in_view = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      in_view = latest_.RankOf(member_id_) >= 0;
    }
    // A draining worker that is in no view has nothing to finish.
    if (drain_reported_ && !in_view) return std::nullopt;
    if (give_up_at_ && std::chrono::steady_clock::now() > *give_up_at_) {
      throw FatalError("could not connect to the other workers of generation " +
                       std::to_string(last_generation_) + " (" + rendezvous_error_ +
                       ") and no membership change followed within --rendezvous-timeout: can "
                       "the workers' machines reach each other? (docs/operations.md, Addresses)");
    }
  }
}

bool Worker::EveryRankHasItsOwnGpu(Communicator& comm) {
  // NCCL refuses two ranks on one GPU; ranks that share one reduce their
  // gradients through host memory over Gloo instead. Every rank sees the same
  // gathered list, so all of them choose the same data plane.
  char hostname[256] = "localhost";
  ::gethostname(hostname, sizeof(hostname) - 1);
  const uint64_t host = std::hash<std::string>{}(hostname);
  const int64_t mine = static_cast<int64_t>((host << 8) ^ static_cast<uint64_t>(device_.index()));
  std::vector<int64_t> all(static_cast<size_t>(comm.size()));
  comm.Allgather(&mine, all.data(), 1, DataType::kInt64);
  std::sort(all.begin(), all.end());
  const bool own = std::adjacent_find(all.begin(), all.end()) == all.end();
  if (!own && comm.rank() == 0) {
    Log("generation %llu: ranks share a GPU, so gradients go through host memory over Gloo "
        "(NCCL allows one rank per GPU)",
        static_cast<unsigned long long>(generation_));
  }
  return own;
}

void Worker::Sync(Communicator& comm, int rank, int root) {
  // The root's commit is the job's state: everyone restores it.
  std::string bytes = rank == root ? commit_.Seal(env_.token) : std::string();
  int64_t size = static_cast<int64_t>(bytes.size());
  comm.Broadcast(&size, 1, DataType::kInt64, root);
  // A size no commit of this model can have is a corrupt or hostile root, not
  // a reason to allocate it. (The root checks its own too: it then fails
  // with the others instead of waiting for them in the next broadcast.)
  const uint64_t limit = learner_->StateSizeLimit();
  if (size < 0 || static_cast<uint64_t>(size) > limit) {
    throw FatalError("rank " + std::to_string(root) + " announced a state of " +
                     std::to_string(size) + " bytes in generation " + std::to_string(generation_) +
                     "; a state of model " + train_.model + " is at most " + std::to_string(limit) +
                     " bytes (4 x this rank's own + 64 MiB): not allocating it");
  }
  const size_t words = (static_cast<size_t>(size) + 7) / 8;
  std::vector<int64_t> buffer(words, 0);
  if (rank == root) std::memcpy(buffer.data(), bytes.data(), bytes.size());
  comm.Broadcast(buffer.data(), words, DataType::kInt64, root);
  bytes.assign(reinterpret_cast<const char*>(buffer.data()), static_cast<size_t>(size));
  commit_ = Commit::Open(env_.token, bytes, "rank " + std::to_string(root));
  learner_->RestoreState(commit_.learner);
  holds_commit_ = true;
  committed_ = Point();

  const uint64_t mine = ParameterChecksum(learner_->parameters());
  std::vector<int64_t> all(static_cast<size_t>(comm.size()));
  const int64_t mine_signed = static_cast<int64_t>(mine);
  comm.Allgather(&mine_signed, all.data(), 1, DataType::kInt64);
  const TrainingProgress& p = learner_->progress();
  Log("params generation=%llu rank=%d world=%d checksum=%016llx epoch=%lld position=%lld "
      "step=%lld",
      static_cast<unsigned long long>(generation_), rank, comm.size(),
      static_cast<unsigned long long>(mine), static_cast<long long>(p.epoch),
      static_cast<long long>(p.position), static_cast<long long>(p.step));
  for (int r = 0; r < comm.size(); ++r) {
    if (all[static_cast<size_t>(r)] != all[0]) {
      throw FatalError("parameter checksum mismatch after sync: rank " + std::to_string(r) +
                       " differs from rank 0 in generation " + std::to_string(generation_));
    }
  }
  if (sample_log_ != nullptr) {
    std::fprintf(sample_log_, "G %llu %lld %lld %d %d\n",
                 static_cast<unsigned long long>(generation_), static_cast<long long>(p.epoch),
                 static_cast<long long>(p.position), rank, comm.size());
    std::fflush(sample_log_);
  }
}

bool Worker::CommitPoint(Communicator& comm, int rank, CommitAt at) {
  double control[5] = {pending_.loss, pending_.correct, pending_.seen, pending_.seconds, 0};
  if (rank == 0 && StopsHere(inbox_->Request(generation_), at)) control[4] = 1;
  comm.Allreduce(control, 5, DataType::kFloat64, ReduceOp::kSum);
  commit_.loss_sum += control[0];
  commit_.correct += control[1];
  commit_.seen += control[2];
  // Seconds are summed over ranks that ran in lock step: their mean is the wall time.
  commit_.train_seconds += control[3] / comm.size();
  pending_ = Pending();
  commit_.learner = learner_->CaptureState();
  holds_commit_ = true;
  committed_ = Point();
  SendStats(false);
  const bool stop = control[4] > 0;
  // Every rank reports a stop, once out of the collective: the controller
  // publishes the next view (which aborts this generation's communicator)
  // only when nobody is still inside it.
  if (rank == 0 || stop) {
    // The controller keeps a copy every --state-copy-every commits: with it,
    // losing every worker at once costs at most the steps since that commit.
    // A stop commit always carries one: when every worker leaves, the copy is
    // what the job goes on from.
    const bool copy = rank == 0 && elastic_.state_copy_every > 0 &&
                      (++commits_since_copy_ >= elastic_.state_copy_every || stop);
    if (copy) commits_since_copy_ = 0;
    const std::string state = copy ? SealedCopy() : std::string();
    Tell<proto::CommitReport>([&](proto::CommitReport::Builder m) {
      m.setGeneration(generation_);
      ToProto(Point(), m.initPoint());
      if (!state.empty()) m.setState(runtime::AsData(state));
      m.setStoppedOnRequest(stop);
      m.setMemberId(member_id_);
    });
  }
  return stop;
}

void Worker::ReportSynced(const GenerationOrder& order) {
  // The state came from a member and the controller's copy is older: without
  // this copy a controller restarted before the next one would train the
  // steps in between again.
  const bool send = order.send_copy && elastic_.state_copy_every > 0 && holds_commit_;
  const std::string state = send ? SealedCopy() : std::string();
  Tell<proto::Synced>([&](proto::Synced::Builder m) {
    m.setGeneration(generation_);
    ToProto(Point(), m.initPoint());
    m.setChecksum(ParameterChecksum(learner_->parameters()));
    if (!state.empty()) m.setState(runtime::AsData(state));
  });
}

std::string Worker::SealedCopy() {
  std::string state = commit_.Seal(env_.token);
  // One frame carries the copy, and the head refuses (and disconnects) a
  // frame over its limit: rank 0 would be taken for dead.
  const size_t limit = env_.transport.max_frame_bytes - kCopyFrameOverhead;
  if (state.size() <= limit) return state;
  if (!said_copy_too_large_) {
    said_copy_too_large_ = true;
    Log("warning: the job's state is %zu bytes, over the %zu one control-plane frame can take: "
        "the controller keeps no copy, so losing every worker at once falls back to the newest "
        "checkpoint (--checkpoint-dir)",
        state.size(), limit);
  }
  return std::string();
}

EvalResult Worker::EvaluateShard(Communicator& comm, int rank, int world) {
  // Evaluate rank 0's model: batch-norm statistics are per rank, parameters are not.
  for (const torch::Tensor& buffer : learner_->model().buffers()) {
    torch::Tensor b = buffer.contiguous();
    collectives::Broadcast(*grad_comm_, b, 0);
    if (!b.is_same(buffer)) buffer.copy_(b);
  }
  std::vector<int64_t> shard;
  for (int64_t i = rank; i < test_size_; i += world) shard.push_back(i);
  const int64_t classes = train_set_->num_classes();
  EvalResult result(classes);
  if (!shard.empty()) {
    LoaderOptions options;
    // Training-sized batches: at 256 images, ResNet-8's activations fell out of
    // cache and evaluating 1,017 images took 1.8 s instead of 0.2-0.3 s.
    options.batch_size = train_.batch_size;
    options.augment = false;
    options.threads = static_cast<int>(std::max<int64_t>(1, train_.loader_threads));
    options.seed = learner_->seed();
    options.channels_last = arithmetic_.channels_last;
    Loader loader(test_set_, options);
    result = Evaluate(learner_->model(), loader, shard, classes, learner_->device(),
                      arithmetic_.precision);
  }
  double sums[3] = {result.loss_sum, static_cast<double>(result.correct),
                    static_cast<double>(result.count)};
  comm.Allreduce(sums, 3, DataType::kFloat64, ReduceOp::kSum);
  EvalResult total(classes);
  total.loss_sum = sums[0];
  total.correct = static_cast<int64_t>(sums[1]);
  total.count = static_cast<int64_t>(sums[2]);
  return total;
}

void Worker::WriteCheckpoint(const std::string& learner_bytes) {
  WriteCheckpoint(learner_bytes, Point());
}

void Worker::WriteCheckpoint(const std::string& learner_bytes, const StatePoint& point) {
  if (train_.checkpoint_dir.empty()) return;
  MakeDirectories(train_.checkpoint_dir);
  const std::string path = CheckpointPath(train_.checkpoint_dir);
  WriteCheckpointFile(path, learner_bytes);
  Log("checkpoint written to %s", path.c_str());
  Tell<proto::CheckpointWritten>([&](proto::CheckpointWritten::Builder m) {
    ToProto(point, m.initPoint());
    m.setPath(path);
  });
}

void Worker::ReportEpoch(const EvalResult& eval, int world, double eval_seconds) {
  const TrainingProgress& p = learner_->progress();
  const double seen = commit_.seen > 0 ? commit_.seen : 1;
  last_accuracy_ = eval.accuracy();
  Tell<proto::EpochSummary>([&](proto::EpochSummary::Builder m) {
    m.setEpoch(p.epoch + 1);
    m.setEpochs(train_.epochs);
    m.setWorld(world);
    m.setTrainLoss(commit_.loss_sum / seen);
    m.setTrainAccuracy(commit_.correct / seen);
    m.setTestLoss(eval.loss());
    m.setTestAccuracy(eval.accuracy());
    m.setImagesPerSecond(commit_.train_seconds > 0 ? commit_.seen / commit_.train_seconds : 0);
    m.setSeconds(commit_.train_seconds + eval_seconds);
    m.setArithmetic(arithmetic_.Summary());
  });
}

Worker::Outcome Worker::Train(Communicator& comm, int world, int rank) {
  // Each rank loads its share of a step as one batch and trains it in
  // micro-batches of at most --batch-size, so the update is that of one batch
  // of step_samples (accumulation.h).
  const StepShape shape = ShapeSteps(elastic_.global_batch, train_.batch_size, world, rank);
  if (rank == 0 && shape.step_samples < world) {
    Log("world %d is larger than --global-batch=%lld: ranks %lld..%d take no samples and join "
        "each step with zero weight",
        world, static_cast<long long>(shape.step_samples),
        static_cast<long long>(shape.step_samples), world - 1);
  }
  SummingGradientHook hook(learner_->parameters(), *grad_comm_);
  const TrainingProgress& p = learner_->progress();
  bool first_step = true;
  while (!Finished()) {
    if (EpochTrained(limits_, p.position)) {
      const Boundary boundary = EpochBoundary(comm, shape);
      if (boundary == Boundary::kChange) return Outcome::kChange;
      if (boundary == Boundary::kFinish) break;
      continue;
    }
    // Train the rest of the epoch (or up to the next stop).
    EpochRun run = StartEpochRun(shape);
    int64_t steps_since_commit = 0;
    while (StepsRemain(limits_, Point())) {
      if (g_terminate_requested.load()) ReportDrainingOnce();
      const std::vector<int64_t> indices =
          sampler_->StepIndices(run.permutation, p.position, rank, world, shape.step_samples);
      const StepStats stats = TrainStep(run, shape, indices, hook);
      if (rank == 0) ReportStep(first_step, run.steps_in_epoch, shape, stats.lr);
      first_step = false;
      if (CommitDue(limits_, Point(), ++steps_since_commit)) {
        steps_since_commit = 0;
        if (CommitPoint(comm, rank, CommitAt::kStep)) return Outcome::kChange;
      }
    }
  }
  // --max-steps ended the job inside an epoch: that epoch is evaluated and
  // summarised as --help promises (EpochBoundary ends nothing it did not train).
  if (!stopped_early_ && p.position > 0 && !EpochTrained(limits_, p.position))
    EpochBoundary(comm, shape);
  if (rank == 0) FinishJob();
  return Outcome::kDone;
}

Worker::EpochRun Worker::StartEpochRun(const StepShape& shape) {
  const TrainingProgress& p = learner_->progress();
  EpochRun run;
  run.permutation = sampler_->Permutation(static_cast<uint64_t>(p.epoch));
  LoaderOptions options;
  options.batch_size = std::max<int64_t>(1, shape.share);  // one step's share per batch
  options.augment = train_.augment;
  options.threads = static_cast<int>(std::max<int64_t>(1, train_.loader_threads));
  options.seed = learner_->seed();
  options.channels_last = arithmetic_.channels_last;
  run.loader = std::make_unique<Loader>(train_set_, options);
  run.loader->Start(RankSamples(*sampler_, run.permutation, p.position, shape),
                    static_cast<uint64_t>(p.epoch));
  run.steps_in_epoch = sampler_->StepsLeft(0, shape.step_samples);
  return run;
}

StepStats Worker::TrainStep(EpochRun& run, const StepShape& shape,
                            const std::vector<int64_t>& indices, SummingGradientHook& hook) {
  TrainingProgress& p = learner_->progress();
  const auto started = std::chrono::steady_clock::now();
  const int64_t step_total = std::min<int64_t>(shape.step_samples, train_size_ - p.position);
  // Written when the step starts: a later generation that restarts at or
  // before this position rolls the step back (docs/elastic.md).
  if (sample_log_ != nullptr) {
    std::fprintf(sample_log_, "S %llu %lld %lld", static_cast<unsigned long long>(generation_),
                 static_cast<long long>(p.epoch), static_cast<long long>(p.position));
    for (int64_t i : indices) std::fprintf(sample_log_, " %lld", static_cast<long long>(i));
    std::fputc('\n', sample_log_);
    std::fflush(sample_log_);
  }
  const std::vector<MicroBatch> micro = LoadStep(run, indices, step_total);
  const double epochs_done =
      static_cast<double>(p.epoch) +
      static_cast<double>(p.position + step_total) / static_cast<double>(train_size_);
  watchdog_.Arm();
  if (p.step == wedge_at_step_) {
    Log("test fault (ELASTIC_TEST_WEDGE_STEP): wedging the training thread at step %lld",
        static_cast<long long>(p.step));
    while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  const StepStats stats = learner_->Step(micro, epochs_done, &hook);
  watchdog_.Disarm();
  p.position = sampler_->NextPosition(p.position, shape.step_samples);
  ++p.step;
  pending_.step_samples += static_cast<double>(step_total);
  if (!indices.empty()) {
    pending_.loss += stats.loss_sum;
    pending_.correct += static_cast<double>(stats.correct);
    pending_.seen += static_cast<double>(stats.count);
  }
  const double step_seconds = SecondsSince(started);
  pending_.seconds += step_seconds;
  stats_.ObserveStep(generation_, shape.rank, step_seconds);
  return stats;
}

std::vector<MicroBatch> Worker::LoadStep(EpochRun& run, const std::vector<int64_t>& indices,
                                         int64_t step_total) {
  if (indices.empty()) {
    // No share of this step (a short last step, or more ranks than
    // --global-batch): take part with a zero-weighted sample so that every
    // rank runs the same collectives.
    filler_->Start({run.permutation[0]}, static_cast<uint64_t>(learner_->progress().epoch));
    const std::optional<Batch> next = filler_->Next();
    if (!next) throw FatalError("the filler loader produced no batch");
    return {MicroBatch{next->images, next->labels, 0.0}};
  }
  const std::optional<Batch> next = run.loader->Next();
  if (!next) throw FatalError("the loader ran out of batches before the epoch ended");
  // The loader cuts batches of one full step's share: they must be exactly
  // this step's samples, or the sample accounting is wrong.
  if (next->indices != indices) throw FatalError("a loader batch is not this step's share");
  return SplitIntoMicroBatches(next->images, next->labels, train_.batch_size, step_total);
}

void Worker::ReportStep(bool first_step, int64_t steps_in_epoch, const StepShape& shape,
                        double lr) {
  if (first_step) {
    Tell<proto::FirstStep>([&](proto::FirstStep::Builder m) {
      m.setGeneration(generation_);
      m.setWallSeconds(Now());
    });
  }
  progress_shape_ = {steps_in_epoch, shape.world, shape.step_samples, lr};
  // The step before a boundary is reported by the boundary, with the numbers
  // of the commit that counts it: reporting it here too printed it twice.
  if (StepsRemain(limits_, Point())) ReportProgress();
}

Worker::Boundary Worker::EpochBoundary(Communicator& comm, const StepShape& shape) {
  TrainingProgress& p = learner_->progress();
  // The last commit counted the epoch's final steps: report them too.
  if (shape.rank == 0) ReportProgress();
  const auto eval_start = std::chrono::steady_clock::now();
  const EvalResult eval = EvaluateShard(comm, shape.rank, shape.world);
  const double eval_seconds = SecondsSince(eval_start);
  if (shape.rank == 0) ReportEpoch(eval, shape.world, eval_seconds);
  // Train crosses a boundary only once the epoch is trained; an epoch that is
  // not would be evaluated but neither ended nor committed.
  if (!EpochTrained(limits_, p.position)) return Boundary::kFinish;
  stopped_early_ = learner_->EndEpoch(eval.loss());
  ++p.epoch;
  p.position = 0;
  commit_.loss_sum = commit_.correct = commit_.seen = commit_.train_seconds = 0;
  const bool last = TrainingFinished(limits_, Point(), stopped_early_);
  const bool stop =
      CommitPoint(comm, shape.rank, last ? CommitAt::kLastBoundary : CommitAt::kEpochBoundary);
  const EpochEnd end = PlanEpochEnd(limits_, Point(), stopped_early_, stop);
  if (shape.rank == 0 && end.checkpoint) WriteCheckpoint(commit_.learner);
  if (end.leave) return Boundary::kChange;
  return end.finish ? Boundary::kFinish : Boundary::kNextEpoch;
}

void Worker::FinishJob() {
  const TrainingProgress& p = learner_->progress();
  WriteCheckpoint(learner_->CaptureState());
  // An ask: the controller has the final numbers before any worker leaves.
  const std::string done = EncodeControl<proto::Done>([&](proto::Done::Builder m) {
    m.setEpochs(p.epoch);
    m.setSteps(p.step);
    m.setTestAccuracy(last_accuracy_);
    m.setEarlyStop(stopped_early_);
    m.setGeneration(generation_);
  });
  try {
    controller_.Ask(kControlCall, done, std::chrono::seconds(30)).get();
  } catch (const std::exception& e) {
    Log("the controller did not acknowledge the end of the job: %s", e.what());
  }
}

Worker::Outcome Worker::StopAtOwnCommit(const GenerationOrder& order, int rank) {
  if (rank != 0) return Outcome::kStopped;
  if (!holds_commit_ || !(committed_ == order.source.point)) {
    Log("error: the job stops at %s, but this worker holds %s: no checkpoint written",
        ToString(order.source.point).c_str(),
        holds_commit_ ? ToString(committed_).c_str() : "no commit");
    return Outcome::kStopped;
  }
  WriteCheckpoint(commit_.learner, committed_);
  return Outcome::kStopped;
}

bool Worker::LoadSource(const GenerationOrder& order, int rank) {
  if (rank != 0) return true;
  const SourceKind kind = order.source.kind;
  try {
    if (kind == SourceKind::kResume || kind == SourceKind::kCheckpoint) {
      const std::string path = CheckpointPath(train_.checkpoint_dir);
      commit_ = Commit();
      commit_.learner = ReadCheckpointFile(path);
      if (kind == SourceKind::kResume) {
        Log("resuming from %s", path.c_str());
      } else {
        Log("restoring %s from %s", ToString(kind), path.c_str());
      }
    } else if (kind == SourceKind::kControllerCopy) {
      commit_ = Commit::Open(env_.token, order.state, "the controller's copy");
      Log("restoring the controller's copy (%s, %zu bytes)", ToString(order.source.point).c_str(),
          order.state.size());
    }
    return true;
  } catch (const std::exception& e) {
    Log("cannot load %s: %s", ToString(kind), e.what());
    ReportFault(std::string("cannot load ") + ToString(kind) + ": " + e.what(), true);
    return false;
  }
}

Worker::Outcome Worker::RunGeneration(const GenerationOrder& order) {
  generation_ = order.generation;
  const int rank = order.RankOf(member_id_);
  const int world = static_cast<int>(order.members.size());
  world_ = world;
  if (!order.stop.empty() && order.source.kind == SourceKind::kMember && order.source.rank == 0)
    return StopAtOwnCommit(order, rank);
  collectives::GlooOptions gloo;
  gloo.hostname = collectives_host_;
  gloo.tag = "train";
  // Every pair proves it holds the cluster token before the first collective.
  gloo.token = env_.token;
  // Below the step timeout: a rank waiting for a hung peer leaves the
  // collective (and reports the fault) before the hung one's watchdog fires.
  gloo.default_timeout = std::min<std::chrono::milliseconds>(
      std::chrono::seconds(60),
      std::chrono::milliseconds(static_cast<int64_t>(elastic_.step_timeout * 500)));
  gloo.rendezvous_timeout = std::min<std::chrono::milliseconds>(
      std::chrono::seconds(30),
      std::chrono::milliseconds(static_cast<int64_t>(elastic_.step_timeout * 1000)));
  collectives::GlooCommunicatorFactory factory(*client_, gloo);
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<Communicator> nccl;
  try {
    comm =
        std::make_unique<MeteredCommunicator>(factory.Create({generation_, rank, world}), stats_);
    if (device_.is_cuda() && EveryRankHasItsOwnGpu(*comm)) {
      collectives::NcclOptions options;
      options.device = device_.index();
      options.tag = "grad";
      nccl = std::make_unique<MeteredCommunicator>(
          collectives::NcclCommunicatorFactory(*client_, options)
              .Create({generation_, rank, world}),
          stats_);
    }
  } catch (const std::exception& e) {
    Log("generation %llu: rendezvous failed (%s); waiting for the next generation",
        static_cast<unsigned long long>(generation_), e.what());
    ReportFault(std::string("rendezvous failed: ") + e.what(), false);
    // The controller re-forms the generation. If nothing new comes, the
    // workers cannot reach each other, and waiting longer would hang the job.
    rendezvous_error_ = e.what();
    give_up_at_ =
        std::chrono::steady_clock::now() +
        std::chrono::milliseconds(static_cast<int64_t>(elastic_.rendezvous_timeout * 1000));
    return Outcome::kFailed;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    live_comm_ = comm.get();
    grad_comm_ = nccl ? nccl.get() : comm.get();
    if (newest_generation_ > generation_) {
      comm->Abort();
      grad_comm_->Abort();
    }
  }
  Outcome outcome = Outcome::kFailed;
  try {
    // A fresh Learner per generation: the learning rate scales with the world.
    TrainOptions scaled = train_;
    if (elastic_.global_batch == 0) scaled.lr = train_.lr * world;
    SeedTorch(static_cast<uint64_t>(train_.seed));
    learner_ = std::make_unique<Learner>(
        models::CreateModel(train_.model, train_set_->num_classes()),
        MakeLearnerOptions(scaled, train_set_->num_classes(), arithmetic_), device_);
    if (LoadSource(order, rank)) {
      Sync(*comm, rank, order.source.kind == SourceKind::kMember ? order.source.rank : 0);
      if (rank == 0) ReportSynced(order);
      if (!order.stop.empty()) {
        if (rank == 0) WriteCheckpoint(commit_.learner);
        outcome = Outcome::kStopped;
      } else {
        pending_ = Pending();
        outcome = Train(*comm, world, rank);
      }
    }
  } catch (const CollectiveError& e) {
    watchdog_.Disarm();
    const TrainingProgress& p = learner_->progress();
    Log("generation %llu failed (%s) at epoch %lld position %lld; restoring the last commit",
        static_cast<unsigned long long>(generation_), e.what(), static_cast<long long>(p.epoch),
        static_cast<long long>(p.position));
    comm->Abort();
    if (nccl) nccl->Abort();
    bool superseded = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      superseded = newest_generation_ > generation_;
    }
    // A fault nobody else decided on (a reset connection, a collective timeout):
    // the controller re-forms the generation.
    if (!superseded) ReportFault(e.what(), false);
    outcome = Outcome::kFailed;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    live_comm_ = nullptr;
    grad_comm_ = nullptr;
  }
  SendStats(true);  // the generation's last counts, before this worker may leave
  return outcome;
}

int Worker::Run() {
  if (train_.threads > 0) {
    torch::set_num_threads(static_cast<int>(train_.threads));
  } else {
    torch::set_num_threads(1);  // one process per core is the fast split on CPUs
  }
  wedge_at_step_ = WedgeStepFromEnvironment(worker_index_);
  device_ = ResolveDevice(train_.device, worker_index_);
  arithmetic_ = ChooseArithmetic(train_, device_);
  train_set_ = LoadDataset(train_.dataset, train_.data_dir, Split::kTrain);
  test_set_ = LoadDataset(train_.dataset, train_.data_dir, Split::kTest);
  train_size_ = Limit(train_set_->size(), train_.train_samples);
  test_size_ = Limit(test_set_->size(), train_.test_samples);
  sampler_ = std::make_unique<ElasticSampler>(train_size_, static_cast<uint64_t>(train_.seed));
  limits_.train_size = train_size_;
  limits_.epochs = train_.epochs;
  limits_.max_steps = train_.max_steps;
  limits_.commit_every = elastic_.commit_every;
  limits_.checkpoint_every = train_.checkpoint_every;
  LoaderOptions filler;
  filler.batch_size = 1;
  filler.augment = false;
  filler.threads = 1;
  filler_ = std::make_unique<Loader>(train_set_, filler);

  // The model before the first sync: a freshly seeded one (rank 0's is what
  // everyone gets, and only at the very start of a job).
  SeedTorch(static_cast<uint64_t>(train_.seed));
  learner_ = std::make_unique<Learner>(
      models::CreateModel(train_.model, train_set_->num_classes()),
      MakeLearnerOptions(train_, train_set_->num_classes(), arithmetic_), device_);
  commit_.learner = learner_->CaptureState();

  const runtime::WorkerEnvironment env = runtime::WorkerEnvironment::FromEnvironment();
  collectives_host_ = SourceAddressToward(env.head_host, env.head_port);
  inbox_ = std::make_shared<TrainerInbox>([this](uint64_t g) { AbortOlderThan(g); });
  actors_->Spawn(kTrainerActor, inbox_);
  try {
    Join();
  } catch (const std::exception&) {
    // The head went away while this worker registered (a controller restart,
    // a reset connection): wait for it like any worker that lost its head.
    if (client_->connected()) throw;
    Reconnect();
  }
  Log("training on %s: %s", device_.str().c_str(), arithmetic_.why.c_str());
  if (!elastic_.log_samples.empty()) {
    MakeDirectories(elastic_.log_samples);
    const std::string path =
        elastic_.log_samples + "/samples-" + std::to_string(member_id_) + ".log";
    sample_log_ = std::fopen(path.c_str(), "a");
    if (sample_log_ == nullptr)
      throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  }
  Log("registered (node %llu) from %s; waiting for a generation",
      static_cast<unsigned long long>(node_id_), collectives_host_.c_str());

  while (true) {
    const std::optional<GenerationOrder> order = WaitForGeneration();
    if (!order) {
      Log("leaving the job");
      client_->Leave();
      return kExitOk;
    }
    switch (RunGeneration(*order)) {
      case Outcome::kDone:
        Log("training finished");
        client_->Leave();  // a goodbye, so the head does not count it as a failure
        return kExitOk;
      case Outcome::kStopped:
        // The job's outcome is the driver's exit status; ours says we stopped cleanly.
        Log("stopped: %s", order->stop.c_str());
        client_->Leave();
        return kExitOk;
      case Outcome::kChange:
      case Outcome::kFailed:
        break;
    }
  }
}

}  // namespace

int RunWorker() {
  struct sigaction action {};
  action.sa_handler = OnTerminate;
  ::sigaction(SIGTERM, &action, nullptr);
  // Gloo writes to its peers' sockets without MSG_NOSIGNAL: a write to a peer
  // that was just killed must fail that collective (and the generation), not
  // kill this worker with SIGPIPE, as it did once in a kill of rank 0.
  ::signal(SIGPIPE, SIG_IGN);
  try {
    const runtime::WorkerEnvironment env = runtime::WorkerEnvironment::FromEnvironment();
    auto head = std::make_unique<runtime::HeadClient>(
        env.ClientOptions("worker-" + std::to_string(env.worker_index)));
    // This process's actors: where the controller's messages arrive.
    runtime::ActorSystemOptions actor_options;
    actor_options.token = env.token;
    actor_options.listen_host = SourceAddressToward(env.head_host, env.head_port);
    actor_options.threads = 1;
    actor_options.transport = env.transport;
    actor_options.name = "worker-" + std::to_string(env.worker_index);
    auto actors = std::make_unique<runtime::ActorSystem>(actor_options);
    const runtime::Endpoint controller =
        ControllerEndpoint(head->LookupActor(kControllerActor, std::chrono::seconds(60)), env);
    // The job's flags, the same for every worker wherever it was started.
    const std::string spec = actors->Remote(kControllerActor, controller)
                                 .Ask(kControlCall, SpecRequest(), std::chrono::seconds(60))
                                 .get();
    MessageBytes bytes(spec, "job spec");
    TrainOptions train;
    ElasticOptions elastic;
    const proto::JobSpec::Reader job = bytes.Get<proto::JobSpec>();
    ParseJobArgs(ToStrings(job.getArgs()), &train, &elastic);
    Worker worker(std::move(head), std::move(actors), controller, train, elastic,
                  job.getJobId().cStr(), env);
    return worker.Run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[worker pid %d] error: %s\n", static_cast<int>(::getpid()), e.what());
    return kExitError;
  }
}

}  // namespace elastic::trainer
