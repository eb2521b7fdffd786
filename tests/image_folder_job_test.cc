// An image folder of 20,000 small JPEGs is indexed once per job: real jobs of
// //trainer:cifar, a driver with two workers and a joining node. Each process
// writes its image-folder counters (listings, header probes, statistics
// decodes; ELASTIC_IMAGE_FOLDER_COUNTERS) to a file of its pid: the driver
// probes every file, its workers and the joiner's worker probe none and list
// nothing. A second job after a file was added and another removed says so,
// probes the added file alone, and its workers again probe nothing.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/elastic_job.h"
#include "tests/job_checks.h"
#include "tests/process.h"
#include "trainer/data/image_test_files.h"

namespace {

namespace fs = std::filesystem;
using elastic::tests::FreshTempDir;
using elastic::tests::HeadPort;
using elastic::tests::JobEvent;
using elastic::tests::JobEvents;
using elastic::tests::kBinary;
using elastic::tests::Process;
using elastic::tests::ReadFile;
using elastic::tests::WaitForEvent;
using elastic::tests::WithoutProgress;

constexpr int kClasses = 10;
constexpr int kTrainPerClass = 1900;
constexpr int kTestPerClass = 100;
constexpr int kFiles = kClasses * (kTrainPerClass + kTestPerClass);  // 20,000

std::string FileName(int i) {
  char name[16];
  std::snprintf(name, sizeof(name), "%06d.jpg", i);
  return name;
}

// DIR/train and DIR/test of kClasses folders of 16x16 JPEGs: 16 distinct
// images encoded once and copied byte for byte, so that 20,000 files take
// seconds to write. The trainer does not mind that images repeat.
void WriteFolder(const std::string& dir) {
  fs::create_directories(dir);
  std::vector<std::string> images;
  for (int k = 0; k < 16; ++k) {
    const std::string path = dir + "/source.jpg";
    const std::vector<uint8_t> rgb = elastic::trainer::testing::SmoothRgbImage(16, 16, k);
    elastic::trainer::testing::WriteJpeg(path, rgb.data(), 16, 16);
    images.push_back(ReadFile(path));
    fs::remove(path);
  }
  for (const auto& [split, per_class] : {std::pair<std::string, int>{"train", kTrainPerClass},
                                         std::pair<std::string, int>{"test", kTestPerClass}}) {
    for (int k = 0; k < kClasses; ++k) {
      const std::string cls = dir + "/" + split + "/c" + std::to_string(k);
      fs::create_directories(cls);
      for (int i = 0; i < per_class; ++i) {
        std::ofstream(cls + "/" + FileName(i), std::ios::binary) << images[(k * 5 + i) % 16];
      }
    }
  }
}

struct Counters {
  std::string index;  // pinned, current or built
  int64_t listed = -1;
  int64_t probed = -1;
  int64_t decoded = -1;
};

// The counters each process wrote into `dir`, by pid: each file one JSON
// object (trainer/data/image_folder.cc, WriteImageFolderCountersForTests).
std::map<pid_t, Counters> ReadCounters(const std::string& dir) {
  std::map<pid_t, Counters> out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    const nlohmann::json c = nlohmann::json::parse(ReadFile(entry.path().string()));
    out[c.at("pid").get<pid_t>()] =
        Counters{c.at("index").get<std::string>(), c.at("folders_listed").get<int64_t>(),
                 c.at("headers_probed").get<int64_t>(), c.at("statistics_decodes").get<int64_t>()};
  }
  return out;
}

// The job's worker processes `pids` read the index the driver pinned and did
// no other work on the folder.
void ExpectPinnedWithoutWork(const std::map<pid_t, Counters>& counters,
                             const std::vector<pid_t>& pids, const std::string& who) {
  for (pid_t pid : pids) {
    const auto it = counters.find(pid);
    ASSERT_NE(it, counters.end()) << who << " pid " << pid << " wrote no counters";
    EXPECT_EQ(it->second.index, "pinned") << who << " pid " << pid;
    EXPECT_EQ(it->second.listed, 0) << who << " pid " << pid;
    EXPECT_EQ(it->second.probed, 0) << who << " pid " << pid;
    EXPECT_EQ(it->second.decoded, 0) << who << " pid " << pid;
  }
}

// The processes of the workers that joined the job (its "join" events), each
// once: those of the driver's own node (that of generation 1's rank 0) if
// `of_the_driver`, else those of the other nodes.
std::vector<pid_t> WorkersJoined(const JobEvents& events, bool of_the_driver) {
  const std::vector<JobEvent> generations = events.Of("generation");
  if (generations.empty()) return {};
  const JobEvent first = generations.front()["members"][0];
  uint64_t driver_node = 0;
  for (const JobEvent& j : events.Of("join"))
    if (j["member"] == first) driver_node = j["node"].get<uint64_t>();
  std::vector<pid_t> pids;
  for (const JobEvent& j : events.Of("join")) {
    const pid_t pid = j["pid"].get<pid_t>();
    if ((j["node"] == driver_node) == of_the_driver &&
        std::find(pids.begin(), pids.end(), pid) == pids.end())
      pids.push_back(pid);
  }
  return pids;
}

