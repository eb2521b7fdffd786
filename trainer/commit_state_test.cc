#include "trainer/commit_state.h"

#include <gtest/gtest.h>

#include <string>

namespace elastic::trainer {
namespace {

Commit Example() {
  Commit commit;
  commit.loss_sum = 12.5;
  commit.metric_sum = 40;
  commit.seen = 64;
  commit.train_seconds = 1.25;
  commit.learner = std::string("learner state\0with a zero", 25);
  return commit;
}

TEST(CommitStateTest, SealedStateOpensUnderTheSameToken) {
  const Commit opened = Commit::Open("token-a", Example().Seal("token-a"), "rank 0");
  EXPECT_EQ(opened.loss_sum, 12.5);
  EXPECT_EQ(opened.metric_sum, 40);
  EXPECT_EQ(opened.seen, 64);
  EXPECT_EQ(opened.train_seconds, 1.25);
  EXPECT_EQ(opened.learner, Example().learner);
}

void ExpectRefused(const std::string& bytes, const std::string& token, const std::string& what) {
  try {
    Commit::Open(token, bytes, "rank 3");
    ADD_FAILURE() << "opened: expected \"" << what << "\"";
  } catch (const StateTransferError& e) {
    EXPECT_NE(std::string(e.what()).find("the state from rank 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(CommitStateTest, AnotherTokenOrAnyChangedByteIsRefusedBeforeDecoding) {
  const std::string sealed = Example().Seal("token-a");
  ExpectRefused(sealed, "token-b", "is not sealed under this job's token");
  for (size_t i = 0; i < sealed.size(); ++i) {
    std::string changed = sealed;
    changed[i] ^= 0x01;
    ExpectRefused(changed, "token-a", "is not sealed under this job's token");
  }
  ExpectRefused(sealed + "x", "token-a", "is not sealed");
  ExpectRefused(sealed.substr(0, 10), "token-a", "is truncated (10 bytes)");
  ExpectRefused("", "token-a", "is truncated (0 bytes)");
}

}  // namespace
}  // namespace elastic::trainer
