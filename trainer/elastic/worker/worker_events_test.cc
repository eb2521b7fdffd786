#include "trainer/elastic/worker/worker_events.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace elastic::trainer {
namespace {

std::string TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "worker_events_XXXXXX").string();
  return mkdtemp(pattern.data());
}

TEST(WorkerEventsTest, EventsReadBackInOrderWithTheirValues) {
  const std::string path = WorkerEventsPath(TempDir(), 7);
  {
    WorkerEventLog log(path);
    log.Joined(7, {3, 1, 4, 4242});
    log.Left(7, {3, "failed", 12});
  }
  {
    WorkerEventLog log(path);  // a second open appends (a worker that reconnected)
    log.Joined(7, {5, 0, 2});
    log.Left(7, {5, "done", -1});
  }
  const auto events = ReadWorkerEvents(path);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_FALSE(events[0].is_left);
  EXPECT_EQ(events[0].member_id, 7u);
  EXPECT_EQ(events[0].joined.generation, 3u);
  EXPECT_EQ(events[0].joined.rank, 1);
  EXPECT_EQ(events[0].joined.world, 4);
  EXPECT_EQ(events[0].joined.pid, 4242);
  EXPECT_TRUE(events[1].is_left);
  EXPECT_EQ(events[1].left.generation, 3u);
  EXPECT_EQ(events[1].left.outcome, "failed");
  EXPECT_EQ(events[1].left.superseded_for_ms, 12);
  EXPECT_EQ(events[3].left.outcome, "done");
  EXPECT_EQ(events[3].left.superseded_for_ms, -1);
  EXPECT_GT(events[0].unix_ms, 1700000000000);
  EXPECT_LE(events[0].unix_ms, events[3].unix_ms);
}

// A worker killed while writing leaves a cut last message: the ones before it stand.
TEST(WorkerEventsTest, ACutLastMessageEndsTheListAtTheWholeOnes) {
  const std::string path = WorkerEventsPath(TempDir(), 1);
  {
    WorkerEventLog log(path);
    log.Joined(1, {2, 0, 2});
    log.Left(1, {2, "change", 3});
  }
  const auto size = std::filesystem::file_size(path);
  for (uintmax_t cut : {size - 1, size - 8, size - 20}) {
    std::filesystem::resize_file(path, cut);
    const auto events = ReadWorkerEvents(path);
    ASSERT_EQ(events.size(), 1u) << "cut at " << cut;
    EXPECT_EQ(events[0].joined.generation, 2u);
  }
}

TEST(WorkerEventsTest, GarbageIsAnErrorNamingTheFile) {
  const std::string path = TempDir() + "/garbage.bin";
  std::ofstream(path) << std::string(64, '\xff');
  try {
    ReadWorkerEvents(path);
    FAIL() << "garbage read as events";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_THROW(ReadWorkerEvents(TempDir() + "/missing.bin"), std::runtime_error);
}

}  // namespace
}  // namespace elastic::trainer
