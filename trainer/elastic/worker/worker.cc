// One worker of an elastic job: the shell around the training loop
// (training_loop.h) of docs/elastic.md.
//
//   wait for the controller's next generation that contains me -> build the
//   communicator of that generation -> restore the state its source holds ->
//   run the loop in that generation's world (generation_world.h) until the
//   job ends, the controller asks to stop, or a collective fails -> (on
//   failure) report the fault and wait for the next generation.
//
// What to do at each turn is decided by worker_policy.h; this file does the
// I/O. Everything between this worker and the controller is a typed message
// (control.capnp): the controller tells this process's trainer actor
// (TrainerInbox) and the worker tells the controller actor.
#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
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
#include "runtime/actor.h"
#include "runtime/head_client.h"
#include "runtime/head_reconnect.h"
#include "trainer/checkpoint.h"
#include "trainer/checksum.h"
#include "trainer/commit_state.h"
#include "trainer/compute_threads.h"
#include "trainer/device.h"
#include "trainer/elastic/elastic.h"
#include "trainer/elastic/protocol/control_messages.h"
#include "trainer/elastic/protocol/job_spec.h"
#include "trainer/elastic/protocol/worker_stats.h"
#include "trainer/elastic/worker/controller_link.h"
#include "trainer/elastic/worker/generation_world.h"
#include "trainer/elastic/worker/metered_communicator.h"
#include "trainer/elastic/worker/source_address.h"
#include "trainer/elastic/worker/step_watchdog.h"
#include "trainer/elastic/worker/superseded_store.h"
#include "trainer/elastic/worker/trainer_inbox.h"
#include "trainer/elastic/worker/worker_events.h"
#include "trainer/elastic/worker/worker_policy.h"
#include "trainer/learner.h"
#include "trainer/model_export.h"
#include "trainer/trainer.h"
#include "trainer/training_loop.h"

namespace elastic::trainer {
namespace {

using collectives::CollectiveError;
using collectives::Communicator;
using collectives::DataType;

std::atomic<bool> g_terminate_requested{false};
void OnTerminate(int) { g_terminate_requested.store(true); }

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

class Worker {
 public:
  // Owns the connection to the head, so that no membership callback can run
  // once the Worker is being destroyed.
  Worker(std::unique_ptr<runtime::HeadClient> head, std::unique_ptr<runtime::ActorSystem> actors,
         runtime::Endpoint controller, TrainOptions train, ElasticOptions elastic,
         std::string job_id, runtime::WorkerEnvironment env, Task task)
      : train_(std::move(train)),
        elastic_(std::move(elastic)),
        job_id_(std::move(job_id)),
        env_(std::move(env)),
        task_(std::move(task)),
        watchdog_(std::chrono::milliseconds(static_cast<int64_t>(elastic_.step_timeout * 1000))),
        copies_(elastic_.state_copy_every),
        frame_check_(env_.transport.max_frame_bytes),
        client_(std::move(head)),
        actors_(std::move(actors)),
        controller_(actors_->Remote(kControllerActor, controller)) {}
  ~Worker() {
    actors_.reset();
    client_.reset();
    if (sample_log_ != nullptr) std::fclose(sample_log_);
  }

  int Run();

 private:
  enum class Outcome { kChange, kFailed, kDone, kStopped };
  static const char* OutcomeName(Outcome outcome);