// A job's flags; its event log in `run_dir`.
std::vector<std::string> JobArgs(const std::string& dir, const std::string& data,
                                 const std::string& run_dir) {
  return {kBinary,
          "--workers=2",
          "--model=resnet8",
          "--dataset=image-folder",
          "--data-dir=" + data,
          "--batch-size=32",
          "--lr=0.05",
          "--warmup-epochs=0",
          "--loader-threads=1",
          "--log-every=1",
          "--commit-every=4",
          "--test-samples=100",
          "--token-file=" + dir + "/token",
          "--run-dir=" + run_dir};
}

std::string CountersDir(const std::string& dir, const std::string& run) {
  const std::string path = dir + "/" + run;
  fs::create_directories(path);
  ::setenv("ELASTIC_IMAGE_FOLDER_COUNTERS", path.c_str(), 1);
  return path;
}

TEST(ImageFolderJobTest, TheDriverIndexesOnceAndItsWorkersAndAJoinerReadTheIndex) {
  const std::string dir = FreshTempDir("image-folder-job");
  const std::string data = dir + "/data";
  WriteFolder(data);
  // Nothing of the job may land in the home directory's cache.
  ::setenv("ELASTIC_CACHE", (dir + "/cache").c_str(), 1);

  {
    const std::string counters_dir = CountersDir(dir, "first");
    const std::string run_dir = dir + "/runs/first";
    std::vector<std::string> args = JobArgs(dir, data, run_dir);
    args.push_back("--epochs=3");  // far more than the test waits for: it ends the job itself
    Process driver(args, dir + "/driver.log");
    const std::string port = HeadPort(driver);
    ASSERT_FALSE(port.empty()) << WithoutProgress(driver.Output());
    ASSERT_FALSE(driver.WaitFor("epoch 1/3 step 2/", std::chrono::seconds(300)).empty())
        << WithoutProgress(driver.Output());
    Process joiner(
        {kBinary, "--join=127.0.0.1:" + port, "--workers=1", "--token-file=" + dir + "/token"},
        dir + "/join.log");
    // The joiner's worker trained: the first step of a generation of three.
    const JobEvent three = WaitForEvent(run_dir, std::chrono::seconds(400), [](const JobEvent& e) {
      return e["event"] == "first_step" && e["world"] == 3;
    });
    ASSERT_FALSE(three.is_null()) << JobEvents::Read(run_dir).Text()
                                  << WithoutProgress(driver.Output())
                                  << WithoutProgress(joiner.Output());

    const std::map<pid_t, Counters> counters = ReadCounters(counters_dir);
    ASSERT_EQ(counters.count(driver.pid()), 1u) << WithoutProgress(driver.Output());
    const Counters& indexer = counters.at(driver.pid());
    EXPECT_EQ(indexer.index, "built");
    EXPECT_EQ(indexer.listed, 1);
    EXPECT_EQ(indexer.probed, kFiles);
    EXPECT_EQ(indexer.decoded, 1000);  // the statistics' sample
    EXPECT_NE(driver.Output().find("image-folder " + data + ": indexing 20000 files, once"),
              std::string::npos)
        << WithoutProgress(driver.Output());
    const JobEvents events = JobEvents::Read(run_dir);
    const std::vector<pid_t> workers = WorkersJoined(events, true);
    EXPECT_EQ(workers.size(), 2u) << events.Text();
    ExpectPinnedWithoutWork(counters, workers, "worker");
    const std::vector<pid_t> joined = WorkersJoined(events, false);
    EXPECT_EQ(joined.size(), 1u) << events.Text();
    ExpectPinnedWithoutWork(counters, joined, "joiner's worker");
    EXPECT_EQ(counters.size(), 4u);
  }  // the first job's processes are killed here

  // One file more, one fewer: the next job notices, says what changed and
  // probes only the new file; its workers read the new index.
  fs::copy_file(data + "/train/c3/" + FileName(0), data + "/train/c3/added.jpg");
  fs::remove(data + "/train/c5/" + FileName(7));
  const std::string counters_dir = CountersDir(dir, "second");
  std::vector<std::string> args = JobArgs(dir, data, dir + "/runs/second");
  args.push_back("--max-steps=2");
  Process again(args, dir + "/again.log");
  ASSERT_EQ(again.Wait(std::chrono::seconds(400)), 0) << WithoutProgress(again.Output());
  EXPECT_NE(again.Output().find("image-folder " + data +
                                ": the folder changed since it was indexed (1 file added, 1 "
                                "removed, 0 changed in size); re-indexing 20000 files"),
            std::string::npos)
      << WithoutProgress(again.Output());
  const std::map<pid_t, Counters> counters = ReadCounters(counters_dir);
  ASSERT_EQ(counters.count(again.pid()), 1u) << WithoutProgress(again.Output());
  EXPECT_EQ(counters.at(again.pid()).index, "built");
  EXPECT_EQ(counters.at(again.pid()).probed, 1);
  const JobEvents events = JobEvents::Read(dir + "/runs/second");
  const std::vector<pid_t> workers = WorkersJoined(events, true);
  EXPECT_EQ(workers.size(), 2u) << events.Text();
  ExpectPinnedWithoutWork(counters, workers, "second job's worker");
}

}  // namespace
