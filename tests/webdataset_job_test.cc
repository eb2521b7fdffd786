// WebDataset shards as a real job reads them: the CIFAR-10 subset written by
// Python's tarfile (tests/write_webdataset.py) as 20 shards of 256 PNG
// samples, trained by a two-worker job of //trainer:cifar through a kill -9
// of a worker and a joining node, against the binary files on the same
// recipe. Every sample once per epoch, one checksum per generation, and the
// binary files' accuracy within 3 points (why not 1.5: the comment there).
//
// Each process writes its WebDataset counters (ELASTIC_WEBDATASET_COUNTERS)
// to a file of its pid: the driver scans every shard once; the workers and
// the joiner's worker read the pinned index (no listing, no tar header), and
// map only the shards their samples are in, each once. The job trains on
// the first 3072 samples (--train-samples), the first 12 training shards:
// no worker ever maps one of the other 4.
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/elastic_job.h"
#include "tests/job_checks.h"
#include "tests/process.h"

namespace {

namespace fs = std::filesystem;
using elastic::tests::ExpectEverySampleOnce;
using elastic::tests::ExpectOneChecksumPerGeneration;
using elastic::tests::FreshTempDir;
using elastic::tests::HeadPort;
using elastic::tests::kBinary;
using elastic::tests::Process;
using elastic::tests::ReadFile;
using elastic::tests::RunShell;
using elastic::tests::WaitForStep;
using elastic::tests::WithoutProgress;
using elastic::tests::WorkerPid;
using elastic::tests::WorkersStartedBy;

constexpr char kPython[] = "/usr/bin/python3";
constexpr char kWriter[] = "tests/write_webdataset.py";
constexpr int kEpochs = 4;
constexpr int kShardSize = 256;
constexpr int64_t kTrainSamples = 3072;  // --train-samples: shards 0..11 of the training split
constexpr int kUsedTrainShards = kTrainSamples / kShardSize;
constexpr int kShards = 16 + 4;  // 4068 training samples, 1017 test samples
constexpr int64_t kMembers = 2 * (4068 + 1017);

// The subset is a test input: without it the test fails, saying where it looked.
std::string CifarDir() {
  const char* dir = std::getenv("ELASTIC_CIFAR10_SUBSET");
  return dir != nullptr && fs::exists(std::string(dir) + "/test_batch.bin") ? dir : "";
}

double FinalAccuracy(const std::string& output) {
  std::smatch m;
  if (!std::regex_search(output, m, std::regex("done: .*test accuracy ([0-9.]+)%"))) return -1;
  return std::stod(m[1]);
}

// The recipe both jobs train with, their samples logged in dir/NAME-samples.
std::vector<std::string> Recipe(const std::string& dir, const std::string& name) {
  return {kBinary,
          "--workers=2",
          "--model=resnet8",
          "--epochs=" + std::to_string(kEpochs),
          "--train-samples=" + std::to_string(kTrainSamples),
          "--batch-size=32",
          "--lr=0.05",
          "--warmup-epochs=0",
          "--loader-threads=1",
          "--log-every=1",
          "--commit-every=8",
          "--seed=1",
          "--token-file=" + dir + "/token",
          "--log-samples=" + dir + "/" + name + "-samples"};
}

struct Counters {
  std::string index;  // pinned, current or built
  int64_t listings = -1;
  int64_t scanned = -1;
  int64_t headers = -1;
  int64_t decodes = -1;
  std::vector<std::string> opened;
};

// The counters each process wrote into `dir`, by pid.
std::map<pid_t, Counters> ReadCounters(const std::string& dir) {
  const std::regex re(
      "\\{\"pid\": (\\d+), \"index\": \"(\\w*)\", \"listings\": (\\d+), \"shards_scanned\": "
      "(\\d+), \"headers_read\": (\\d+), \"statistics_decodes\": (\\d+), \"indexes_built\": "
      "\\d+, \"shard_opens\": \\d+, \"opened\": \\[([^\\]]*)\\]");
  const std::regex quoted("\"([^\"]+)\"");
  std::map<pid_t, Counters> out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    const std::string text = ReadFile(entry.path().string());
    std::smatch m;
    if (!std::regex_search(text, m, re)) continue;
    Counters c{m[2], std::stoll(m[3]), std::stoll(m[4]), std::stoll(m[5]), std::stoll(m[6]), {}};
    const std::string list = m[7];
    for (auto it = std::sregex_iterator(list.begin(), list.end(), quoted);
         it != std::sregex_iterator(); ++it) {
      c.opened.push_back((*it)[1]);
    }
    out[static_cast<pid_t>(std::stol(m[1]))] = c;
  }
  return out;
}