  void OnUpdate(const runtime::MembershipUpdate& update);
  // Subscribes to the head's views, registers (under the member id it had, if
  // any) and tells the controller what commit it holds.
  void Join();
  // Before it joins: LibTorch's one-time costs of this process (Learner::WarmUp).
  void WarmUp();
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
  // Runs one generation and records (worker_events.h) that this worker left it.
  Outcome RunGeneration(const GenerationOrder& order);
  // The generation from its rendezvous to its communicator's destruction.
  Outcome TrainGeneration(const GenerationOrder& order);
  // For the event log: how long this worker stayed in generation_ after it
  // learned of a newer one (-1 when none exists).
  int64_t SupersededForMs();
  // Trains in the generation's world: restore, sync, the loop.
  Outcome Train(const GenerationOrder& order, GenerationWorld& world);
  // Rank 0 takes the state its source holds as its commit; false (after
  // telling the controller) when it cannot.
  bool LoadSource(const GenerationOrder& order, int rank);
  bool EveryRankHasItsOwnGpu(Communicator& comm);
  void ReportDrainingOnce();
  void ReportFault(const std::string& reason, bool state_unavailable);
  void ReportSynced(const GenerationOrder& order);
  void WriteCheckpoint(const std::string& learner_bytes, const StatePoint& point);
  std::optional<StatePoint> Holds() const {
    return state_.holds_commit ? std::optional<StatePoint>(state_.committed) : std::nullopt;
  }
  std::string Holding() const {
    return state_.holds_commit ? "the commit at " + ToString(state_.committed)
                               : std::string("no commit");
  }
  // What every generation's world borrows from this process (Run sets it up).
  WorkerServices MakeServices();
  WorkerServices services_;

  TrainOptions train_;
  ElasticOptions elastic_;
  const std::string job_id_;  // the controller's: a controller of another job is not ours
  const runtime::WorkerEnvironment env_;
  const Task task_;
  torch::Device device_{torch::kCPU};
  Arithmetic arithmetic_;  // precision and memory format, chosen once per process
  LoopConfig config_;
  int64_t wedge_at_step_ = -1;  // ELASTIC_TEST_WEDGE_STEP
  StepWatchdog watchdog_;
  CopySchedule copies_;
  CopyFrameCheck frame_check_;

  std::unique_ptr<Learner> learner_;
  LoopState state_;
  std::optional<StatePoint> checkpointed_;  // of the last checkpoint this worker wrote
  std::FILE* sample_log_ = nullptr;
  std::unique_ptr<WorkerEventLog> events_;  // with --log-samples

  std::mutex mutex_;
  uint64_t newest_generation_ = 0;  // guarded by mutex_: newest seen anywhere
  // guarded by mutex_: when this worker learned that a generation newer than
  // generation_ exists (unset while none does)
  std::optional<std::chrono::steady_clock::time_point> superseded_at_;
  runtime::MembershipView latest_;     // guarded by mutex_: the head's newest view
  Communicator* live_comm_ = nullptr;  // guarded by mutex_: aborted on a newer generation
  // The generation's data plane: gradients and model buffers. On CUDA an NCCL
  // communicator over device memory, beside the Gloo one that carries the
  // control values and state bytes in host memory; on the CPU the Gloo one.
  Communicator* grad_comm_ = nullptr;  // guarded by mutex_ like live_comm_
  std::string head_lost_reason_;       // guarded by mutex_
  uint64_t last_generation_ = 0;
  uint64_t generation_ = 0;
  // Set when a generation's rendezvous failed (worker_policy.h).
  std::optional<RendezvousGiveUp> give_up_;
  bool drain_reported_ = false;
  std::string let_go_reason_;  // set once a plan found this worker too slow to keep
  // For the driver's metrics (worker_stats.h): allreduces and step times.
  WorkerStats stats_;
  WorkerStatsPublisher stats_publisher_{stats_};
  // Where peers reach this worker's collectives: the address it reaches the
  // head from, so workers on other machines (of the head's network) connect.
  std::string collectives_host_;

