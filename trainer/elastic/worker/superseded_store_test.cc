#include "trainer/elastic/worker/superseded_store.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "gtest/gtest.h"

namespace elastic::trainer {
namespace {

using std::chrono::milliseconds;

// An in-memory store whose Wait blocks until the key is put or the timeout.
class MemoryStore : public runtime::KeyValueStore {
 public:
  void Put(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mutex_);
    values_[key] = value;
    changed_.notify_all();
  }
  std::optional<std::string> Get(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = values_.find(key);
    if (it == values_.end()) return std::nullopt;
    return it->second;
  }
  std::string Wait(const std::string& key, milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    ++waits_;
    waited_.notify_all();
    if (!changed_.wait_for(lock, timeout, [&] { return values_.count(key) > 0; }))
      throw runtime::TimeoutError("timeout waiting for " + key);
    return values_[key];
  }
  int waits() {
    std::lock_guard<std::mutex> lock(mutex_);
    return waits_;
  }
  // Blocks until `count` Waits have begun (false after 60 s): a test's other
  // thread acts once the wait it means to interrupt is under way, not after
  // a fixed sleep that a loaded machine can outlast before the wait begins.
  bool AwaitWaits(int count) {
    std::unique_lock<std::mutex> lock(mutex_);
    return waited_.wait_for(lock, std::chrono::seconds(60), [&] { return waits_ >= count; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::condition_variable waited_;
  std::map<std::string, std::string> values_;
  int waits_ = 0;
};

TEST(SupersededStoreTest, PassesValuesThrough) {
  MemoryStore inner;
  SupersededStore store(inner, [] { return false; });
  store.Put("a", "1");
  EXPECT_EQ(inner.Get("a"), "1");
  EXPECT_EQ(store.Get("a"), "1");
  EXPECT_EQ(store.Get("b"), std::nullopt);
  EXPECT_EQ(store.Wait("a", milliseconds(1000)), "1");
}

TEST(SupersededStoreTest, AKeyThatComesLaterIsWaitedForAcrossSlices) {
  MemoryStore inner;
  SupersededStore store(
      inner, [] { return false; }, milliseconds(10));
  std::thread writer([&] {
    // Once the first slice has timed out and the second is waiting.
    EXPECT_TRUE(inner.AwaitWaits(2));
    inner.Put("late", "v");
  });
  EXPECT_EQ(store.Wait("late", milliseconds(10000)), "v");
  writer.join();
  EXPECT_GT(inner.waits(), 1) << "the wait was cut into slices";
}

TEST(SupersededStoreTest, TheTimeoutStillHolds) {
  MemoryStore inner;
  SupersededStore store(
      inner, [] { return false; }, milliseconds(10));
  EXPECT_THROW(store.Wait("never", milliseconds(50)), runtime::TimeoutError);
}

// A member died before writing its key; the newer generation arrives while
// the others wait for it: the wait ends at the next slice, not at the timeout.
TEST(SupersededStoreTest, ANewerGenerationEndsTheWait) {
  MemoryStore inner;
  std::atomic<bool> newer{false};
  SupersededStore store(
      inner, [&] { return newer.load(); }, milliseconds(10));
  std::thread publisher([&] {
    EXPECT_TRUE(inner.AwaitWaits(1));  // the wait is under way
    newer.store(true);
  });
  try {
    store.Wait("dead-member", std::chrono::hours(1));
    FAIL() << "returned";
  } catch (const RendezvousSuperseded& e) {
    EXPECT_NE(std::string(e.what()).find("dead-member"), std::string::npos) << e.what();
  }
  publisher.join();
}

// WaitAll goes to the inner store in slices too (the default WaitAll here:
// one Wait per key), and a newer generation ends it.
TEST(SupersededStoreTest, WaitAllReturnsWhatComesAndStopsForANewerGeneration) {
  MemoryStore inner;
  std::atomic<bool> newer{false};
  SupersededStore store(
      inner, [&] { return newer.load(); }, milliseconds(10));
  inner.Put("a", "0123");
  std::thread writer([&] {
    EXPECT_TRUE(inner.AwaitWaits(2));  // "a" was there; the wait for "b" is under way
    inner.Put("b", "4567");
  });
  const std::vector<std::string> values = store.WaitAll({"a", "b"}, milliseconds(10000), {{1, 2}});
  writer.join();
  EXPECT_EQ(values, (std::vector<std::string>{"12", "56"}));
  try {
    store.WaitAll({"a", "missing"}, milliseconds(50), {});
    FAIL() << "returned";
  } catch (const runtime::MissingKeysError& e) {
    EXPECT_EQ(e.missing(), (std::vector<size_t>{1}));
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos) << e.what();
  }
  const int waits = inner.waits();
  std::thread publisher([&] {
    EXPECT_TRUE(inner.AwaitWaits(waits + 2));  // the wait for "dead" is under way
    newer.store(true);
  });
  EXPECT_THROW(store.WaitAll({"a", "dead"}, std::chrono::hours(1), {}), RendezvousSuperseded);
  publisher.join();
}

// AllGather likewise: its put is made at once, the wait goes on in slices
// (the put repeated, harmlessly) and ends at a newer generation.
TEST(SupersededStoreTest, AllGatherPutsAtOnceWaitsInSlicesAndStopsForANewerGeneration) {
  MemoryStore inner;
  std::atomic<bool> newer{false};
  SupersededStore store(
      inner, [&] { return newer.load(); }, milliseconds(10));
  std::thread peer([&] {
    EXPECT_EQ(inner.Wait("g3/m/0", milliseconds(10000)), "zero");
    // Its own Wait, and the AllGather's for rank 0 (put) and rank 1 (under way).
    EXPECT_TRUE(inner.AwaitWaits(3));
    inner.Put("g3/m/1", "one");
  });
  EXPECT_EQ(store.AllGather("g3/m/", 0, 2, "zero", milliseconds(10000), {}),
            (std::vector<std::string>{"zero", "one"}));
  peer.join();
  try {
    store.AllGather("g4/m/", 0, 3, "zero", milliseconds(50), {});
    FAIL() << "returned";
  } catch (const runtime::MissingKeysError& e) {
    EXPECT_EQ(e.missing(), (std::vector<size_t>{1, 2}));
    EXPECT_NE(std::string(e.what()).find("within 50 ms"), std::string::npos) << e.what();
  }
  const int before_gather = inner.waits();
  std::thread publisher([&] {
    // After its put, the wait for rank 0 is under way: a newer generation set
    // before the AllGather began would stop it before its put.
    EXPECT_TRUE(inner.AwaitWaits(before_gather + 1));
    newer.store(true);
  });
  EXPECT_THROW(store.AllGather("g5/m/", 1, 2, "one", std::chrono::hours(1), {}),
               RendezvousSuperseded);
  publisher.join();
  EXPECT_EQ(inner.Get("g5/m/1"), "one");
}

TEST(SupersededStoreTest, AlreadySupersededDoesNotWaitAtAll) {
  MemoryStore inner;
  inner.Put("k", "v");
  SupersededStore store(inner, [] { return true; });
  EXPECT_THROW(store.Wait("k", milliseconds(1000)), RendezvousSuperseded);
  EXPECT_EQ(inner.waits(), 0);
}

}  // namespace
}  // namespace elastic::trainer
