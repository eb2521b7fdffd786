#include "tests/elastic_job.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <regex>
#include <set>
#include <sstream>

#include "tests/job_checks.h"

namespace elastic::tests {

std::vector<std::string> JobArgs(const std::string& dir, int workers, int epochs) {
  return {kBinary, "--workers=" + std::to_string(workers), "--model=resnet8",
          "--dataset=fashion-mnist", "--train-samples=" + std::to_string(kTrainSamples),
          "--test-samples=2000", "--epochs=" + std::to_string(epochs),
          // 64 samples a step at every world (32 a worker at world 2), lr 0.1:
          // at world 2 the steps of the tutorials' recipe of 32 a worker at
          // lr 0.05 x 2, which these scenarios were written for.
          "--batch-size=64", "--lr=0.1", "--warmup-epochs=0", "--seed=1", "--loader-threads=1",
          "--log-every=1", "--commit-every=8", "--log-samples=" + dir + "/samples",
          "--checkpoint-dir=" + dir + "/checkpoint", "--run-dir=" + RunDir(dir)};
}

std::string RunDir(const std::string& dir) { return dir + "/run"; }

pid_t WorkerPid(const std::string& run_dir, int generation, int rank) {
  const JobEvent params = WaitForEvent(run_dir, std::chrono::seconds(120), [&](const JobEvent& e) {
    return e["event"] == "params" && e["generation"] == generation && e["rank"] == rank;
  });
  return params.is_null() ? -1 : params["pid"].get<pid_t>();
}

// The port the driver's head listens on, once it says so ("" if it never does).
std::string HeadPort(Process& driver) {
  const std::smatch m =
      driver.WaitFor("head listening on 127\\.0\\.0\\.1:(\\d+)", std::chrono::seconds(60));
  return m.empty() ? "" : m[1].str();
}

namespace {

bool CanListenOn(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  ::close(fd);
  return free;
}

}  // namespace

std::string RestartablePort() {
  // The ephemeral range starts at 32768 by default (ip_local_port_range);
  // tests running side by side pick at random from the 12,000 ports below it.
  std::random_device random;
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int port = 20000 + static_cast<int>(random() % 12700);
    if (CanListenOn(port) && CanListenOn(port + 1)) return std::to_string(port);
  }
  return "0";
}

// Waits until the job is at least `step` steps into (1-based) epoch `epoch`.
bool WaitForStep(Process& driver, int epoch, int step) {
  return !driver
              .WaitFor("epoch " + std::to_string(epoch) + "/\\d+ step (\\d+)/",
                       std::chrono::seconds(240),
                       [step](const std::smatch& m) { return std::stoi(m[1]) >= step; })
              .empty();
}

// Every sample of each of the first `epochs` epochs was trained on exactly
// once (--log-samples=dir/samples).
void CheckSamples(const std::string& dir, int epochs) {
  ExpectEverySampleOnce(dir + "/samples", kTrainSamples, epochs);
}

int LastEpoch(const JobEvents& events) {
  int last = 0;
  for (const JobEvent& e : events.Of("epoch")) last = std::max(last, e["epoch"].get<int>());
  return last;
}

