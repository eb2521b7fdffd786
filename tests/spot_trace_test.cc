// The short version of bench/spot_trace_bench.py as a test of behaviour: the
// first hour of the AWS p3 spot trace (bench/traces/p3-trace.csv) replayed 60x
// faster against our trainer only, its 32 machines scaled to at most 4 node
// agents of one worker each under a controller-only driver: agents start
// (joins) and are killed with SIGKILL (preemptions) as the trace says. After
// the replay the bench stops the job as an operator does (SIGTERM to the
// driver: it stops at the next epoch boundary with a checkpoint, exit 3).
// Nothing here depends on speed; the test asserts that
// - the replay joined a node into a running job and killed one while it trained;
// - the job stopped in its expected state (exit 3, a checkpoint of the last commit);
// - in every generation every rank synced to one parameter checksum;
// - every sample of every epoch the driver finished was trained on exactly once,
//   counting only the steps no later restore rolled back.
// Every process's log, the workers' sample logs and the bench's JSON are kept
// in the test's undeclared outputs (bazel-testlogs/tests/spot_trace_test/
// test.outputs).
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "testing/required_input.h"
#include "tests/elastic_job.h"
#include "tests/job_checks.h"
#include "tests/job_events.h"
#include "tests/process.h"

namespace elastic::tests {
namespace {

constexpr char kPython[] = "/usr/bin/python3";  // the interpreter with Debian's torch
constexpr char kBench[] = "bench/spot_trace_bench.py";
constexpr char kTrace[] = "bench/traces/p3-trace.csv";
constexpr int kRecordBytes = 3073;  // CIFAR-10 binary: a label and 32x32x3 pixels

std::string CifarDir() {
  const char* dir = std::getenv("ELASTIC_CIFAR10_SUBSET");
  return dir != nullptr && std::filesystem::exists(std::string(dir) + "/data_batch_1.bin") ? dir
                                                                                           : "";
}

// Training images in the data set's data_batch_*.bin files.
int64_t TrainSamples(const std::string& dir) {
  int64_t records = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("data_batch_", 0) == 0 && entry.path().extension() == ".bin")
      records += static_cast<int64_t>(entry.file_size()) / kRecordBytes;
  }
  return records;
}

// Every log the bench kept for our side, concatenated.
std::string KeptLogs(const std::string& dir) {
  std::string all;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().extension() == ".log") all += ReadFile(entry.path().string());
  return all;
}

TEST(SpotTraceTest, TheFirstHourOfTheP3TraceKeepsTheJobsInvariants) {
  ELASTIC_REQUIRE_INPUT(!CifarDir().empty(), "ELASTIC_CIFAR10_SUBSET does not name the subset");
  ELASTIC_REQUIRE_INPUT(std::filesystem::exists(kPython), kPython << " (tools/setup.sh)");
  const char* outputs = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  const std::string dir =
      outputs != nullptr ? std::string(outputs) + "/spot-trace" : FreshTempDir("spot-trace");
  std::filesystem::create_directories(dir);
  const std::string logs = dir + "/logs";
  const std::string result_file = dir + "/result.json";
  const std::string command = std::string(kPython) + " " + kBench + " --trace " + kTrace +
                              " --ours " + kBinary + " --data-dir " + CifarDir() +
                              " --systems ours --until-ms 3600000 --speedup 60 --max-workers 4"
                              " --finish --no-ideal --keep-logs " +
                              logs + " --json " + result_file + " 2>&1";
  std::cout << command << std::endl;
  bool ok = false;
  const std::string bench_output = RunShell(command, &ok);
  std::cout << bench_output << std::endl;
  ASSERT_TRUE(ok) << bench_output;

  const nlohmann::json result = nlohmann::json::parse(ReadFile(result_file));
  const nlohmann::json& ours = result.at("ours");
  const std::string driver = ReadFile(logs + "/ours/driver.log");
  const std::string output = KeptLogs(logs + "/ours");
  const JobEvents events = JobEvents::Read(logs + "/ours/run");  // the bench's --run-dir
  // The replay did what the trace says: the first hour starts 3 agents, adds
  // a fourth, then removes two.
  EXPECT_GE(ours.at("adds").get<int>(), 4) << ours.dump();
  EXPECT_GE(ours.at("removes").get<int>(), 2) << ours.dump();
  EXPECT_GE(ours.at("joins_admitted").get<int>(), 1) << ours.dump();
  EXPECT_GE(ours.at("kills_while_training").get<int>(), 1) << ours.dump();
  // Stopped by the operator's SIGTERM at an epoch boundary, with a checkpoint
  // of the last commit.
  EXPECT_EQ(ours.at("driver_exit"), 3) << WithoutProgress(driver);
  const JobEvent end = events.Last("end");
  ASSERT_FALSE(end.is_null()) << events.Text();
  EXPECT_EQ(end["outcome"], "stopped") << events.Text();
  const JobEvent checkpoint = events.Last("checkpoint");
  const JobEvent commit = events.Last("commit");
  ASSERT_FALSE(checkpoint.is_null()) << events.Text();
  ASSERT_FALSE(commit.is_null()) << events.Text();
  EXPECT_EQ(checkpoint["point"], commit["point"]) << "the checkpoint is of the last commit\n"
                                                  << events.Text();
  // The state was never declared lost.
  for (const JobEvent& e : events.Of("error"))
    EXPECT_NE(e["kind"], "state_lost") << e.dump() << "\n" << WithoutProgress(output);

  ExpectOneChecksumPerGeneration(events);
  const int epochs = LastEpoch(events);
  ASSERT_GE(epochs, 1) << events.Text();
  ExpectEverySampleOnce(logs + "/ours/samples", TrainSamples(CifarDir()), epochs);
}

}  // namespace
}  // namespace elastic::tests
