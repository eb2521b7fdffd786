// Key-value semantics of the head's table: put replaces, get of a missing key
// is empty, waiters run once in order, a cancelled waiter never runs; limits
// refuse a put and leave the table as it was; keys of old generations go.
#include "runtime/kv_table.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/kv_store.h"

namespace elastic::runtime {
namespace {

TEST(KvTableTest, PutReplacesAndGetReadsBack) {
  KvTable table;
  EXPECT_FALSE(table.Get("a").has_value());
  table.Put("a", "1");
  table.Put("a", "2");
  EXPECT_EQ(table.Get("a").value(), "2");
  EXPECT_EQ(table.size(), 1u);
  EXPECT_TRUE(table.Erase("a"));
  EXPECT_FALSE(table.Get("a").has_value());
}

TEST(KvTableTest, WaitOnPresentKeyRunsAtOnce) {
  KvTable table;
  table.Put("k", "v");
  std::string seen;
  EXPECT_EQ(table.WaitFor("k", [&](const std::string& value) { seen = value; }), 0u);
  EXPECT_EQ(seen, "v");
  EXPECT_EQ(table.waiter_count(), 0u);
}

TEST(KvTableTest, WaitersRunOnceInArrivalOrderOnPut) {
  KvTable table;
  std::vector<std::string> calls;
  table.WaitFor("k", [&](const std::string& value) { calls.push_back("first:" + value); });
  table.WaitFor("k", [&](const std::string& value) { calls.push_back("second:" + value); });
  table.WaitFor("other", [&](const std::string& value) { calls.push_back("other:" + value); });
  EXPECT_EQ(table.waiter_count(), 3u);
  table.Put("k", "x");
  table.Put("k", "y");  // waiters already ran; they do not run again
  EXPECT_EQ(calls, (std::vector<std::string>{"first:x", "second:x"}));
  EXPECT_EQ(table.waiter_count(), 1u);
}

TEST(KvTableTest, CancelledWaiterNeverRuns) {
  KvTable table;
  bool ran = false;
  const uint64_t ticket = table.WaitFor("k", [&](const std::string&) { ran = true; });
  EXPECT_TRUE(table.CancelWait("k", ticket));
  EXPECT_FALSE(table.CancelWait("k", ticket));
  table.Put("k", "v");
  EXPECT_FALSE(ran);
}

TEST(KvTableTest, GenerationKeysKeepGenerationsApart) {
  KvTable table;
  table.Put(GenerationKey(1, "rank0"), "old");
  EXPECT_FALSE(table.Get(GenerationKey(2, "rank0")).has_value());
  EXPECT_EQ(GenerationKey(7, "addr"), "g7/addr");
}

KvLimits SmallLimits() {
  KvLimits limits;
  limits.max_key_bytes = 16;
  limits.max_value_bytes = 100;
  limits.max_keys = 3;
  limits.max_total_bytes = 200;
  return limits;
}

// Runs put and returns the LimitExceededError message ("" if none).
template <typename F>
std::string Refusal(F put) {
  try {
    put();
  } catch (const LimitExceededError& e) {
    return e.what();
  }
  return "";
}

TEST(KvTableTest, OversizeKeyOrValueIsRefusedNamingTheLimitAndTheKey) {
  KvTable table(SmallLimits());
  const std::string long_key(17, 'k');
  std::string why = Refusal([&] { table.Put(long_key, "v"); });
  EXPECT_NE(why.find("max_key_bytes"), std::string::npos) << why;
  EXPECT_NE(why.find(long_key), std::string::npos) << why;
  why = Refusal([&] { table.Put("big", std::string(101, 'v')); });
  EXPECT_NE(why.find("max_value_bytes"), std::string::npos) << why;
  EXPECT_NE(why.find("'big'"), std::string::npos) << why;
  EXPECT_THROW(table.CheckKey(long_key), LimitExceededError);
  EXPECT_EQ(table.size(), 0u);
  EXPECT_EQ(table.total_bytes(), 0u);
  table.Put(std::string(16, 'k'), std::string(100, 'v'));  // at the limits: fine
  EXPECT_EQ(table.total_bytes(), 116u);
}

TEST(KvTableTest, KeyCountAndTotalBytesAreBoundedAndReplacingCountsOnce) {
  KvTable table(SmallLimits());
  table.Put("a", std::string(60, 'x'));
  table.Put("b", std::string(60, 'x'));
  table.Put("c", "1");
  std::string why = Refusal([&] { table.Put("d", "1"); });
  EXPECT_NE(why.find("max_keys"), std::string::npos) << why;
  EXPECT_NE(why.find("'d'"), std::string::npos) << why;
  // Replacing a key is no new key, and its old value's bytes are given back.
  table.Put("c", std::string(70, 'y'));
  EXPECT_EQ(table.total_bytes(), 3u + 60 + 60 + 70);
  why = Refusal([&] { table.Put("a", std::string(90, 'z')); });
  EXPECT_NE(why.find("max_total_bytes"), std::string::npos) << why;
  EXPECT_EQ(table.Get("a").value(), std::string(60, 'x'));  // unchanged
  EXPECT_EQ(table.size(), 3u);
  EXPECT_TRUE(table.Erase("b"));
  EXPECT_EQ(table.total_bytes(), 2u + 60 + 70);
  table.Put("d", "1");
}

TEST(KvTableTest, EraseGenerationsBeforeDropsOnlyOlderGenerationKeys) {
  KvTable table;
  for (uint64_t generation = 1; generation <= 5; ++generation) {
    table.Put(GenerationKey(generation, "gloo/t/rank_0"), "address");
    table.Put(GenerationKey(generation, "nccl/t/unique_id"), "id");
  }
  table.Put("job/name", "kept");
  table.Put("g/not-a-generation", "kept");
  table.Put("g12x/not-a-generation", "kept");
  EXPECT_EQ(table.EraseGenerationsBefore(4), 6u);
  EXPECT_FALSE(table.Get(GenerationKey(3, "gloo/t/rank_0")).has_value());
  EXPECT_EQ(table.Get(GenerationKey(4, "gloo/t/rank_0")).value(), "address");
  EXPECT_EQ(table.Get(GenerationKey(5, "nccl/t/unique_id")).value(), "id");
  EXPECT_EQ(table.size(), 4u + 3);
  EXPECT_EQ(table.EraseGenerationsBefore(4), 0u);
  // A key erased one by one leaves the index too.
  EXPECT_TRUE(table.Erase(GenerationKey(4, "gloo/t/rank_0")));
  EXPECT_EQ(table.EraseGenerationsBefore(100), 3u);
  EXPECT_EQ(table.size(), 3u);
  EXPECT_EQ(table.total_bytes(),
            std::string("job/namekeptg/not-a-generationkeptg12x/not-a-generationkept").size());
}

TEST(KvTableTest, GenerationOfKeyReadsOnlyGenerationKeys) {
  EXPECT_EQ(GenerationOfKey(GenerationKey(42, "x")), 42u);
  EXPECT_EQ(GenerationOfKey("g18446744073709551615/x"), UINT64_MAX);
  EXPECT_FALSE(GenerationOfKey("g18446744073709551616/x").has_value());  // overflows
  EXPECT_FALSE(GenerationOfKey("g/x").has_value());
  EXPECT_FALSE(GenerationOfKey("g7").has_value());
  EXPECT_FALSE(GenerationOfKey("g-7/x").has_value());
  EXPECT_FALSE(GenerationOfKey("h7/x").has_value());
  EXPECT_FALSE(GenerationOfKey("").has_value());
}

TEST(KvTableTest, WaitForAllRunsOnceWhenTheLastKeyIsSetWhateverTheOrder) {
  for (const bool reverse : {false, true}) {
    KvTable table;
    std::vector<std::string> keys;
    for (int i = 0; i < 64; ++i) keys.push_back("g1/k" + std::to_string(i));
    table.Put(keys[10], "there already");
    int ran = 0;
    const uint64_t ticket = table.WaitForAll(keys, [&] { ++ran; });
    EXPECT_NE(ticket, 0u);
    // One waiter at a time, whatever the number of keys.
    EXPECT_EQ(table.waiter_count(), 1u);
    for (int i = 0; i < 64; ++i) {
      const int k = reverse ? 63 - i : i;
      if (k == 10) continue;
      EXPECT_EQ(ran, 0) << "ran before key " << k << " was set";
      table.Put(keys[static_cast<size_t>(k)], "v");
    }
    EXPECT_EQ(ran, 1);
    EXPECT_EQ(table.waiter_count(), 0u);
    EXPECT_FALSE(table.CancelWaitAll(ticket));
    EXPECT_TRUE(table.Missing(keys).empty());
  }
}

TEST(KvTableTest, WaitForAllOfPresentKeysRunsAtOnceAndCancelledNeverRuns) {
  KvTable table;
  table.Put("a", "1");
  table.Put("b", "2");
  bool ran = false;
  EXPECT_EQ(table.WaitForAll({"a", "b"}, [&] { ran = true; }), 0u);
  EXPECT_TRUE(ran);
  ran = false;
  const uint64_t ticket = table.WaitForAll({"a", "c", "d"}, [&] { ran = true; });
  EXPECT_EQ(table.Missing({"a", "c", "d"}), (std::vector<size_t>{1, 2}));
  EXPECT_TRUE(table.CancelWaitAll(ticket));
  EXPECT_EQ(table.waiter_count(), 0u);
  table.Put("c", "3");
  table.Put("d", "4");
  EXPECT_FALSE(ran);
}

// The n waits of a rendezvous name one list: they share one watch (one key
// waiter in all), run in the order they came, and each can be cancelled alone.
TEST(KvTableTest, WaitsForTheSameListShareOneWatchAndRunInArrivalOrder) {
  KvTable table;
  auto keys = std::make_shared<const std::vector<std::string>>(
      std::vector<std::string>{"g2/r/0", "g2/r/1", "g2/r/2"});
  std::vector<int> ran;
  std::vector<uint64_t> tickets;
  for (int i = 0; i < 5; ++i)
    tickets.push_back(table.WaitForAll(keys, [&, i] { ran.push_back(i); }));
  EXPECT_EQ(table.waiter_count(), 1u);
  EXPECT_TRUE(table.CancelWaitAll(tickets[3]));
  EXPECT_FALSE(table.CancelWaitAll(tickets[3]));
  table.Put("g2/r/2", "c");
  table.Put("g2/r/0", "a");
  EXPECT_TRUE(ran.empty());
  table.Put("g2/r/1", "b");
  EXPECT_EQ(ran, (std::vector<int>{0, 1, 2, 4}));
  EXPECT_EQ(table.waiter_count(), 0u);
  for (uint64_t ticket : tickets) EXPECT_FALSE(table.CancelWaitAll(ticket));
  // Once complete, the same list runs at once.
  bool again = false;
  EXPECT_EQ(table.WaitForAll(keys, [&] { again = true; }), 0u);
  EXPECT_TRUE(again);
  // Cancelling every wait of a list drops its watch.
  auto other = std::make_shared<const std::vector<std::string>>(std::vector<std::string>{"x", "y"});
  const uint64_t first = table.WaitForAll(other, [] { FAIL() << "cancelled wait ran"; });
  const uint64_t second = table.WaitForAll(other, [] { FAIL() << "cancelled wait ran"; });
  EXPECT_TRUE(table.CancelWaitAll(first));
  EXPECT_EQ(table.waiter_count(), 1u);
  EXPECT_TRUE(table.CancelWaitAll(second));
  EXPECT_EQ(table.waiter_count(), 0u);
  table.Put("x", "1");
  table.Put("y", "2");
}

// A version that moves with every change tells a caller when pointers from
// Find may have gone stale.
TEST(KvTableTest, TheVersionChangesWithEveryPutAndErase) {
  KvTable table;
  const uint64_t start = table.version();
  table.Put("g1/a", "1");
  EXPECT_GT(table.version(), start);
  uint64_t before = table.version();
  table.Put("g1/a", "2");
  EXPECT_GT(table.version(), before);
  before = table.version();
  EXPECT_FALSE(table.Erase("absent"));
  EXPECT_EQ(table.version(), before);
  EXPECT_TRUE(table.Erase("g1/a"));
  EXPECT_GT(table.version(), before);
  table.Put("g1/b", "3");
  before = table.version();
  EXPECT_EQ(table.EraseGenerationsBefore(2), 1u);
  EXPECT_GT(table.version(), before);
}

TEST(KvTableTest, WaitForAllRefusesTooManyKeysOrAnOversizeKey) {
  KvLimits limits;
  limits.max_keys_per_wait = 3;
  limits.max_key_bytes = 8;
  KvTable table(limits);
  try {
    table.WaitForAll({"a", "b", "c", "d"}, [] {});
    FAIL() << "four keys accepted";
  } catch (const LimitExceededError& e) {
    EXPECT_NE(std::string(e.what()).find("max_keys_per_wait"), std::string::npos) << e.what();
  }
  EXPECT_THROW(table.WaitForAll({"a", "much-too-long"}, [] {}), LimitExceededError);
  EXPECT_EQ(table.waiter_count(), 0u);
}

TEST(KvTableTest, SliceValueConcatenatesRangesCutAtTheEnd) {
  EXPECT_EQ(SliceValue("0123456789", {}), "0123456789");
  EXPECT_EQ(SliceValue("0123456789", {{0, 2}, {6, 2}}), "0167");
  EXPECT_EQ(SliceValue("0123456789", {{8, 5}, {20, 1}}), "89");
}

}  // namespace
}  // namespace elastic::runtime
