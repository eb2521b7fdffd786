#include "runtime/test_util.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace elastic::runtime::testing {
namespace {

std::map<std::string, RoleMain>& Roles() {
  static std::map<std::string, RoleMain> roles;
  return roles;
}

}  // namespace

bool RegisterRole(const std::string& name, RoleMain main) {
  Roles()[name] = std::move(main);
  return true;
}

int TestMain(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--role=", 0) != 0) continue;
    const std::string role = arg.substr(7);
    auto it = Roles().find(role);
    if (it == Roles().end()) {
      std::fprintf(stderr, "unknown role %s\n", role.c_str());
      return 2;
    }
    std::vector<std::string> args(argv + i + 1, argv + argc);
    try {
      return it->second(args);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "role %s failed: %s\n", role.c_str(), e.what());
      return 3;
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

Subprocess Subprocess::SpawnRole(const std::string& role, const std::vector<std::string>& args,
                                 const std::map<std::string, std::string>& environment) {
  std::vector<std::string> argv = {"/proc/self/exe", "--role=" + role};
  argv.insert(argv.end(), args.begin(), args.end());
  return Spawn(argv, environment);
}

Subprocess Subprocess::Spawn(const std::vector<std::string>& argv,
                             const std::map<std::string, std::string>& environment) {
  // Build everything before fork: the child may only call async-signal-safe functions.
  std::string exe = argv[0];
  if (exe == "/proc/self/exe") {
    char path[4096];
    const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
    if (n <= 0) throw std::runtime_error("readlink /proc/self/exe failed");
    exe.assign(path, static_cast<size_t>(n));
  }
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const auto eq = entry.find('=');
    if (eq != std::string::npos && environment.count(entry.substr(0, eq)) > 0) continue;
    env_strings.push_back(entry);
  }
  for (const auto& [key, value] : environment) env_strings.push_back(key + "=" + value);
  std::vector<char*> c_argv;
  for (const auto& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
  c_argv.push_back(nullptr);
  std::vector<char*> c_env;
  for (const auto& e : env_strings) c_env.push_back(const_cast<char*>(e.c_str()));
  c_env.push_back(nullptr);
  const pid_t parent = getpid();

  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    execve(exe.c_str(), c_argv.data(), c_env.data());
    _exit(127);
  }
  return Subprocess(pid);
}

Subprocess::Subprocess(Subprocess&& other) noexcept : pid_(other.pid_), reaped_(other.reaped_) {
  other.pid_ = -1;
}

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  std::swap(pid_, other.pid_);
  std::swap(reaped_, other.reaped_);
  return *this;
}

Subprocess::~Subprocess() {
  if (pid_ > 0 && !reaped_) {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
}

void Subprocess::Signal(int signal) const {
  if (pid_ > 0 && !reaped_) kill(pid_, signal);
}

std::optional<int> Subprocess::Wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t done = waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      reaped_ = true;
      return status;
    }
    if (std::chrono::steady_clock::now() > deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

int Subprocess::WaitExitCode(std::chrono::milliseconds timeout) {
  auto status = Wait(timeout);
  if (!status) {
    Signal(SIGKILL);
    Wait(std::chrono::seconds(10));
    return -1;
  }
  return WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
}

namespace {

// The state letter of /proc/PID/stat ('R', 'S', 'T', 'Z'...), or 0.
char ProcessState(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return 0;
  std::string content;
  std::getline(stat, content);
  const auto paren = content.rfind(')');
  if (paren == std::string::npos || paren + 2 >= content.size()) return 0;
  return content[paren + 2];
}

}  // namespace

bool ProcessAlive(pid_t pid) {
  const char state = ProcessState(pid);
  return state != 0 && state != 'Z' && state != 'X';
}

bool ProcessStopped(pid_t pid) { return ProcessState(pid) == 'T'; }

std::set<int> OpenDescriptors(pid_t pid) {
  std::set<int> descriptors;
  const std::string path = "/proc/" + std::to_string(pid) + "/fd";
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return descriptors;
  const int own = dirfd(dir);  // only meaningful when listing ourselves
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const int fd = std::atoi(entry->d_name);
    if (pid == getpid() && fd == own) continue;
    descriptors.insert(fd);
  }
  closedir(dir);
  return descriptors;
}

std::set<uint64_t> OpenSockets(pid_t pid) {
  std::set<uint64_t> sockets;
  for (int fd : OpenDescriptors(pid)) {
    const std::string link = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
    char target[256];
    const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;  // closed since it was listed
    const std::string text(target, static_cast<size_t>(n));
    constexpr const char kPrefix[] = "socket:[";
    if (text.rfind(kPrefix, 0) != 0) continue;
    sockets.insert(std::stoull(text.substr(sizeof(kPrefix) - 1)));
  }
  return sockets;
}

std::string ProcessName(pid_t pid) {
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(comm, name);
  return name;
}

std::map<std::string, std::string> ProcessEnvironment(pid_t pid) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  const std::string content((std::istreambuf_iterator<char>(file)),
                            std::istreambuf_iterator<char>());
  std::map<std::string, std::string> environment;
  size_t start = 0;
  while (start < content.size()) {
    size_t end = content.find('\0', start);
    if (end == std::string::npos) end = content.size();
    const std::string entry = content.substr(start, end - start);
    const auto eq = entry.find('=');
    if (eq != std::string::npos) environment[entry.substr(0, eq)] = entry.substr(eq + 1);
    start = end + 1;
  }
  return environment;
}

namespace {

sockaddr_in Loopback(uint16_t port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return address;
}

}  // namespace

uint16_t FreeLocalPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in address = Loopback(0);
  socklen_t length = sizeof(address);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const int error = errno;
    close(fd);
    throw std::runtime_error(std::string("cannot find a free port: ") + std::strerror(error));
  }
  close(fd);
  return ntohs(address.sin_port);
}

bool CanConnect(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  const sockaddr_in address = Loopback(port);
  const int result = connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  const int error = errno;
  close(fd);
  if (result == 0) return true;
  if (error == ECONNREFUSED) return false;
  throw std::runtime_error("connect to 127.0.0.1:" + std::to_string(port) +
                           " failed: " + std::strerror(error));
}

bool WaitUntil(const std::function<bool()>& predicate, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!predicate()) {
    if (std::chrono::steady_clock::now() > deadline) return predicate();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

HeadClientOptions ClientOf(const Head& head, const std::string& name) {
  HeadClientOptions options;
  options.port = head.port();
  options.token = head.token();
  options.name = name;
  return options;
}

}  // namespace elastic::runtime::testing
