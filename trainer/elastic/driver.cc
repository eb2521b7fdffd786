// The driver of an elastic job (head + local node agent + the control loop
// that decides generations), the --join node agent, and the dispatch.
//
// The driver alone publishes membership views (the head admits no joins by
// itself). Failures need no decision: the head drops a dead member from the
// view at once, which is a new generation the survivors rebuild on. Joins and
// graceful leaves are applied when rank 0 reports that the job stopped at a
// commit point the driver asked for (docs/elastic.md, "Control at commit points").
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/auth.h"
#include "runtime/head.h"
#include "runtime/head_client.h"
#include "runtime/node_agent.h"
#include "runtime/options.h"
#include "trainer/elastic/elastic.h"
#include "trainer/elastic/job_keys.h"
#include "trainer/elastic/job_metrics.h"
#include "trainer/progress.h"

namespace elastic::trainer {
namespace {

using Clock = std::chrono::steady_clock;
using runtime::MemberInfo;
using runtime::MembershipUpdate;

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

void Say(const std::string& text) {
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

// SIGINT and SIGTERM to the driver, counted by the handler and acted on by the
// control loop: the first stops the job at the next epoch boundary, the second
// at the next commit, both with a checkpoint; the third ends the driver at
// once (its workers die with it, as after kill -9).
std::atomic<int> stop_signals{0};
std::atomic<int> last_stop_signal{0};

extern "C" void OnStopSignal(int signal) {
  last_stop_signal.store(signal);
  if (stop_signals.fetch_add(1) + 1 >= 3) {
    ::signal(signal, SIG_DFL);
    ::raise(signal);  // delivered when this handler returns
  }
}

void InstallStopSignalHandlers() {
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
}

std::vector<uint64_t> MemberIds(const runtime::MembershipView& view) {
  std::vector<uint64_t> ids;
  for (const MemberInfo& member : view.members) ids.push_back(member.id);
  return ids;
}

std::string Ids(const std::vector<uint64_t>& ids) {
  std::string out;
  for (uint64_t id : ids) out += (out.empty() ? "" : ",") + std::to_string(id);
  return out;
}

// The control loop: watches membership and the workers' reports, publishes
// views, prints progress. One thread, polling (a few KV reads every 50 ms).
class Controller {
 public:
  Controller(const ElasticOptions& elastic, const TrainOptions& train, runtime::Head& head,
             runtime::HeadClient& kv, JobMetrics& metrics)
      : elastic_(elastic),
        train_(train),
        head_(head),
        kv_(kv),
        metrics_(metrics),
        reporter_(stdout, ProgressReporter::IsTerminal(stdout), train.log_every) {}

  // Until the job is done (0) or stopped below --min-workers (3) or fails (1).
  int Run();
  void OnUpdate(const MembershipUpdate& update);
  bool started() const { return started_; }

 private:
  bool Draining(const MemberInfo& member);
  bool Blacklisted(uint64_t node_id);
  void Publish(const std::vector<uint64_t>& ids, const std::string& reason);
  void PollReports();
  // Folds the workers' stats records and the head's counters into the metrics.
  void PollStats(const MembershipUpdate& m);
  // SIGINT/SIGTERM received so far; says so once for each new one.
  int StopSignals();
  // Ends the job at its last commit: the members of `view` sync on it, rank 0
  // writes the checkpoint, and everyone exits (kExitStopped).
  int StopWithCheckpoint(const std::vector<uint64_t>& view, const std::string& why);
  // Keeps the head up until every worker, pending joiners included, has read
  // that the job is over and left, and the other machines' node agents are gone.
  void WaitForEveryoneToLeave();

  const ElasticOptions& elastic_;
  const TrainOptions& train_;
  runtime::Head& head_;
  runtime::HeadClient& kv_;
  JobMetrics& metrics_;
  ProgressReporter reporter_;

  std::mutex mutex_;
  std::map<uint64_t, int64_t> failures_by_node_;             // guarded by mutex_
  std::map<uint64_t, Clock::time_point> blacklisted_until_;  // guarded by mutex_
  std::map<uint64_t, Clock::time_point> draining_since_;

  bool started_ = false;
  std::atomic<int64_t> exited_workers_{0};  // worker processes that exited (head's reports)
  bool started_once_ = false;  // a view was published (the first is no membership change)
  uint64_t generation_ = 0;
  size_t world_ = 0;
  Clock::time_point generation_seen_;
  std::string generation_reason_;  // of the view we publish next
  std::string current_reason_;     // of the generation now in force
  bool first_step_seen_ = true;
  std::string last_request_;
  std::optional<Clock::time_point> below_minimum_since_;
  int stop_signals_seen_ = 0;
  std::string stopped_by_;  // why, for the workers' logs
  int64_t next_epoch_ = 0;
  int64_t reported_epoch_ = -1;
  std::string last_progress_;
  // Members whose stats record is read: the live ones, plus those gone since
  // the last poll for one final read (a worker publishes before it leaves).
  std::set<uint64_t> stats_members_;
  std::set<uint64_t> bad_stats_;  // members whose unreadable record was reported
  Clock::time_point last_stats_poll_;
};

void Controller::OnUpdate(const MembershipUpdate& update) {
  if (update.kind == runtime::MembershipEventKind::kExited) ++exited_workers_;
  if (update.kind != runtime::MembershipEventKind::kFailed) return;
  metrics_.metrics().RecordMembershipChange(monitoring::MembershipChangeReason::kFailure);
  if (update.node_id == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t failures = ++failures_by_node_[update.node_id];
  if (failures < elastic_.blacklist_after) return;
  // A node whose workers keep dying (bad GPU, full disk, flaky network) would
  // cost a rollback each time: stop admitting it for a while.
  failures_by_node_[update.node_id] = 0;
  blacklisted_until_[update.node_id] =
      Clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(elastic_.blacklist_seconds * 1000));
  Say("driver: node " + std::to_string(update.node_id) + " blacklisted for " +
      std::to_string(static_cast<int64_t>(elastic_.blacklist_seconds)) + " s after " +
      std::to_string(failures) + " worker failures; its workers are not admitted");
}

bool Controller::Blacklisted(uint64_t node_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blacklisted_until_.find(node_id);
  if (it == blacklisted_until_.end()) return false;
  if (Clock::now() < it->second) return true;
  blacklisted_until_.erase(it);
  Say("driver: node " + std::to_string(node_id) + " is no longer blacklisted");
  return false;
}

bool Controller::Draining(const MemberInfo& member) {
  if (draining_since_.count(member.id) != 0) return true;
  if (member.draining || kv_.Get(JobKey::Draining(member.id))) {
    draining_since_[member.id] = Clock::now();
    Say("driver: worker " + std::to_string(member.id) +
        " is leaving (preemption notice); it leaves at the next epoch boundary");
    return true;
  }
  return false;
}

void Controller::Publish(const std::vector<uint64_t>& ids, const std::string& reason) {
  try {
    const std::vector<MemberInfo> before = head_.Membership().view.members;
    const runtime::MembershipView view = head_.PublishView(ids);
    generation_reason_ = reason;
    if (started_once_) {
      size_t stayed = 0;
      for (const MemberInfo& member : before)
        stayed += std::count(ids.begin(), ids.end(), member.id);
      if (ids.size() > stayed)
        metrics_.metrics().RecordMembershipChange(monitoring::MembershipChangeReason::kJoin,
                                                  ids.size() - stayed);
      if (before.size() > stayed)
        metrics_.metrics().RecordMembershipChange(monitoring::MembershipChangeReason::kLeave,
                                                  before.size() - stayed);
    }
    started_once_ = true;
    Say("driver: published generation " + std::to_string(view.generation) + " with " +
        std::to_string(ids.size()) + " workers [" + Ids(ids) + "] (" + reason + ")");
  } catch (const std::invalid_argument& e) {
    // A member died between our read and the publication; the next poll retries.
    Say(std::string("driver: view not published: ") + e.what());
  }
}

void Controller::PollReports() {
  if (!first_step_seen_) {
    if (const std::optional<std::string> t = kv_.Get(JobKey::FirstStep(generation_))) {
      first_step_seen_ = true;
      const double since_view =
          std::stod(*t) - (WallNow() - Seconds(Clock::now() - generation_seen_));
      char line[256];
      std::snprintf(line, sizeof(line),
                    "driver: rescale: generation %llu (%zu workers, %s): first step %.3f s after "
                    "the membership change",
                    static_cast<unsigned long long>(generation_), world_, current_reason_.c_str(),
                    since_view);
      Say(line);
      metrics_.OnRescale(since_view);
    }
  }
  if (const std::optional<std::string> progress = kv_.Get(JobKey::kProgress)) {
    if (*progress != last_progress_) {
      last_progress_ = *progress;
      if (const std::optional<ProgressReport> report = ParseProgressReport(*progress))
        metrics_.OnProgress(*report);
      unsigned long long gen = 0;
      long long epoch = 0, step = 0, steps = 0, in_epoch = 0;
      double images = 0, loss = 0, accuracy = 0, lr = 0;
      int world = 0;
      if (std::sscanf(progress->c_str(), "%llu %lld %lld %lld %lld %lf %lf %lf %lf %d", &gen,
                      &epoch, &step, &steps, &in_epoch, &images, &loss, &accuracy, &lr,
                      &world) == 10) {
        if (epoch != reported_epoch_) {
          reported_epoch_ = epoch;
          reporter_.StartEpoch(epoch + 1, train_.epochs, steps);
        }
        reporter_.Step(in_epoch, step, static_cast<int64_t>(images), loss, accuracy, lr);
      }
    }
  }
  if (next_epoch_ == 0) {
    if (const std::optional<std::string> epoch = kv_.Get(JobKey::kResumedAt))
      next_epoch_ = std::stoll(*epoch);
  }
  while (const std::optional<std::string> summary = kv_.Get(JobKey::Epoch(next_epoch_))) {
    reporter_.Note(summary->c_str());
    if (const std::optional<EpochReport> report = ParseEpochReport(*summary))
      metrics_.OnEpoch(*report);
    ++next_epoch_;
  }
}

void Controller::PollStats(const MembershipUpdate& m) {
  last_stats_poll_ = Clock::now();
  const runtime::HeadStats head = head_.stats();
  metrics_.OnRuntimeStats(head.messages_received + head.messages_sent, head.heartbeats_missed);
  std::set<uint64_t> live;
  for (const MemberInfo& member : m.view.members) live.insert(member.id);
  for (const MemberInfo& member : m.pending) live.insert(member.id);
  stats_members_.insert(live.begin(), live.end());
  for (uint64_t id : stats_members_) {
    const std::optional<std::string> record = kv_.Get(JobKey::WorkerStats(id));
    if (!record) continue;  // no step yet
    try {
      metrics_.OnWorkerStats(id, *record);
    } catch (const std::invalid_argument& e) {
      if (bad_stats_.insert(id).second) Say(std::string("driver: warning: ") + e.what());
    }
  }
  stats_members_ = std::move(live);
}

int Controller::StopSignals() {
  const int signals = stop_signals.load();
  if (signals == stop_signals_seen_) return signals;
  stop_signals_seen_ = signals;
  const std::string name = last_stop_signal.load() == SIGINT ? "SIGINT" : "SIGTERM";
  stopped_by_ = "stopped by " + name + " to the driver";
  if (signals == 1) {
    Say("driver: " + name +
        ": stopping the job at the next epoch boundary with a checkpoint (again: at the next "
        "commit; a third time: at once, losing the work since the last commit)");
  } else {
    Say("driver: " + name + " again: stopping at the next commit (--commit-every)");
  }
  return signals;
}

void Controller::WaitForEveryoneToLeave() {
  // Workers poll for the end about once a second. A joiner's worker still
  // loading its data registers only later, and must find the head there to
  // learn that the job is over. Our own agent is the one node left.
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(15);
  while (Clock::now() < deadline) {
    const MembershipUpdate m = head_.Membership();
    if (m.view.members.empty() && m.pending.empty() && head_.stats().nodes_connected <= 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  PollStats(head_.Membership());  // the final records of those who left
}

int Controller::StopWithCheckpoint(const std::vector<uint64_t>& view, const std::string& why) {
  PollReports();  // the summary of the epoch we stopped after
  kv_.Put(JobKey::kStop, why);
  if (view.empty()) {
    Say("driver: no worker is left to write a checkpoint from the last commit; the last "
        "periodic checkpoint (if any) is in --checkpoint-dir");
    return kExitStopped;
  }
  Publish(view, "stop: rank 0 writes the checkpoint of the last commit");
  // The members sync on the last commit; rank 0 writes it and everyone exits.
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(120);
  while (Clock::now() < deadline && !head_.Membership().view.members.empty())
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  WaitForEveryoneToLeave();
  if (!train_.checkpoint_dir.empty())
    Say("driver: checkpoint of the last commit: " + train_.checkpoint_dir +
        " (continue with --resume)");
  return kExitStopped;
}

int Controller::Run() {
  const Clock::time_point start = Clock::now();
  const auto timeout =
      std::chrono::milliseconds(static_cast<int64_t>(elastic_.rendezvous_timeout * 1000));
  while (true) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (const std::optional<std::string> done = kv_.Get(JobKey::kDone)) {
      PollReports();
      Say(*done);
      WaitForEveryoneToLeave();
      return kExitOk;
    }
    const int stops = StopSignals();
    const MembershipUpdate m = head_.Membership();
    if (m.view.generation != generation_) {
      generation_ = m.view.generation;
      world_ = m.view.members.size();
      generation_seen_ = Clock::now();
      first_step_seen_ = false;
      last_request_.clear();
      current_reason_ = generation_reason_.empty() ? "a worker failed or left" : generation_reason_;
      generation_reason_.clear();
      const std::vector<uint64_t> ids = MemberIds(m.view);
      Say("driver: generation " + std::to_string(generation_) + ": " + std::to_string(ids.size()) +
          " workers [" + Ids(ids) + "]");
      metrics_.OnGeneration(static_cast<int64_t>(generation_), static_cast<int64_t>(ids.size()));
    }
    PollReports();
    if (Clock::now() - last_stats_poll_ >= std::chrono::seconds(1)) PollStats(m);

    // Who is in, who wants out, who waits to come in.
    std::vector<uint64_t> staying;
    std::vector<uint64_t> leaving;
    bool drain_expired = false;
    for (const MemberInfo& member : m.view.members) {
      if (Draining(member)) {
        leaving.push_back(member.id);
        if (Seconds(Clock::now() - draining_since_[member.id]) > elastic_.drain_timeout)
          drain_expired = true;
      } else {
        staying.push_back(member.id);
      }
    }
    std::vector<uint64_t> joining;
    for (const MemberInfo& member : m.pending) {
      if (Draining(member) || Blacklisted(member.node_id)) continue;
      if (elastic_.max_workers > 0 &&
          static_cast<int64_t>(staying.size() + joining.size()) >= elastic_.max_workers)
        break;
      joining.push_back(member.id);
    }
    std::vector<uint64_t> next = staying;
    next.insert(next.end(), joining.begin(), joining.end());

    if (!started_) {
      if (stops > 0) {
        Say("driver: stopped before training started; nothing to checkpoint");
        kv_.Put(JobKey::kStop, "the driver was stopped before training started");
        WaitForEveryoneToLeave();
        return kExitError;
      }
      // The first generation: every local worker, or --min-workers after the timeout.
      // Workers load the data set before they register: give them at least
      // two minutes on a loaded machine, whatever --rendezvous-timeout says.
      const bool all_here = static_cast<int64_t>(joining.size()) >= elastic_.workers;
      const bool timed_out =
          Clock::now() - start > std::max<Clock::duration>(timeout, std::chrono::minutes(2));
      // Workers that die while loading (no data set, bad flags) register
      // nothing: say so now rather than after the timeout.
      if (exited_workers_.load() >= elastic_.workers &&
          static_cast<int64_t>(joining.size()) < elastic_.min_workers) {
        Say("driver: error: all " + std::to_string(elastic_.workers) +
            " workers exited before joining the job; their errors are above");
        return kExitError;
      }
      if (all_here || (timed_out && static_cast<int64_t>(joining.size()) >= elastic_.min_workers)) {
        started_ = true;
        Publish(joining, "start");
      } else if (timed_out) {
        Say("driver: error: only " + std::to_string(joining.size()) + " of " +
            std::to_string(elastic_.workers) + " workers registered within --rendezvous-timeout");
        return kExitError;
      }
      continue;
    }

    const bool training = static_cast<int64_t>(m.view.members.size()) >= elastic_.min_workers;
    if (!training) {
      // Nobody trains: apply any change at once.
      if (static_cast<int64_t>(next.size()) >= elastic_.min_workers) {
        below_minimum_since_.reset();
        Publish(next, std::to_string(joining.size()) + " joined below --min-workers");
        continue;
      }
      if (!below_minimum_since_) {
        below_minimum_since_ = Clock::now();
        Say("driver: " + std::to_string(m.view.members.size()) +
            " workers, below --min-workers=" + std::to_string(elastic_.min_workers) +
            "; waiting up to --rendezvous-timeout for joins");
      }
      if (stops > 0) return StopWithCheckpoint(staying, stopped_by_);
      if (Clock::now() - *below_minimum_since_ > timeout) {
        const std::string message =
            "driver: error: only " + std::to_string(staying.size()) + " workers for " +
            std::to_string(static_cast<int64_t>(elastic_.rendezvous_timeout)) +
            " s (--rendezvous-timeout), below --min-workers=" +
            std::to_string(elastic_.min_workers) + "; stopping";
        Say(message);
        return StopWithCheckpoint(staying, message);
      }
      continue;
    }
    below_minimum_since_.reset();

    if (kv_.Get(JobKey::Stopped(generation_))) {
      if (stops > 0) return StopWithCheckpoint(MemberIds(m.view), stopped_by_);
      // Rank 0 stopped where we asked: apply joins and leaves.
      std::string reason;
      if (!joining.empty()) reason += std::to_string(joining.size()) + " joined";
      if (!leaving.empty())
        reason += (reason.empty() ? "" : ", ") + std::to_string(leaving.size()) + " left";
      if (reason.empty()) reason = "membership unchanged";
      if (next.empty()) {
        Say("driver: every worker is leaving; stopping");
        kv_.Put(JobKey::kStop, "every worker left");
        Publish(m.view.members.empty() ? next : std::vector<uint64_t>{m.view.members[0].id},
                "last worker writes the checkpoint");
        return kExitStopped;
      }
      Publish(next, reason);
      continue;
    }
    if (stops > 0 || !joining.empty() || !leaving.empty()) {
      const std::string request = drain_expired || stops >= 2 ? "now" : "epoch";
      if (request != last_request_) {
        last_request_ = request;
        kv_.Put(JobKey::Request(generation_), request);
      }
    }
  }
}

// --run-dir, or runs/<date-time> where the user started the job (`bazel run`
// runs the binary elsewhere and says where in BUILD_WORKING_DIRECTORY).
std::string RunDirectory(const ElasticOptions& elastic) {
  if (!elastic.run_dir.empty()) return elastic.run_dir;
  const char* cwd = std::getenv("BUILD_WORKING_DIRECTORY");
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
  return std::string(cwd != nullptr ? cwd : ".") + "/runs/" + stamp;
}

std::string LocalHostFor(const std::string& listen) {
  return listen == "0.0.0.0" || listen == "::" ? "127.0.0.1" : listen;
}

// The runtime connections of this job's processes: --heartbeat-timeout.
runtime::TransportOptions TransportFor(const ElasticOptions& elastic) {
  runtime::TransportOptions transport;
  transport.heartbeat_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(elastic.heartbeat_timeout * 1000));
  return transport;
}

}  // namespace

int RunDriver(const ElasticOptions& elastic, const TrainOptions& train,
              const std::vector<std::string>& args) {
  monitoring::MetricsOptions metrics_options;
  metrics_options.address = elastic.metrics_address;
  metrics_options.port = elastic.metrics_port;
  InstallStopSignalHandlers();
  JobMetrics metrics(metrics_options, elastic.metrics_port == ElasticOptions().metrics_port);
  if (!metrics.url().empty()) Say("driver: metrics at " + metrics.url());

  runtime::HeadOptions head_options;
  head_options.listen_host = elastic.listen;
  head_options.port = static_cast<uint16_t>(elastic.port);
  head_options.admit_joins = false;
  head_options.transport = TransportFor(elastic);
  if (!elastic.token_file.empty()) {
    struct stat info;
    if (::stat(elastic.token_file.c_str(), &info) != 0) {
      runtime::WriteTokenFile(elastic.token_file, runtime::GenerateToken());
      Say("driver: wrote a new cluster token to " + elastic.token_file + " (mode 0600)");
    }
    head_options.token_file = elastic.token_file;
  }
  runtime::Head head(head_options);
  Say("driver: head listening on " + elastic.listen + ":" + std::to_string(head.port()) +
      (elastic.token_file.empty() ? " (random token; other machines cannot join without "
                                    "--token-file)"
                                  : " (token in " + elastic.token_file + ")"));

  runtime::HeadClientOptions client_options;
  client_options.host = LocalHostFor(elastic.listen);
  client_options.port = head.port();
  client_options.token = head.token();
  client_options.name = "driver";
  client_options.transport = TransportFor(elastic);
  runtime::HeadClient kv(client_options);
  kv.Put(JobKey::kArgs, JoinJobArgs(args));

  Controller controller(elastic, train, head, kv, metrics);
  kv.Subscribe([&controller](const MembershipUpdate& update) { controller.OnUpdate(update); });

  runtime::NodeAgentOptions agent_options;
  agent_options.head_host = client_options.host;
  agent_options.head_port = head.port();
  agent_options.token = head.token();
  agent_options.name = "driver-node";
  agent_options.transport = TransportFor(elastic);  // passed on to its workers
  agent_options.grace =
      std::chrono::milliseconds(static_cast<int64_t>((elastic.drain_timeout + 60) * 1000));
  runtime::NodeAgent agent(agent_options);
  agent.SpawnWorkers(static_cast<uint32_t>(elastic.workers));
  Say("driver: started " + std::to_string(elastic.workers) + " workers on node " +
      std::to_string(agent.node_id()));

  const int code = controller.Run();
  if (controller.started()) {
    try {
      Say("driver: report " +
          metrics.WriteReport(RunDirectory(elastic),
                              "cifar: " + train.model + " on " + train.dataset));
    } catch (const std::exception& e) {
      Say(std::string("driver: warning: no report: ") + e.what());
    }
  }
  if (!agent.WaitForWorkers(std::chrono::seconds(60))) {
    Say("driver: workers did not exit within 60 s; stopping them");
    agent.StopWorkers();
  }
  metrics.AwaitFinalScrape();
  return code;
}

int RunJoin(const ElasticOptions& elastic) {
  std::string host;
  uint16_t port = 0;
  ParseHostPort(elastic.join, &host, &port);
  runtime::NodeAgent::BlockTerminationSignals();
  runtime::NodeAgentOptions options;
  options.head_host = host;
  options.head_port = port;
  options.token = runtime::ReadTokenFile(elastic.token_file);
  char hostname[256] = "node";
  ::gethostname(hostname, sizeof(hostname) - 1);
  options.name = std::string("join@") + hostname;
  options.transport = TransportFor(elastic);  // passed on to its workers
  options.grace =
      std::chrono::milliseconds(static_cast<int64_t>((elastic.drain_timeout + 60) * 1000));
  runtime::NodeAgent agent(options);
  agent.SpawnWorkers(static_cast<uint32_t>(elastic.workers));
  Say("join: node " + std::to_string(agent.node_id()) + " added " +
      std::to_string(elastic.workers) + " workers to " + elastic.join +
      "; they enter at the next epoch boundary. SIGTERM here drains them.");
  return agent.RunUntilSignalled();
}

int RunElastic(const ElasticOptions& elastic, const TrainOptions& train,
               const std::vector<std::string>& args) {
  try {
    if (elastic.role == "worker") return RunWorker();
    if (!elastic.join.empty()) return RunJoin(elastic);
    return RunDriver(elastic, train, args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cifar: error: %s\n", e.what());
    return kExitError;
  }
}

}  // namespace elastic::trainer