  // Last: destroyed (in ~Worker, explicitly) before everything their callbacks touch.
  // client_ is replaced (on the training thread, between generations) when
  // the head is lost and comes back.
  std::unique_ptr<runtime::HeadClient> client_;
  std::unique_ptr<runtime::ActorSystem> actors_;
  ControllerLink controller_;
  std::shared_ptr<TrainerInbox> inbox_;
};

WorkerServices Worker::MakeServices() {
  WorkerServices s;
  s.controller = &controller_;
  s.inbox = inbox_.get();
  s.stats = &stats_;
  s.stats_publisher = &stats_publisher_;
  s.watchdog = &watchdog_;
  s.copies = &copies_;
  s.frame_check = &frame_check_;
  s.sample_log = sample_log_;
  s.poll_draining = [this] {
    if (g_terminate_requested.load()) ReportDrainingOnce();
  };
  s.let_go = [this](const std::string& why) {
    if (let_go_reason_.empty()) let_go_reason_ = why;
    ReportDrainingOnce();
  };
  s.checkpointed = [this](const StatePoint& at) { checkpointed_ = at; };
  s.token = env_.token;
  s.wedge_at_step = wedge_at_step_;
  return s;
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
  const uint64_t member = client_->RegisterMember(std::string("worker@") + hostname, env_.node_id,
                                                  actors_->endpoint(), controller_.member_id());
  controller_.SetMemberId(member);
  stats_publisher_.SetMemberId(member);
  client_->OnDisconnect([this](const std::string& reason) { OnHeadLost(reason); });
  controller_.Tell<proto::Hello>([&](proto::Hello::Builder m) {
    m.setMemberId(member);
    m.setHoldsCommit(state_.holds_commit);
    if (state_.holds_commit) ToProto(state_.committed, m.initCommit());
  });
}

void Worker::OnHeadLost(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  head_lost_reason_ = reason;
  if (live_comm_ != nullptr) live_comm_->Abort();
  if (grad_comm_ != nullptr) grad_comm_->Abort();
}

void Worker::Reconnect() {
  HeadLost lost{env_.head_host, env_.head_port, job_id_, Holds(), env_.head_reconnect_timeout};
  ReconnectAttempt last;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    last.error = head_lost_reason_;
  }
  controller_.Log("lost the head at %s:%u (%s); holding %s, reconnecting for up to %lld ms",
                  env_.head_host.c_str(), static_cast<unsigned>(env_.head_port), last.error.c_str(),
                  Holding().c_str(), static_cast<long long>(lost.timeout.count()));
  const auto start = std::chrono::steady_clock::now();
  const runtime::HeadReconnectWindow window(start, lost.timeout);
  std::unique_ptr<runtime::HeadClient> client;
  runtime::ActorRef controller;
  while (true) {
    const ReconnectDecision decision =
        DecideReconnect(lost, last, std::chrono::steady_clock::now(), window.deadline());
    switch (decision.action) {
      case ReconnectAction::kAttempt:
        try {
          client = std::make_unique<runtime::HeadClient>(
              env_.ClientOptions("worker-" + std::to_string(env_.worker_index)));
          // A restarted driver registers its controller right after its head listens.
          const runtime::Endpoint endpoint = ControllerEndpoint(
              client->LookupActor(kControllerActor,
                                  window.AttemptBudget(std::chrono::steady_clock::now(),
                                                       std::chrono::milliseconds::max())),
              env_);
          controller = actors_->Remote(kControllerActor, endpoint);
          MessageBytes bytes(
              controller.Ask(kControlCall, SpecRequest(), std::chrono::seconds(30)).get(),
              "job spec");
          last = {ReconnectAttempt::Result::kAnswered,
                  bytes.Get<proto::JobSpec>().getJobId().cStr(), last.error};
        } catch (const std::exception& e) {
          last = {ReconnectAttempt::Result::kFailed, "", e.what()};
        }
        break;
      case ReconnectAction::kWait:
        std::this_thread::sleep_for(decision.wait);
        last.result = ReconnectAttempt::Result::kNone;
        break;
      case ReconnectAction::kJoin:
        try {
          client_ = std::move(client);
          controller_.Reset(controller);
          Join();
          controller_.Log(
              "reconnected to the head after %.1f s; member %llu of job %s",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
              static_cast<unsigned long long>(controller_.member_id()), job_id_.c_str());
          return;
        } catch (const std::exception& e) {
          last = {ReconnectAttempt::Result::kFailed, "", e.what()};
        }
        break;
      case ReconnectAction::kOtherJob:
      case ReconnectAction::kGiveUp:
        throw FatalError(decision.reason);
    }
  }
}

void Worker::AbortOlderThan(uint64_t generation) {
  std::lock_guard<std::mutex> lock(mutex_);
  newest_generation_ = std::max(newest_generation_, generation);
  if (generation > generation_ && !superseded_at_) {
    superseded_at_ = std::chrono::steady_clock::now();
  }
  if (live_comm_ != nullptr && live_comm_->generation() < generation) live_comm_->Abort();
  if (grad_comm_ != nullptr && grad_comm_->generation() < generation) grad_comm_->Abort();
}

void Worker::ReportDrainingOnce() {
  if (drain_reported_ || (!g_terminate_requested.load() && let_go_reason_.empty())) return;
  drain_reported_ = true;
  const char* when = elastic_.admit_at == "commit"
                         ? "leaving at the next commit"
                         : "leaving at the next epoch boundary (or commit after --drain-timeout)";
  if (g_terminate_requested.load())
    controller_.Log("SIGTERM: %s", when);
  else
    controller_.Log("let go, %s: %s", let_go_reason_.c_str(), when);
  controller_.Tell<proto::Draining>([&](proto::Draining::Builder m) {
    m.setMemberId(controller_.member_id());
    if (!g_terminate_requested.load()) m.setReason(let_go_reason_);
  });
}

void Worker::ReportFault(const std::string& reason, bool state_unavailable) {
  controller_.Tell<proto::Fault>([&](proto::Fault::Builder m) {
    m.setGeneration(generation_);
    m.setMemberId(controller_.member_id());
    m.setReason(reason);
    m.setStateUnavailable(state_unavailable);
  });
}

std::optional<GenerationOrder> Worker::WaitForGeneration() {
  while (true) {
    ReportDrainingOnce();
    WaitInputs in;
    in.over = inbox_->Over();
    std::optional<GenerationOrder> order;
    if (!in.over) order = inbox_->Next(last_generation_, std::chrono::milliseconds(200));
    if (order) {
      last_generation_ = order->generation;
      in.order_generation = order->generation;
      in.rank_in_order = order->RankOf(controller_.member_id());
    }
    const auto read_world = [&] {
      in.draining = drain_reported_;
      in.connected = client_->connected();
      std::lock_guard<std::mutex> lock(mutex_);
      in.in_view = latest_.RankOf(controller_.member_id()) >= 0;
    };
    read_world();
    in.last_generation = last_generation_;
    in.give_up = give_up_;
    in.now = std::chrono::steady_clock::now();
    WaitDecision decision = DecideWait(in);
    if (decision.reset_give_up) give_up_.reset();
    if (decision.action == WaitAction::kReconnect) {
      // Without its head this worker can neither be told nor rendezvous.
      Reconnect();
      read_world();
      in.now = std::chrono::steady_clock::now();
      decision = DecideWait(in);
    }
    switch (decision.action) {
      case WaitAction::kRun:
        return order;
      case WaitAction::kLeave:
        if (in.over) controller_.Log("the job is over: %s", in.over->c_str());
        return std::nullopt;
      case WaitAction::kGiveUp:
        throw FatalError(decision.reason);
      case WaitAction::kReconnect:
      case WaitAction::kSkip:
      case WaitAction::kWait:
        break;
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
    controller_.Log(
        "generation %llu: ranks share a GPU, so gradients go through host memory over Gloo "
        "(NCCL allows one rank per GPU)",
        static_cast<unsigned long long>(generation_));
  }
  return own;
}

void Worker::ReportSynced(const GenerationOrder& order) {
  // The state came from a member and the controller's copy is older: without
  // this copy a controller restarted before the next one would train the
  // steps in between again.
  const bool send =
      CopyWithSynced(order.send_copy, elastic_.state_copy_every, state_.holds_commit).send;
  const std::string state = send ? SealedCopy(state_.commit, services_) : std::string();
  controller_.Tell<proto::Synced>([&](proto::Synced::Builder m) {
    m.setGeneration(generation_);
    ToProto(state_.committed, m.initPoint());
    m.setChecksum(ParameterChecksum(learner_->parameters()));
    if (!state.empty()) m.setState(runtime::AsData(state));
  });
}

void Worker::WriteCheckpoint(const std::string& learner_bytes, const StatePoint& point) {
  if (train_.checkpoint_dir.empty()) return;
  const std::string path = WriteCheckpointWithModel(task_, learner_bytes, train_.checkpoint_dir);
  checkpointed_ = point;
  ReportCheckpoint(controller_, point, path);
}

bool Worker::LoadSource(const GenerationOrder& order, int rank) {
  if (rank != 0) return true;
  const SourceKind kind = order.source.kind;
  try {
    if (kind == SourceKind::kResume || kind == SourceKind::kCheckpoint) {
      const std::string path = CheckpointPath(train_.checkpoint_dir);
      state_.commit = Commit();
      state_.commit.learner = ReadCheckpointFile(path);
      if (kind == SourceKind::kResume) {
        controller_.Log("resuming from %s", path.c_str());
      } else {
        controller_.Log("restoring %s from %s", ToString(kind), path.c_str());
      }
    } else if (kind == SourceKind::kControllerCopy) {
      state_.commit = Commit::Open(env_.token, order.state, "the controller's copy");
      controller_.Log("restoring the controller's copy (%s, %zu bytes)",
                      ToString(order.source.point).c_str(), order.state.size());
    }
    return true;
  } catch (const std::exception& e) {
    controller_.Log("cannot load %s: %s", ToString(kind), e.what());
    ReportFault(std::string("cannot load ") + ToString(kind) + ": " + e.what(), true);
    return false;
  }
}

Worker::Outcome Worker::Train(const GenerationOrder& order, GenerationWorld& world) {
  const int rank = world.rank();
  // A fresh Learner per generation (with --per-worker-batch the learning rate
  // scales with the world) over the same model, whose state Sync restores: a
  // fresh model would be loaded and warmed up again by every rank, in the first
  // step of every generation.
  learner_ = MakeLearnerOver(learner_->shared_model(), train_, task_, arithmetic_, device_,
                             world.size(), config_.global_batch);
  TrainingLoop loop(task_, config_, *learner_, state_, world);
  if (!LoadSource(order, rank)) return Outcome::kFailed;
  loop.Sync(order.source.kind == SourceKind::kMember ? order.source.rank : 0);
  if (rank == 0) ReportSynced(order);
  if (!order.stop.empty()) {
    if (rank == 0) WriteCheckpoint(state_.commit.learner, state_.committed);
    return Outcome::kStopped;
  }
  return loop.Run() == TrainingLoop::End::kFinished ? Outcome::kDone : Outcome::kChange;
}

const char* Worker::OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kChange:
      return "change";
    case Outcome::kFailed:
      return "failed";
    case Outcome::kDone:
      return "done";
    case Outcome::kStopped:
      return "stopped";
  }
  return "?";
}