// Resets every established TCP connection of process `pid` (its own end, found
// through /proc) with `ss -K`, as a NAT timeout or a middlebox would: the
// process lives on. With `remote_port`, only its connections to that port.
// Returns how many connections were reset.
namespace {

// "ADDRESS:PORT" of a socket end, in the form ss's filter takes.
std::string SocketEnd(const sockaddr_storage& address) {
  char host[INET6_ADDRSTRLEN] = "";
  if (address.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
    ::inet_ntop(AF_INET, &v4.sin_addr, host, sizeof(host));
    return std::string(host) + ":" + std::to_string(ntohs(v4.sin_port));
  }
  const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
  ::inet_ntop(AF_INET6, &v6.sin6_addr, host, sizeof(host));
  return "[" + std::string(host) + "]:" + std::to_string(ntohs(v6.sin6_port));
}

// The (local, remote) ends of every connected TCP socket `pid` holds. The
// sockets are borrowed with pidfd_getfd and asked directly: /proc/net/tcp,
// read in pages while other tests open and close connections, can skip one.
std::vector<std::pair<std::string, std::string>> ConnectionsOf(pid_t pid) {
  std::vector<std::pair<std::string, std::string>> connections;
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) return connections;
  const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR* d = ::opendir(fd_dir.c_str())) {
    while (dirent* entry = ::readdir(d)) {
      char target[256];
      const std::string link = fd_dir + "/" + entry->d_name;
      const ssize_t n = ::readlink(link.c_str(), target, sizeof(target) - 1);
      if (n <= 0 || std::string(target, static_cast<size_t>(n)).rfind("socket:[", 0) != 0) continue;
      const int fd =
          static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, std::atoi(entry->d_name), 0));
      if (fd < 0) continue;  // closed meanwhile
      int type = 0;
      socklen_t type_size = sizeof(type);
      sockaddr_storage local{}, remote{};
      socklen_t local_size = sizeof(local), remote_size = sizeof(remote);
      if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &type_size) == 0 && type == SOCK_STREAM &&
          ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_size) == 0 &&
          (local.ss_family == AF_INET || local.ss_family == AF_INET6) &&
          ::getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &remote_size) == 0) {
        connections.emplace_back(SocketEnd(local), SocketEnd(remote));
      }
      ::close(fd);
    }
    ::closedir(d);
  }
  ::close(pidfd);
  return connections;
}

}  // namespace

int ResetConnectionsOf(pid_t pid, int remote_port) {
  auto connections = ConnectionsOf(pid);
  if (remote_port != 0) {
    const std::string suffix = ":" + std::to_string(remote_port);
    connections.erase(std::remove_if(connections.begin(), connections.end(),
                                     [&](const std::pair<std::string, std::string>& c) {
                                       const std::string& remote = c.second;
                                       return remote.size() < suffix.size() ||
                                              remote.compare(remote.size() - suffix.size(),
                                                             suffix.size(), suffix) != 0;
                                     }),
                      connections.end());
  }
  for (const auto& [local, remote] : connections) {
    // Both ends named: only this process's end is destroyed, never another
    // process's socket that shares a local port number.
    // ss exits 0 even when the kernel refuses (no CAP_NET_ADMIN): read what it says.
    const std::string command = "ss -K -tn 'src " + local + " and dst " + remote + "' 2>&1";
    std::FILE* pipe = ::popen(command.c_str(), "r");
    if (pipe == nullptr) return -1;
    std::string said;
    char buffer[256];
    while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) said += buffer;
    if (::pclose(pipe) != 0 || said.find("SOCK_DESTROY") != std::string::npos) {
      std::fprintf(stderr, "ss -K failed: %s\n", said.c_str());
      return -1;
    }
    std::fprintf(stderr, "reset %s -> %s of pid %d\n", local.c_str(), remote.c_str(),
                 static_cast<int>(pid));
  }
  return static_cast<int>(connections.size());
}

int64_t StepRestoredAfter(const JobEvents& events, int generation) {
  for (const JobEvent& p : events.Of("params"))
    if (p["generation"].get<int>() > generation && p["rank"] == 0)
      return p["point"]["step"].get<int64_t>();
  return -1;
}

std::unique_ptr<Process> JoinNode(const std::string& port, int workers,
                                  const std::string& token_file, const std::string& log) {
  return std::make_unique<Process>(std::vector<std::string>{kBinary, "--join=127.0.0.1:" + port,
                                                            "--workers=" + std::to_string(workers),
                                                            "--token-file=" + token_file},
                                   log);
}

std::vector<pid_t> WorkersStartedBy(const std::string& agent_output) {
  const std::regex started("started worker \\d+ as pid (\\d+)");
  std::vector<pid_t> pids;
  for (auto it = std::sregex_iterator(agent_output.begin(), agent_output.end(), started);
       it != std::sregex_iterator(); ++it)
    pids.push_back(static_cast<pid_t>(std::stol((*it)[1])));
  return pids;
}

}  // namespace elastic::tests
