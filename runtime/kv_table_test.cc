// Key-value semantics of the head's table: put replaces, get of a missing key
// is empty, waiters run once in order, a cancelled waiter never runs.
#include "runtime/kv_table.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace elastic::runtime