// A training process: it read the index the driver pinned and did nothing
// else to the shards, and mapped each shard it read at most once, never a
// training shard beyond --train-samples.
void ExpectPinnedAndLazy(const std::map<pid_t, Counters>& counters, pid_t pid,
                         const std::string& who) {
  const auto it = counters.find(pid);
  ASSERT_NE(it, counters.end()) << who << " pid " << pid << " wrote no counters";
  const Counters& c = it->second;
  EXPECT_EQ(c.index, "pinned") << who;
  EXPECT_EQ(c.listings, 0) << who;
  EXPECT_EQ(c.scanned, 0) << who;
  EXPECT_EQ(c.headers, 0) << who;
  EXPECT_EQ(c.decodes, 0) << who;
  EXPECT_FALSE(c.opened.empty()) << who << " read no sample";
  EXPECT_EQ(std::set<std::string>(c.opened.begin(), c.opened.end()).size(), c.opened.size())
      << who << " mapped a shard twice";
  for (const std::string& shard : c.opened) {
    int number = -1;
    if (std::sscanf(shard.c_str(), "train/shard-%d.tar", &number) == 1) {
      EXPECT_LT(number, kUsedTrainShards) << who << " mapped " << shard << ", which holds none "
                                          << "of the job's " << kTrainSamples << " samples";
    }
  }
}

