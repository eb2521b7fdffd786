#include "trainer/elastic/controller/run_events.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "trainer/elastic/controller/overloaded.h"

namespace elastic::trainer {
namespace {

using Json = nlohmann::ordered_json;

Json Point(const StatePoint& p) {
  return Json{{"epoch", p.epoch}, {"position", p.position}, {"step", p.step}};
}

const char* SourceName(SourceKind kind) {
  switch (kind) {
    case SourceKind::kFresh:
      return "fresh";
    case SourceKind::kResume:
      return "resume";
    case SourceKind::kMember:
      return "member";
    case SourceKind::kControllerCopy:
      return "controller_copy";
    case SourceKind::kCheckpoint:
      return "checkpoint";
  }
  return "unknown";
}

// A 64-bit checksum as 16 hex digits: JSON numbers are exact only to 2^53.
std::string Hex(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016" PRIx64, value);
  return text;
}

// One function an event: its name and its fields, in the order docs/events.md lists them.
void Fill(const run_event::Start& e, Json& j) {
  j["event"] = "start";
  j["format"] = kEventsFormat;
  j["job_id"] = e.job_id;
  j["taken_over"] = e.taken_over;
  j["model"] = e.model;
  j["dataset"] = e.dataset;
  j["epochs"] = e.epochs;
  j["workers"] = e.workers;
  j["metric"] = e.metric;
  j["head"] = e.head;
  j["metrics_url"] = e.metrics_url;
}
void Fill(const run_event::View& e, Json& j) {
  j["event"] = "view";
  j["generation"] = e.generation;
  j["members"] = e.members;
  j["reason"] = e.reason;
}
void Fill(const run_event::Generation& e, Json& j) {
  j["event"] = "generation";
  j["generation"] = e.generation;
  j["members"] = e.members;
  j["world"] = e.members.size();
  j["source"] = SourceName(e.source.kind);
  j["source_rank"] = e.source.rank;
  j["restores"] = Point(e.source.point);
  j["reason"] = e.reason;
  j["stop"] = e.stop;
}
void Fill(const run_event::Params& e, Json& j) {
  j["event"] = "params";
  j["generation"] = e.generation;
  j["member"] = e.member;
  j["rank"] = e.rank;
  j["world"] = e.world;
  j["checksum"] = Hex(e.checksum);
  j["point"] = Point(e.point);
  j["pid"] = e.pid;
}
void Fill(const run_event::Join& e, Json& j) {
  j["event"] = "join";
  j["member"] = e.member;
  j["node"] = e.node;
  j["holds"] = e.holds ? Point(*e.holds) : Json(nullptr);
  j["pid"] = e.pid;
  j["address"] = e.address;
  j["step"] = e.step;
}
void Fill(const run_event::Leave& e, Json& j) {
  j["event"] = "leave";
  j["member"] = e.member;
  j["node"] = e.node;
  j["reason"] = e.reason;
  j["detail"] = e.detail;
}
void Fill(const run_event::Draining& e, Json& j) {
  j["event"] = "draining";
  j["member"] = e.member;
  j["reason"] = e.reason;
}
void Fill(const run_event::Fault& e, Json& j) {
  j["event"] = "fault";
  j["generation"] = e.generation;
  j["member"] = e.member;
  j["reason"] = e.reason;
  j["state_unavailable"] = e.state_unavailable;
}
void Fill(const run_event::Commit& e, Json& j) {
  j["event"] = "commit";
  j["generation"] = e.generation;
  j["point"] = Point(e.point);
  j["member"] = e.member;
  j["stop"] = e.stop;
}
void Fill(const run_event::Shares& e, Json& j) {
  j["event"] = "shares";
  j["generation"] = e.generation;
  j["point"] = Point(e.point);
  j["step_samples"] = e.step_samples;
  Json workers = Json::array();
  for (const run_event::Shares::Worker& w : e.workers)
    workers.push_back(
        {{"member", w.member}, {"share", w.share}, {"speed", w.speed}, {"slowdown", w.slowdown}});
  j["workers"] = workers;
}
void Fill(const run_event::ControllerCopy& e, Json& j) {
  j["event"] = "controller_copy";
  j["point"] = Point(e.point);
  j["file"] = e.file;
}
void Fill(const run_event::Checkpoint& e, Json& j) {
  j["event"] = "checkpoint";
  j["point"] = Point(e.point);
  j["path"] = e.path;
  j["writer"] = e.from_controller_copy ? "controller" : "worker";
}
void Fill(const run_event::FirstStep& e, Json& j) {
  j["event"] = "first_step";
  j["generation"] = e.generation;
  j["world"] = e.world;
  j["seconds"] = e.seconds;
}
void Fill(const run_event::Epoch& e, Json& j) {
  j["event"] = "epoch";
  j["epoch"] = e.epoch;
  j["epochs"] = e.epochs;
  j["world"] = e.world;
  j["train_loss"] = e.train_loss;
  j["train_metric"] = e.train_metric;
  j["test_loss"] = e.test_loss;
  j["test_metric"] = e.test_metric;
  j["samples_per_second"] = e.samples_per_second;
  j["tokens_per_second"] = e.tokens_per_second;
  j["seconds"] = e.seconds;
  j["arithmetic"] = e.arithmetic;
  j["learning_rate"] = e.learning_rate;
}
void Fill(const run_event::Evaluation& e, Json& j) {
  j["event"] = "evaluation";
  j["step"] = e.step;
  j["epoch"] = e.epoch;
  j["epoch_fraction"] = e.epoch_fraction;
  j["world"] = e.world;
  j["test_loss"] = e.test_loss;
  j["test_metric"] = e.test_metric;
  j["seconds"] = e.seconds;
}
void Fill(const run_event::Done& e, Json& j) {
  j["event"] = "done";
  j["generation"] = e.generation;
  j["epochs"] = e.epochs;
  j["steps"] = e.steps;
  j["test_metric"] = e.test_metric;
  j["early_stop"] = e.early_stop;
}
void Fill(const run_event::Blacklisted& e, Json& j) {
  j["event"] = "blacklisted";
  j["node"] = e.node;
  j["seconds"] = e.seconds;
  j["failures"] = e.failures;
}
void Fill(const run_event::Unblacklisted& e, Json& j) {
  j["event"] = "unblacklisted";
  j["node"] = e.node;
}
void Fill(const run_event::Stalled& e, Json& j) {
  j["event"] = "stalled";
  j["seconds"] = e.seconds;
}
void Fill(const run_event::BelowMinWorkers& e, Json& j) {
  j["event"] = "below_min_workers";
  j["workers"] = e.workers;
  j["min_workers"] = e.min_workers;
}
void Fill(const run_event::NoWorkers& e, Json& j) {
  j["event"] = "no_workers";
  j["source"] = SourceName(e.source.kind);
  j["restores"] = Point(e.source.point);
}
void Fill(const run_event::Error& e, Json& j) {
  j["event"] = "error";
  j["kind"] = e.kind;
  j["message"] = e.message;
}
void Fill(const run_event::End& e, Json& j) {
  j["event"] = "end";
  j["exit_code"] = e.exit_code;
  j["reason"] = e.reason;
  j["outcome"] = e.exit_code == kExitOk        ? "done"
                 : e.exit_code == kExitStopped ? "stopped"
                                               : "error";
}

using Logged = std::optional<RunEvent>;

Logged Nothing() { return std::nullopt; }

double SecondsOf(int64_t ms) { return static_cast<double>(ms) / 1000.0; }

// An error notice's event: its kind, and its line without the prefix.
Logged ErrorOf(const char* kind, const Notice& notice) {
  static const std::string kPrefix = "driver: error: ";
  std::string message = RenderNotice(notice);
  if (message.rfind(kPrefix, 0) == 0) message.erase(0, kPrefix.size());
  return run_event::Error{kind, message};
}

}  // namespace

std::optional<RunEvent> EventOfNotice(const Notice& notice) {
  // One line a notice kind and no generic case: a notice added to Notice
  // without its line here does not compile.
  return std::visit(
      Overloaded{
          [](const notice::NodeBlacklisted& n) -> Logged {
            return run_event::Blacklisted{n.node, SecondsOf(n.for_ms), n.failures};
          },
          [](const notice::NodeForgiven& n) -> Logged { return run_event::Unblacklisted{n.node}; },
          [](const notice::AdmittingBlacklisted&) { return Nothing(); },
          [](const notice::EveryWorkerGone& n) -> Logged { return run_event::NoWorkers{n.source}; },
          [](const notice::RestoresOlder&) { return Nothing(); },
          [](const notice::StartsFromSeed&) { return Nothing(); },
          [](const notice::WorkerLeaving&) { return Nothing(); },
          [](const notice::EveryoneLeavingWithCopy&) { return Nothing(); },
          [](const notice::EveryoneLeavingWithoutCopy&) { return Nothing(); },
          [](const notice::StateUnavailable&) { return Nothing(); },
          [&](const notice::ResumeUnreadable&) { return ErrorOf("resume_unreadable", notice); },
          [&](const notice::CollectivesKeptFailing&) {
            return ErrorOf("collectives_failing", notice);
          },
          [](const notice::FaultReported&) { return Nothing(); },
          [](const notice::StopAtEpochBoundary&) { return Nothing(); },
          [](const notice::StopAtNextCommit&) { return Nothing(); },
          [](const notice::StoppedBeforeTraining&) { return Nothing(); },
          [&](const notice::WorkersExitedBeforeJoining&) {
            return ErrorOf("workers_exited", notice);
          },
          [&](const notice::StartTimedOut&) { return ErrorOf("start_timeout", notice); },
          [&](const notice::TooFewCameBack&) { return ErrorOf("too_few_came_back", notice); },
          [](const notice::NewestNotBack&) { return Nothing(); },
          [](const notice::WorkersCameBack&) { return Nothing(); },
          [](const notice::BelowMinimum& n) -> Logged {
            return run_event::BelowMinWorkers{n.workers, n.min_workers};
          },
          [&](const notice::BelowMinimumTooLong&) { return ErrorOf("below_min_workers", notice); },
          [](const notice::JoinWindowOpened&) { return Nothing(); },
          [](const notice::NoWorkerForCheckpoint&) { return Nothing(); },
          [&](const notice::StateLost&) { return ErrorOf("state_lost", notice); },
          [](const notice::StallNoticed& n) -> Logged {
            return run_event::Stalled{SecondsOf(n.gap_ms)};
          },
          [](const notice::WaitingAfterStall&) { return Nothing(); },
      },
      notice);
}

std::string RenderEvent(const RunEvent& event, int64_t unix_ms) {
  // "event" first, then the time, then the event's own fields (an ordered
  // object keeps a key where it was first set).
  Json line;
  line["event"] = nullptr;
  line["unix_ms"] = unix_ms;
  std::visit([&](const auto& e) { Fill(e, line); }, event);
  // A NaN or infinite loss is written as null (JSON has no such numbers);
  // invalid UTF-8 in a reason is replaced rather than thrown on.
  return line.dump(-1, ' ', false, Json::error_handler_t::replace);
}

EventLog::EventLog(const std::string& path, Warn warn) : path_(path), warn_(std::move(warn)) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code error;
  if (!parent.empty()) std::filesystem::create_directories(parent, error);
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw std::runtime_error("cannot open the event log " + path + ": " + std::strerror(errno) +
                             (error ? " (creating its directory: " + error.message() + ")" : ""));
  }
}

