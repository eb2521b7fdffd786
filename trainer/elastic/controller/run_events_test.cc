#include "trainer/elastic/controller/run_events.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "monitoring/run_report.h"

namespace elastic::trainer {
namespace {

using nlohmann::json;

json Parsed(const RunEvent& event) { return json::parse(RenderEvent(event, 1700000000123)); }

std::string TempDir(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  const std::filesystem::path dir = std::filesystem::path(root ? root : "/tmp") / name;
  std::filesystem::remove_all(dir);
  return dir.string();
}

std::vector<json> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
  return lines;
}

TEST(RunEventsTest, EveryLineStartsWithItsEventAndTime) {
  const std::string line = RenderEvent(run_event::End{0}, 42);
  EXPECT_EQ(line.rfind("{\"event\":\"end\",\"unix_ms\":42,", 0), 0u) << line;
  EXPECT_EQ(line.find('\n'), std::string::npos);
}

TEST(RunEventsTest, AGenerationNamesItsMembersInRankOrderAndItsSource) {
  run_event::Generation g;
  g.generation = 7;
  g.members = {12, 3, 9};
  g.source = StateSource{SourceKind::kMember, 1, StatePoint{2, 640, 45}};
  g.reason = "worker 4 failed";
  const json j = Parsed(g);
  EXPECT_EQ(j["event"], "generation");
  EXPECT_EQ(j["generation"], 7);
  EXPECT_EQ(j["members"], json({12, 3, 9}));
  EXPECT_EQ(j["world"], 3);
  EXPECT_EQ(j["source"], "member");
  EXPECT_EQ(j["source_rank"], 1);
  EXPECT_EQ(j["restores"], json({{"epoch", 2}, {"position", 640}, {"step", 45}}));
  EXPECT_EQ(j["reason"], "worker 4 failed");
  EXPECT_EQ(j["stop"], "");
}

TEST(RunEventsTest, SourcesHaveStableNames) {
  const std::vector<std::pair<SourceKind, std::string>> names = {
      {SourceKind::kFresh, "fresh"},
      {SourceKind::kResume, "resume"},
      {SourceKind::kMember, "member"},
      {SourceKind::kControllerCopy, "controller_copy"},
      {SourceKind::kCheckpoint, "checkpoint"}};
  for (const auto& [kind, name] : names) {
    run_event::Generation g;
    g.source.kind = kind;
    EXPECT_EQ(Parsed(g)["source"], name);
  }
}

TEST(RunEventsTest, AChecksumIsSixteenHexDigitsExactly) {
  // Above 2^53 a JSON number would lose the low bits.
  run_event::Params p;
  p.checksum = 0xfedcba9876543211ull;
  p.rank = 1;
  p.world = 2;
  EXPECT_EQ(Parsed(p)["checksum"], "fedcba9876543211");
  p.checksum = 1;
  EXPECT_EQ(Parsed(p)["checksum"], "0000000000000001");
}

TEST(RunEventsTest, AJoinHoldsNullOrTheCommitItHas) {
  run_event::Join join{5, 2, std::nullopt};
  EXPECT_TRUE(Parsed(join)["holds"].is_null());
  join.holds = StatePoint{1, 2, 3};
  EXPECT_EQ(Parsed(join)["holds"]["step"], 3);
}

TEST(RunEventsTest, AJoinSaysItsProcessAddressAndTheJobsStep) {
  run_event::Join join{5, 2, std::nullopt, 4242, "10.0.0.7", 137};
  const json j = Parsed(join);
  EXPECT_EQ(j["pid"], 4242);
  EXPECT_EQ(j["address"], "10.0.0.7");
  EXPECT_EQ(j["step"], 137);
  EXPECT_EQ(Parsed(run_event::Join{})["address"], "");
}

TEST(RunEventsTest, ALeaveSaysTheHeadsDetail) {
  const json j = Parsed(run_event::Leave{
      3, 1, "failed", "connection lost: no heartbeat for 3012 ms (heartbeat timeout 3000 ms)"});
  EXPECT_EQ(j["reason"], "failed");
  EXPECT_EQ(j["detail"], "connection lost: no heartbeat for 3012 ms (heartbeat timeout 3000 ms)");
  EXPECT_EQ(Parsed(run_event::Leave{})["detail"], "");
}

TEST(RunEventsTest, TheStartSaysWhereTheHeadAndTheMetricsAre) {
  const json j = Parsed(run_event::Start{"job", false, "resnet8", "cifar10", 3, 2, "accuracy",
                                         "127.0.0.1:6380", "http://127.0.0.1:9464/metrics"});
  EXPECT_EQ(j["head"], "127.0.0.1:6380");
  EXPECT_EQ(j["metrics_url"], "http://127.0.0.1:9464/metrics");
  EXPECT_EQ(Parsed(run_event::Start{})["metrics_url"], "");
}

TEST(RunEventsTest, ANonFiniteLossIsNullNotInvalidJson) {
  run_event::Epoch e;
  e.test_loss = std::nan("");
  e.train_loss = INFINITY;
  const json j = Parsed(e);
  EXPECT_TRUE(j["test_loss"].is_null());
  EXPECT_TRUE(j["train_loss"].is_null());
}

TEST(RunEventsTest, TheEndSaysTheOutcomeOfItsExitCode) {
  const json end = Parsed(run_event::End{kExitOk, "the job is done"});
  EXPECT_EQ(end["outcome"], "done");
  EXPECT_EQ(end["reason"], "the job is done");
  EXPECT_EQ(Parsed(run_event::End{kExitStopped})["outcome"], "stopped");
  EXPECT_EQ(Parsed(run_event::End{kExitError})["outcome"], "error");
}

TEST(RunEventsTest, ACheckpointSaysWhoWroteIt) {
  EXPECT_EQ(
      Parsed(run_event::Checkpoint{StatePoint{1, 0, 8}, "/c/checkpoint.ckpt", false})["writer"],
      "worker");
  EXPECT_EQ(
      Parsed(run_event::Checkpoint{StatePoint{1, 0, 8}, "/c/checkpoint.ckpt", true})["writer"],
      "controller");
}

TEST(RunEventsTest, InvalidUtf8InAReasonIsReplacedNotThrownOn) {
  run_event::Fault f;
  f.reason = std::string("peer \xff\xfe closed");
  EXPECT_NO_THROW(Parsed(f));
}

TEST(RunEventsTest, EveryEventHasItsName) {
  const std::vector<std::pair<RunEvent, std::string>> events = {
      {run_event::Start{}, "start"},
      {run_event::View{}, "view"},
      {run_event::Generation{}, "generation"},
      {run_event::Params{}, "params"},
      {run_event::Join{}, "join"},
      {run_event::Leave{}, "leave"},
      {run_event::Draining{}, "draining"},
      {run_event::Fault{}, "fault"},
      {run_event::Commit{}, "commit"},
      {run_event::Shares{}, "shares"},
      {run_event::ControllerCopy{}, "controller_copy"},
      {run_event::Checkpoint{}, "checkpoint"},
      {run_event::FirstStep{}, "first_step"},
      {run_event::Epoch{}, "epoch"},
      {run_event::Evaluation{}, "evaluation"},
      {run_event::Done{}, "done"},
      {run_event::End{}, "end"},
      {run_event::Blacklisted{}, "blacklisted"},
      {run_event::Unblacklisted{}, "unblacklisted"},
      {run_event::Stalled{}, "stalled"},
      {run_event::BelowMinWorkers{}, "below_min_workers"},
      {run_event::NoWorkers{}, "no_workers"},
      {run_event::Error{}, "error"}};
  ASSERT_EQ(events.size(), std::variant_size_v<RunEvent>);
  for (const auto& [event, name] : events) EXPECT_EQ(Parsed(event)["event"], name);
  EXPECT_EQ(Parsed(run_event::Start{})["format"], kEventsFormat);
}

// The notices that are facts are logged with their values; the others are only printed.
TEST(EventOfNoticeTest, ABlacklistingAndItsEnd) {
  const std::optional<RunEvent> on = EventOfNotice(notice::NodeBlacklisted{2, 300000, 3});
  ASSERT_TRUE(on);
  const json j = Parsed(*on);
  EXPECT_EQ(j["event"], "blacklisted");
  EXPECT_EQ(j["node"], 2);
  EXPECT_EQ(j["seconds"], 300.0);
  EXPECT_EQ(j["failures"], 3);
  const std::optional<RunEvent> off = EventOfNotice(notice::NodeForgiven{2});
  ASSERT_TRUE(off);
  EXPECT_EQ(Parsed(*off),
            json::parse(R"({"event":"unblacklisted","unix_ms":1700000000123,"node":2})"));
}

TEST(EventOfNoticeTest, AStallOfTheDriversOwnProcess) {
  const std::optional<RunEvent> e = EventOfNotice(notice::StallNoticed{5040});
  ASSERT_TRUE(e);
  const json j = Parsed(*e);
  EXPECT_EQ(j["event"], "stalled");
  EXPECT_DOUBLE_EQ(j["seconds"].get<double>(), 5.04);
}

TEST(EventOfNoticeTest, BelowMinWorkersAndNoWorkersLeft) {
  const std::optional<RunEvent> below = EventOfNotice(notice::BelowMinimum{1, 2});
  ASSERT_TRUE(below);
  EXPECT_EQ(Parsed(*below)["event"], "below_min_workers");
  EXPECT_EQ(Parsed(*below)["workers"], 1);
  EXPECT_EQ(Parsed(*below)["min_workers"], 2);
  const std::optional<RunEvent> none =
      EventOfNotice(notice::EveryWorkerGone{{SourceKind::kControllerCopy, 0, {1, 512, 40}}});
  ASSERT_TRUE(none);
  const json j = Parsed(*none);
  EXPECT_EQ(j["event"], "no_workers");
  EXPECT_EQ(j["source"], "controller_copy");
  EXPECT_EQ(j["restores"], json({{"epoch", 1}, {"position", 512}, {"step", 40}}));
}

TEST(EventOfNoticeTest, AnErrorThatEndsTheJobHasItsKindAndTheWordsPrinted) {
  const std::vector<std::pair<Notice, std::string>> errors = {
      {notice::ResumeUnreadable{}, "resume_unreadable"},
      {notice::CollectivesKeptFailing{361000, 3, "timeout"}, "collectives_failing"},
      {notice::WorkersExitedBeforeJoining{2}, "workers_exited"},
      {notice::StartTimedOut{1, 3, 120000}, "start_timeout"},
      {notice::TooFewCameBack{1, 2}, "too_few_came_back"},
      {notice::BelowMinimumTooLong{1, 10000, 2}, "below_min_workers"},
      {notice::StateLost{StateLoss::kEveryWorkerLost, StatePoint{1, 512, 40}, 0}, "state_lost"}};
  for (const auto& [notice, kind] : errors) {
    const std::optional<RunEvent> e = EventOfNotice(notice);
    ASSERT_TRUE(e) << kind;
    const json j = Parsed(*e);
    EXPECT_EQ(j["event"], "error");
    EXPECT_EQ(j["kind"], kind);
    EXPECT_EQ("driver: error: " + j["message"].get<std::string>(), RenderNotice(notice));
  }
  EXPECT_EQ(Parsed(*EventOfNotice(notice::BelowMinimumTooLong{1, 10000, 2}))["message"],
            "only 1 workers for 10 s (--rendezvous-timeout), below --min-workers=2; stopping");
}

TEST(EventOfNoticeTest, WhatIsOnlyToldIsNotLogged) {
  EXPECT_FALSE(EventOfNotice(notice::FaultReported{3, 5, "timeout"}));  // the fault event has it
  EXPECT_FALSE(EventOfNotice(notice::WorkerLeaving{4, true}));          // and the draining event
  EXPECT_FALSE(EventOfNotice(notice::StopAtEpochBoundary{"SIGTERM"}));
  EXPECT_FALSE(EventOfNotice(notice::JoinWindowOpened{2, 3000, 4}));
}

TEST(RunEventsTest, TheLogAppendsOneLineAnEventAndASecondLogAppendsAfterIt) {
  const std::string path = TempDir("run_events_append") + "/run/events.jsonl";
  std::vector<std::string> warnings;
  {
    EventLog log(path, [&](const std::string& w) { warnings.push_back(w); });
    log.Append(run_event::Commit{1, StatePoint{0, 64, 4}, 3, false});
    log.Append(run_event::End{kExitStopped});
  }
  {
    // A driver that takes the job over appends to the same file.
    EventLog log(path, [&](const std::string& w) { warnings.push_back(w); });
    log.Append(run_event::Done{2, 3, 30, 0.5, false});
  }
  const std::vector<json> lines = Lines(path);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["event"], "commit");
  EXPECT_EQ(lines[0]["point"]["position"], 64);
  EXPECT_EQ(lines[1]["event"], "end");
  EXPECT_EQ(lines[2]["event"], "done");
  EXPECT_TRUE(warnings.empty());
}