TEST(WebDatasetJobTest, TrainsThroughAKillAndAJoinToTheAccuracyOfTheBinaryFiles) {
  ASSERT_FALSE(CifarDir().empty())
      << "ELASTIC_CIFAR10_SUBSET must name the CIFAR-10 subset (../shared/data/cifar10-subset)";
  const std::string dir = FreshTempDir("webdataset-job");
  const std::string data = dir + "/wds";
  bool ok = false;
  const std::string command = std::string(kPython) + " " + kWriter + " " + CifarDir() + " " + data +
                              " --shard-size " + std::to_string(kShardSize);
  const std::string written = RunShell(command, &ok);
  ASSERT_TRUE(ok) << command << ": " << written;
  // Nothing of the job may land in the home directory's cache.
  ::setenv("ELASTIC_CACHE", (dir + "/cache").c_str(), 1);
  const std::string counters_dir = dir + "/counters";
  fs::create_directories(counters_dir);
  ::setenv("ELASTIC_WEBDATASET_COUNTERS", counters_dir.c_str(), 1);

  std::vector<std::string> binary_args = Recipe(dir, "binary");
  binary_args.push_back("--data-dir=" + CifarDir());
  Process binary(binary_args, dir + "/binary.log");
  ASSERT_EQ(binary.Wait(std::chrono::seconds(900)), 0) << WithoutProgress(binary.Output());
  ExpectEverySampleOnce(dir + "/binary-samples", kTrainSamples, kEpochs);
  const double binary_accuracy = FinalAccuracy(binary.Output());
  EXPECT_GT(binary_accuracy, 30) << "resnet8 learnt too little for the comparison to mean anything";

  std::vector<std::string> args = Recipe(dir, "wds");
  args.push_back("--dataset=webdataset");
  args.push_back("--data-dir=" + data);
  Process driver(args, dir + "/driver.log");
  const std::string port = HeadPort(driver);
  ASSERT_FALSE(port.empty()) << WithoutProgress(driver.Output());
  const pid_t victim = WorkerPid(driver, 1, 1);
  ASSERT_GT(victim, 0) << WithoutProgress(driver.Output());
  ASSERT_TRUE(WaitForStep(driver, 1, 20)) << WithoutProgress(driver.Output());
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  Process joiner(
      {kBinary, "--join=127.0.0.1:" + port, "--workers=1", "--token-file=" + dir + "/token"},
      dir + "/join.log");
  ASSERT_EQ(driver.Wait(std::chrono::seconds(900)), 0)
      << WithoutProgress(driver.Output()) << WithoutProgress(joiner.Output());
  EXPECT_EQ(joiner.Wait(std::chrono::seconds(60)), 0) << WithoutProgress(joiner.Output());
  const std::string output = driver.Output() + joiner.Output();
  EXPECT_NE(
      output.find("webdataset " + data + ": indexing " + std::to_string(kShards) + " shards, once"),
      std::string::npos)
      << WithoutProgress(output);
  // The joiner trained: a generation after the kill's had two members again.
  EXPECT_TRUE(
      std::regex_search(output, std::regex("params generation=([3-9]|\\d\\d+) rank=1 world=2")))
      << WithoutProgress(output);
  ExpectOneChecksumPerGeneration(output);
  ExpectEverySampleOnce(dir + "/wds-samples", kTrainSamples, kEpochs);

  const double accuracy = FinalAccuracy(driver.Output());
  std::printf("binary files: test accuracy %.2f%%; webdataset through a kill and a join: %.2f%%\n",
              binary_accuracy, accuracy);
  // The shards hold the binary files' pixels (PNG is lossless) in their
  // order, so both jobs draw the same batches. They differ in the
  // normalisation (measured on 1000 of the images, 0.004 from the full
  // training set's constants that the binary files use) and in the kill and
  // join, and this recipe (4 epochs of 3072 images, 1017 test images)
  // amplifies either into points. Measured, webdataset minus binary at the
  // same seed: without a fault -2.46, -1.77, -2.07, +1.68 (seeds 0-3);
  // through this kill and join -5.51, -4.82, -5.51 (seed 0; -2.56 with the
  // kill at step 30), -1.18, -1.87, -0.69 (seed 1), +0.98, -1.47 (seeds 2, 3); the binary files
  // alone span 36.18 to 38.94 over those seeds. So 1.5 points is inside the noise of one run
  // against one run; 3 is user_data_test's bound. What the comparison is for costs more: statistics
  // from a class-sorted prefix cost an image folder 8.5 points, mislabelled samples more.
  EXPECT_NEAR(accuracy, binary_accuracy, 3) << WithoutProgress(driver.Output());

  const std::map<pid_t, Counters> counters = ReadCounters(counters_dir);
  ASSERT_EQ(counters.count(driver.pid()), 1u) << WithoutProgress(driver.Output());
  const Counters& indexer = counters.at(driver.pid());
  EXPECT_EQ(indexer.index, "built");
  EXPECT_EQ(indexer.listings, 1);
  EXPECT_EQ(indexer.scanned, kShards);
  EXPECT_EQ(indexer.headers, kMembers + kShards);  // every member's header, each end block
  EXPECT_EQ(indexer.decodes, 1000);                // the statistics' sample
  const std::vector<pid_t> workers = WorkersStartedBy(driver.Output());
  EXPECT_EQ(workers.size(), 2u) << WithoutProgress(driver.Output());
  for (pid_t pid : workers) ExpectPinnedAndLazy(counters, pid, "worker " + std::to_string(pid));
  const std::vector<pid_t> joined = WorkersStartedBy(joiner.Output());
  ASSERT_EQ(joined.size(), 1u) << WithoutProgress(joiner.Output());
  ExpectPinnedAndLazy(counters, joined[0], "the joiner's worker");
  EXPECT_EQ(counters.size(), 4u);  // the binary job's processes read no shard
}

}  // namespace