int64_t Worker::SupersededForMs() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!superseded_at_) return -1;
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               *superseded_at_)
      .count();
}

Worker::Outcome Worker::RunGeneration(const GenerationOrder& order) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation_ = order.generation;
    superseded_at_.reset();
    if (newest_generation_ > generation_) superseded_at_ = std::chrono::steady_clock::now();
  }
  const Outcome outcome = TrainGeneration(order);
  if (events_) {
    events_->Left(controller_.member_id(), {generation_, OutcomeName(outcome), SupersededForMs()});
  }
  return outcome;
}

Worker::Outcome Worker::TrainGeneration(const GenerationOrder& order) {
  const int rank = order.RankOf(controller_.member_id());
  const int world = static_cast<int>(order.members.size());
  const OwnCommitDecision own =
      StopAtOwnCommit(order.stop, order.source, rank, Holds(), checkpointed_);
  switch (own.action) {
    case OwnCommitStop::kNo:
      break;
    case OwnCommitStop::kStop:
      return Outcome::kStopped;
    case OwnCommitStop::kNoCheckpoint:
      controller_.Log("%s", own.reason.c_str());
      return Outcome::kStopped;
    case OwnCommitStop::kCheckpoint:
      WriteCheckpoint(state_.commit.learner, state_.committed);
      return Outcome::kStopped;
  }
  const CollectiveTimeouts timeouts = TimeoutsFor(elastic_.step_timeout);
  collectives::GlooOptions gloo;
  gloo.hostname = collectives_host_;
  gloo.tag = "train";
  // Every pair proves it holds the cluster token before the first collective.
  gloo.token = env_.token;
  gloo.default_timeout = timeouts.collective;
  gloo.rendezvous_timeout = timeouts.rendezvous;
  // The rendezvous gives up as soon as a newer generation exists (a member
  // died before it wrote its key, or before its pairs connected): the
  // survivors go to that one at once.
  const auto superseded = [this] {
    std::lock_guard<std::mutex> lock(mutex_);
    return newest_generation_ > generation_;
  };
  gloo.abandoned = superseded;
  SupersededStore store(*client_, superseded);
  collectives::GlooCommunicatorFactory factory(store, gloo);
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
          collectives::NcclCommunicatorFactory(store, options).Create({generation_, rank, world}),
          stats_);
    }
  } catch (const std::exception& e) {
    // The store's RendezvousSuperseded, maybe wrapped by the backend: a newer
    // generation is here, nobody needs to hear of a fault.
    if (store.superseded()) {
      controller_.Log("generation %llu: rendezvous given up for a newer generation (%s)",
                      static_cast<unsigned long long>(generation_), e.what());
      return Outcome::kFailed;
    }
    controller_.Log("generation %llu: rendezvous failed (%s); waiting for the next generation",
                    static_cast<unsigned long long>(generation_), e.what());
    ReportFault(std::string("rendezvous failed: ") + e.what(), false);
    give_up_ = AfterRendezvousFailure(e.what(), std::chrono::steady_clock::now(),
                                      elastic_.rendezvous_timeout);
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
  if (events_)
    events_->Joined(controller_.member_id(),
                    {generation_, rank, world, static_cast<int>(::getpid())});
  GenerationWorld generation(services_, generation_, rank, world, comm.get(),
                             nccl ? nccl.get() : comm.get());
  if (rank == 0) {
    const StepShape shape = ShapeSteps(config_.global_batch, train_.batch_size, world, rank);
    if (shape.step_samples < world) {
      controller_.Log(
          "world %d is larger than the global batch of %lld samples: ranks %lld..%d take no "
          "samples and join "
          "each step with zero weight",
          world, static_cast<long long>(shape.step_samples),
          static_cast<long long>(shape.step_samples), world - 1);
    }
  }
  Outcome outcome = Outcome::kFailed;
  try {
    outcome = Train(order, generation);
  } catch (const CollectiveError& e) {
    watchdog_.Disarm();
    const TrainingProgress& p = learner_->progress();
    controller_.Log(
        "generation %llu failed (%s) at epoch %lld position %lld; restoring the last commit",
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
  PublishStats(services_, true);  // the generation's last counts, before this worker may leave
  return outcome;
}

void Worker::WarmUp() {
  // Two samples: LibTorch's first-run costs hardly depend on the batch, and a
  // joiner's warm-up competes for the cores of the machine it starts on.
  const int64_t n = std::min<int64_t>(2, task_.train->size());
  std::vector<int64_t> indices;
  for (int64_t i = 0; i < n; ++i) indices.push_back(i);
  BatchRequest request;
  request.channels_last = arithmetic_.channels_last;
  try {
    const Batch batch = task_.train->Get(indices, request);
    learner_->WarmUp(batch.inputs, batch.targets);
  } catch (const std::exception& e) {
    // The first step meets the same error and reports it as a fault.
    controller_.Log("warm-up failed (%s); the first step will tell", e.what());
  }
}

int Worker::Run() {
  // One process per core is the fast split on CPUs.
  SetComputeThreads(train_.threads > 0 ? static_cast<int>(train_.threads) : 1);
  wedge_at_step_ = WedgeStepFromEnvironment(env_.worker_index);
  device_ = ResolveDevice(train_.device, env_.worker_index);
  arithmetic_ = ChooseArithmetic(train_, task_, device_);
  config_ = MakeLoopConfig(train_, task_, arithmetic_);
  config_.let_go.below = elastic_.let_go_below;
  config_.limits.commit_every = elastic_.commit_every;
  config_.global_batch = GlobalBatch(elastic_, train_);

  // The model before the first sync: a freshly seeded one (rank 0's is what
  // everyone gets, and only at the very start of a job).
  learner_ = MakeLearner(train_, task_, arithmetic_, device_);
  state_.commit.learner = learner_->CaptureState();
  WarmUp();

  collectives_host_ = SourceAddressToward(env_.head_host, env_.head_port);
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
  controller_.Log("training on %s: %s", device_.str().c_str(), arithmetic_.why.c_str());
  if (!elastic_.log_samples.empty()) {
    std::filesystem::create_directories(elastic_.log_samples);
    const std::string path =
        elastic_.log_samples + "/samples-" + std::to_string(controller_.member_id()) + ".log";
    sample_log_ = std::fopen(path.c_str(), "a");
    if (sample_log_ == nullptr)
      throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
    events_ = std::make_unique<WorkerEventLog>(
        WorkerEventsPath(elastic_.log_samples, controller_.member_id()));
  }
  services_ = MakeServices();
  controller_.Log("registered (node %llu) from %s; waiting for a generation",
                  static_cast<unsigned long long>(env_.node_id), collectives_host_.c_str());

  while (true) {
    const std::optional<GenerationOrder> order = WaitForGeneration();
    if (!order) {
      controller_.Log("leaving the job");
      client_->Leave();
      return kExitOk;
    }
    switch (RunGeneration(*order)) {
      case Outcome::kDone:
        controller_.Log("training finished");
        client_->Leave();  // a goodbye, so the head does not count it as a failure
        return kExitOk;
      case Outcome::kStopped:
        // The job's outcome is the driver's exit status; ours says we stopped cleanly.
        controller_.Log("stopped: %s", order->stop.c_str());
        client_->Leave();
        return kExitOk;
      case Outcome::kChange:
      case Outcome::kFailed:
        break;
    }
  }
}

// Asks the controller for the job's spec until `within` has passed. One try
// fails when this machine stalls past the transport's connect timeout (a 6-s
// stall of a loaded 2-core machine did), and a worker that gave up at its
// start would leave the job a worker short.
std::string AskForJobSpec(runtime::ActorSystem& actors, const runtime::Endpoint& controller,
                          std::chrono::milliseconds within) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + within;
  constexpr std::chrono::milliseconds kPause(250);
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    try {
      return actors.Remote(kControllerActor, controller)
          .Ask(kControlCall, SpecRequest(), left)
          .get();
    } catch (const std::exception& e) {
      if (Clock::now() + kPause >= deadline) throw;
      std::fprintf(stderr,
                   "[worker pid %d] asking the job controller for the job's spec again: %s\n",
                   static_cast<int>(::getpid()), e.what());
      std::this_thread::sleep_for(kPause);
    }
  }
}

}  // namespace

int RunWorker(const JobProgram& program) {
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
    // The job's settings, the same for every worker wherever it was started.
    const std::string spec = AskForJobSpec(*actors, controller, std::chrono::seconds(60));
    MessageBytes bytes(spec, "job spec");
    const proto::JobSpec::Reader job = bytes.Get<proto::JobSpec>();
    const TrainOptions train = ReadTrainSpec(job.getTrain());
    ElasticOptions elastic;
    ReadElasticSpec(job.getElastic(), &elastic);
    Task task = program.make_task(train);
    task.Check();
    Worker worker(std::move(head), std::move(actors), controller, train, elastic,
                  job.getJobId().cStr(), env, std::move(task));
    return worker.Run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[worker pid %d] error: %s\n", static_cast<int>(::getpid()), e.what());
    return kExitError;
  }
}

}  // namespace elastic::trainer
