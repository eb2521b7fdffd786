#include "tests/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

namespace elastic::tests {

using Clock = std::chrono::steady_clock;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string RunShell(const std::string& command, bool* ok) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  std::string out;
  if (pipe == nullptr) {
    *ok = false;
    return out;
  }
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) out.append(buffer, n);
  *ok = ::pclose(pipe) == 0;
  return out;
}

std::string WithoutProgress(const std::string& output) {
  static const std::regex progress("^epoch \\d+/\\d+ step \\d+/\\d+ ");
  std::istringstream in(output);
  std::string events, line;
  size_t dropped = 0;
  while (std::getline(in, line)) {
    if (std::regex_search(line, progress)) {
      ++dropped;
      continue;
    }
    events += line + "\n";
  }
  return events + "(" + std::to_string(dropped) + " progress lines left out)\n";
}

Process::Process(const std::vector<std::string>& args, const std::string& log) : log_(log) {
  pid_ = ::fork();
  if (pid_ == 0) {
    ::setpgid(0, 0);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    std::perror("execv");
    ::_exit(127);
  }
  ::setpgid(pid_, pid_);
}

Process::~Process() {
  if (!exited_) {
    ::kill(-pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

bool IsRunning(pid_t pid) {
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  // "pid (comm) S ...": the state follows the last ')'.
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  const char state = stat[paren + 2];
  return state != 'Z' && state != 'X';
}

std::string Process::Output() const { return ReadFile(log_); }

bool Process::Exited(int* code) {
  int status = 0;
  if (!exited_ && ::waitpid(pid_, &status, WNOHANG) == pid_) {
    exited_ = true;
    code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  *code = code_;
  return exited_;
}

int Process::Wait(std::chrono::seconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  int code = -1;
  while (Clock::now() < deadline) {
    if (Exited(&code)) return code;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return -1;
}

std::smatch Process::WaitFor(const std::string& pattern, std::chrono::seconds timeout,
                             const std::function<bool(const std::smatch&)>& accept) {
  const std::regex re(pattern);
  const Clock::time_point deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    output_ = Output();
    for (auto it = std::sregex_iterator(output_.begin(), output_.end(), re);
         it != std::sregex_iterator(); ++it) {
      if (!accept || accept(*it)) return *it;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return std::smatch();
}

}  // namespace elastic::tests
