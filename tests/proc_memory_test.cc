#include "tests/proc_memory.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace elastic::tests {
namespace {

bool Contains(const std::vector<pid_t>& pids, pid_t pid) {
  return std::find(pids.begin(), pids.end(), pid) != pids.end();
}

TEST(ProcMemory, DescendantsAreChildrenAndTheirChildren) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child starts a grandchild, tells the test its pid, and both wait to be killed.
    const pid_t grandchild = ::fork();
    if (grandchild == 0) {
      ::pause();
      ::_exit(0);
    }
    (void)!::write(pipe_fds[1], &grandchild, sizeof(grandchild));
    ::pause();
    ::_exit(0);
  }
  pid_t grandchild = 0;
  ASSERT_EQ(::read(pipe_fds[0], &grandchild, sizeof(grandchild)),
            static_cast<ssize_t>(sizeof(grandchild)));
  const std::vector<pid_t> below_us = DescendantsOf(::getpid());
  const std::vector<pid_t> below_child = DescendantsOf(child);
  EXPECT_TRUE(Contains(below_us, child));
  EXPECT_TRUE(Contains(below_us, grandchild));
  EXPECT_EQ(below_child, std::vector<pid_t>{grandchild});
  EXPECT_FALSE(Contains(below_us, ::getpid()));
  EXPECT_NE(CommandLineOf(child).find("proc_memory_test"), std::string::npos)
      << CommandLineOf(child);
  ::kill(grandchild, SIGKILL);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  EXPECT_FALSE(MemoryOf(child).has_value());  // reaped: gone
  EXPECT_EQ(CommandLineOf(child), "");
}

TEST(ProcMemory, TouchedHeapIsPrivate) {
  const std::optional<MemoryUse> before = MemoryOf(::getpid());
  ASSERT_TRUE(before.has_value());
  EXPECT_GT(before->rss, 0);
  EXPECT_LE(before->private_bytes, before->rss);
  EXPECT_LE(before->pss, before->rss);
  constexpr int64_t kBytes = 64 << 20;
  char* block = static_cast<char*>(std::malloc(kBytes));
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, kBytes);               // touched: resident, and this process's alone
  asm volatile("" : : "r"(block) : "memory");  // the stores must happen
  const std::optional<MemoryUse> after = MemoryOf(::getpid());
  ASSERT_TRUE(after.has_value());
  EXPECT_GE(after->private_bytes - before->private_bytes, kBytes - (1 << 20));
  EXPECT_GE(after->rss - before->rss, kBytes - (1 << 20));
  std::free(block);
}

}  // namespace
}  // namespace elastic::tests
