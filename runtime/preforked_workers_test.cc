#include "runtime/preforked_workers.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace elastic::runtime {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name + "-" + std::to_string(getpid());
}

int ExitStatusOf(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -100;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

// What a worker saw of itself, written to the file its first argument names.
int ReportSelf(const std::vector<std::string>& args) {
  std::ofstream out(args.at(1));
  out << "args";
  for (const std::string& arg : args) out << " " << arg;
  out << "\nrole " << (std::getenv("ROLE") != nullptr ? std::getenv("ROLE") : "-") << "\n";
  out << "parent-only " << (std::getenv("PREFORK_TEST_PARENT_ONLY") != nullptr ? "set" : "unset")
      << "\n";
  out << "own group " << (getpgid(0) == getpid() ? "yes" : "no") << "\n";
  sigset_t blocked;
  sigprocmask(SIG_SETMASK, nullptr, &blocked);
  out << "SIGTERM blocked " << (sigismember(&blocked, SIGTERM) ? "yes" : "no") << "\n";
  out << "fd 42 open " << (fcntl(42, F_GETFD) != -1 ? "yes" : "no") << "\n";
  return 7;
}

TEST(PreforkedWorkersTest, AChildBecomesTheWorkerItIsToldToBe) {
  ::setenv("PREFORK_TEST_PARENT_ONLY", "1", 1);
  // A descriptor of the parent's without close-on-exec: the worker must not hold it.
  ASSERT_EQ(dup2(STDERR_FILENO, 42), 42);
  const std::string report = TempPath("prefork-report");
  {
    PreforkedWorkers workers(2, ReportSelf);
    close(42);
    ASSERT_EQ(workers.waiting(), 2u) << workers.why_none();
    // The agent blocks termination signals; the worker must not inherit that.
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigset_t before;
    pthread_sigmask(SIG_BLOCK, &term, &before);
    const pid_t pid = workers.Take({"worker-binary", report, "--role=worker"}, {"ROLE=trainer"});
    pthread_sigmask(SIG_SETMASK, &before, nullptr);
    ASSERT_GT(pid, 0);
    EXPECT_EQ(workers.waiting(), 1u);
    EXPECT_EQ(ExitStatusOf(pid), 7);
    EXPECT_EQ(Slurp(report), "args worker-binary " + report +
                                 " --role=worker\nrole trainer\nparent-only unset\nown group yes\n"
                                 "SIGTERM blocked no\nfd 42 open no\n");
  }
  // The child not given an order was ended and reaped by the destructor.
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
  ::unsetenv("PREFORK_TEST_PARENT_ONLY");
}

TEST(PreforkedWorkersTest, AChildThatDiedIsPassedOverAndNoneLeftMeansZero) {
  const std::string report = TempPath("prefork-second");
  PreforkedWorkers workers(2, ReportSelf);
  ASSERT_EQ(workers.waiting(), 2u) << workers.why_none();
  // Kill whichever child is first in line: Take must skip it, not fail.
  std::vector<pid_t> children;
  std::ifstream listed("/proc/self/task/" + std::to_string(getpid()) + "/children");
  for (pid_t child; listed >> child;) children.push_back(child);
  ASSERT_EQ(children.size(), 2u);
  ASSERT_EQ(kill(children[0], SIGKILL), 0);
  ASSERT_EQ(ExitStatusOf(children[0]), -SIGKILL);
  const pid_t pid = workers.Take({"w", report}, {});
  EXPECT_EQ(pid, children[1]);
  EXPECT_EQ(ExitStatusOf(pid), 7);
  EXPECT_EQ(workers.waiting(), 0u);
  EXPECT_EQ(workers.Take({"w", report}, {}), 0);
}

TEST(PreforkedWorkersTest, NoneAreForkedOnceTheProcessHasASecondThread) {
  std::atomic<bool> stop{false};
  std::thread other([&stop] {
    while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  PreforkedWorkers workers(2, ReportSelf);
  stop.store(true);
  other.join();
  EXPECT_EQ(workers.waiting(), 0u);
  EXPECT_NE(workers.why_none().find("2 threads"), std::string::npos) << workers.why_none();
  EXPECT_EQ(workers.Take({"w", "x"}, {}), 0);
}

}  // namespace
}  // namespace elastic::runtime