TEST(RunEventsTest, AFullDiskIsSaidOnceAndTrainingGoesOn) {
  std::vector<std::string> warnings;
  EventLog log("/dev/full", [&](const std::string& w) { warnings.push_back(w); });
  for (int i = 0; i < 5; ++i) EXPECT_NO_THROW(log.Append(run_event::Draining{1}));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("events not written to /dev/full"), std::string::npos) << warnings[0];
}

TEST(RunEventsTest, AnUnopenableLogIsAnErrorNamingIt) {
  try {
    EventLog log("/proc/self/no/such/events.jsonl", [](const std::string&) {});
    FAIL() << "opened";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/proc/self/no/such/events.jsonl"), std::string::npos)
        << e.what();
  }
}

// The report's series, read back from a log: a job of two that loses one
// worker to a failure, takes a joiner and lets one go on purpose.
TEST(SeriesFromEventsTest, EpochsAndTheWorldWithWhyItChanged) {
  const std::string path = TempDir("run_events_series") + "/events.jsonl";
  {
    EventLog log(path, [](const std::string&) {});
    log.Append(run_event::Start{"job", false, "gpt.pt", "tokens", 3, 2, "token accuracy"});
    log.Append(run_event::View{1, {1, 2}, "start"});
    run_event::Epoch epoch;
    epoch.epoch = 1;
    epoch.epochs = 3;
    epoch.world = 2;
    epoch.train_loss = 2.5;
    epoch.train_metric = 0.25;
    epoch.test_loss = 2.25;
    epoch.test_metric = 0.3;
    epoch.samples_per_second = 50;
    epoch.tokens_per_second = 3200;
    epoch.learning_rate = 1e-3;
    log.Append(epoch);
    log.Append(run_event::Leave{2, 1, "failed"});
    log.Append(run_event::View{2, {1}, "membership"});
    log.Append(run_event::Join{3, 2, std::nullopt});
    log.Append(run_event::View{3, {1, 3}, "1 joined"});
    log.Append(run_event::View{3, {1, 3}, "membership"});  // no change: no point
    run_event::Shares shares;
    shares.generation = 3;
    shares.point = {0, 640, 10};
    shares.step_samples = 64;
    shares.workers = {{1, 43, 1200.5, 1.0}, {3, 21, 600.25, 2.0}};
    log.Append(shares);
    log.Append(run_event::Draining{3, "6.1x slower than the median for 3 plans"});
    log.Append(run_event::View{4, {1}, "1 left"});
    epoch.epoch = 2;
    epoch.world = 1;
    epoch.test_loss = std::nan("");
    log.Append(epoch);
  }
  // A driver killed mid-write leaves half a line; a reader skips it.
  std::ofstream(path, std::ios::app) << "{\"event\":\"epoch\",\"unix_ms\":17";

  const monitoring::RunSeries series = SeriesFromEvents(path);
  ASSERT_EQ(series.world.size(), 4u);
  EXPECT_EQ(series.world[0].world_size, 2);
  EXPECT_FALSE(series.world[0].reason.has_value());
  EXPECT_EQ(series.world[1].reason, monitoring::MembershipChangeReason::kFailure);
  EXPECT_EQ(series.world[2].reason, monitoring::MembershipChangeReason::kJoin);
  EXPECT_EQ(series.world[3].reason, monitoring::MembershipChangeReason::kLeave);
  EXPECT_EQ(series.world[3].generation, 4);
  ASSERT_EQ(series.epochs.size(), 2u);
  EXPECT_EQ(series.epochs[0].epoch, 1);
  EXPECT_EQ(series.epochs[0].tokens_per_second, 3200);
  EXPECT_EQ(series.epochs[0].learning_rate, 1e-3);
  EXPECT_EQ(series.epochs[0].test_accuracy, 0.3);
  EXPECT_EQ(series.epochs[1].world_size, 1);
  EXPECT_GE(series.duration_seconds, 0);
  ASSERT_EQ(series.shares.size(), 1u);
  EXPECT_EQ(series.shares[0].generation, 3);
  EXPECT_EQ(series.shares[0].step_samples, 64);
  ASSERT_EQ(series.shares[0].workers.size(), 2u);
  EXPECT_EQ(series.shares[0].workers[1].member, 3u);
  EXPECT_EQ(series.shares[0].workers[1].share, 21);
  EXPECT_EQ(series.shares[0].workers[1].slowdown, 2.0);

  monitoring::RunReportOptions options;
  options.title = "gpt";
  std::ifstream in(monitoring::WriteRunReport(series, TempDir("run_events_report"), options));
  std::stringstream html;
  html << in.rdbuf();
  EXPECT_NE(html.str().find("<title>tokens per second at 1: 3200</title>"), std::string::npos);
  EXPECT_NE(html.str().find("<th>mean throughput</th><td>3200.0 tokens/s</td>"), std::string::npos);
  EXPECT_NE(html.str().find("<h2>Shares sized by speed</h2>"), std::string::npos);
  EXPECT_NE(html.str().find("worker 1: 43 (1.0x), worker 3: 21 (2.0x) of 64"), std::string::npos);
}

TEST(SeriesFromEventsTest, NoLogIsAnEmptyRun) {
  const monitoring::RunSeries series = SeriesFromEvents("/nonexistent/events.jsonl");
  EXPECT_TRUE(series.epochs.empty());
  EXPECT_TRUE(series.world.empty());
}

}  // namespace
}  // namespace elastic::trainer
