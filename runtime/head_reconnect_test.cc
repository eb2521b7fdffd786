#include "runtime/head_reconnect.h"

#include <gtest/gtest.h>

namespace elastic::runtime {
namespace {

using std::chrono::milliseconds;

TEST(HeadReconnectWindowTest, OpenUntilTheTimeoutAndNoAttemptPastIt) {
  const HeadReconnectWindow::Clock::time_point lost{milliseconds(1000)};
  const HeadReconnectWindow window(lost, milliseconds(5000));
  struct Row {
    int64_t at_ms;  // since the loss
    bool open;
    int64_t budget_ms;  // with a cap of 2000 ms
  };
  for (const Row& row : std::vector<Row>{
           {0, true, 2000},     // the first attempt at once, bounded by the cap
           {3500, true, 1500},  // near the end: what is left
           {4999, true, 1},     // 1 ms left
           {5000, false, 1},    // closed exactly at the timeout
           {9000, false, 1},    // past it: never a negative budget
       }) {
    SCOPED_TRACE(row.at_ms);
    const auto now = lost + milliseconds(row.at_ms);
    EXPECT_EQ(window.Open(now), row.open);
    EXPECT_EQ(window.AttemptBudget(now, milliseconds(2000)).count(), row.budget_ms);
  }
  EXPECT_EQ(HeadReconnectWindow(lost, milliseconds(0)).Open(lost), false);
}

}  // namespace
}  // namespace elastic::runtime