EventLog::~EventLog() {
  if (fd_ >= 0) ::close(fd_);
}

void EventLog::Append(const RunEvent& event) {
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  const std::string line = RenderEvent(event, now) + "\n";
  ssize_t written;
  do {
    written = ::write(fd_, line.data(), line.size());
  } while (written < 0 && errno == EINTR);
  if (written == static_cast<ssize_t>(line.size())) {
    if (failing_) warn_("the event log " + path_ + " is written again");
    failing_ = false;
    return;
  }
  // A short write (a full disk) leaves part of a line: end it, so that the
  // next line starts on its own and a reader skips only the broken one.
  const std::string why = written < 0 ? std::strerror(errno) : "short write (disk full?)";
  if (written > 0) (void)!::write(fd_, "\n", 1);
  if (!failing_) warn_("warning: events not written to " + path_ + ": " + why);
  failing_ = true;
}

namespace {

double NumberOr(const Json& j, const char* key, double otherwise) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : otherwise;
}

}  // namespace

monitoring::RunSeries SeriesFromEvents(const std::string& path) {
  using monitoring::MembershipChangeReason;
  monitoring::RunSeries series;
  std::ifstream in(path);
  std::optional<int64_t> start_ms;
  int64_t last_ms = 0;
  std::optional<std::set<uint64_t>> members;  // of the last view
  std::set<uint64_t> draining;                // asked to leave: their going is a leave
  for (std::string line; std::getline(in, line);) try {
      const Json e = Json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!e.is_object() || !e.contains("event") || !e.contains("unix_ms")) continue;
      const std::string name = e["event"].is_string() ? e["event"].get<std::string>() : "";
      const int64_t ms = e["unix_ms"].is_number() ? e["unix_ms"].get<int64_t>() : last_ms;
      if (!start_ms) start_ms = ms;
      last_ms = ms;
      const double seconds = static_cast<double>(ms - *start_ms) / 1000.0;
      if (name == "draining") {
        draining.insert(e["member"].get<uint64_t>());
      } else if (name == "view") {
        const std::set<uint64_t> now = e["members"].get<std::set<uint64_t>>();
        if (members && now == *members) continue;
        // Who went tells why: a member that asked to leave left; any other
        // that went failed. Otherwise someone joined.
        std::optional<MembershipChangeReason> reason;
        if (members) {
          bool failed = false, left = false, joined = false;
          for (uint64_t id : *members)
            if (now.count(id) == 0) (draining.count(id) > 0 ? left : failed) = true;
          for (uint64_t id : now) joined |= members->count(id) == 0;
          if (joined) reason = MembershipChangeReason::kJoin;
          if (left) reason = MembershipChangeReason::kLeave;
          if (failed) reason = MembershipChangeReason::kFailure;
        }
        series.world.push_back(
            {seconds, static_cast<int64_t>(now.size()), e["generation"].get<int64_t>(), reason});
        members = now;
      } else if (name == "shares") {
        monitoring::ShareChange change;
        change.seconds = seconds;
        change.generation = e["generation"].get<int64_t>();
        change.step_samples = e["step_samples"].get<int64_t>();
        for (const Json& w : e["workers"])
          change.workers.push_back(
              {w["member"].get<uint64_t>(), w["share"].get<int64_t>(), NumberOr(w, "slowdown", 0)});
        series.shares.push_back(change);
      } else if (name == "epoch") {
        monitoring::EpochRecord r;
        r.epoch = e["epoch"].get<int64_t>();
        r.train_loss = NumberOr(e, "train_loss", std::numeric_limits<double>::quiet_NaN());
        r.train_accuracy = NumberOr(e, "train_metric", 0);
        r.test_accuracy = NumberOr(e, "test_metric", std::numeric_limits<double>::quiet_NaN());
        r.images_per_second = NumberOr(e, "samples_per_second", 0);
        r.tokens_per_second = NumberOr(e, "tokens_per_second", 0);
        r.learning_rate = NumberOr(e, "learning_rate", 0);
        r.world_size = e["world"].get<int64_t>();
        r.seconds = seconds;
        series.epochs.push_back(r);
      }
    } catch (const Json::exception&) {
      continue;  // an event without the fields of its kind: not one this reader can use
    }
  series.duration_seconds = start_ms ? static_cast<double>(last_ms - *start_ms) / 1000.0 : 0;
  return series;
}

}  // namespace elastic::trainer
