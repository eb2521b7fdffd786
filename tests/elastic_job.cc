#include "tests/elastic_job.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <regex>
#include <set>
#include <sstream>

#include "tests/job_checks.h"

namespace elastic::tests {

std::vector<std::string> JobArgs(const std::string& dir, int workers, int epochs) {
  return {kBinary,
          "--workers=" + std::to_string(workers),
          "--model=resnet8",
          "--dataset=fashion-mnist",
          "--train-samples=" + std::to_string(kTrainSamples),
          "--test-samples=2000",
          "--epochs=" + std::to_string(epochs),
          "--batch-size=32",
          "--lr=0.05",
          "--seed=1",
          "--loader-threads=1",
          "--log-every=1",
          "--commit-every=8",
          "--log-samples=" + dir + "/samples",
          "--checkpoint-dir=" + dir + "/checkpoint"};
}

// pid of the worker that had `rank` in `generation` (from its sync log line).
pid_t WorkerPid(Process& driver, int generation, int rank) {
  const std::smatch m = driver.WaitFor(
      "\\[worker \\d+ pid (\\d+)\\] params generation=" + std::to_string(generation) +
          " rank=" + std::to_string(rank) + " ",
      std::chrono::seconds(120));
  return m.empty() ? -1 : static_cast<pid_t>(std::stol(m[1]));
}

// The port the driver's head listens on, once it says so ("" if it never does).
std::string HeadPort(Process& driver) {
  const std::smatch m =
      driver.WaitFor("head listening on 127\\.0\\.0\\.1:(\\d+)", std::chrono::seconds(60));
  return m.empty() ? "" : m[1].str();
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

// The last (1-based) epoch whose summary `output` printed; 0 if none.
int LastPrintedEpoch(const std::string& output) {
  const std::regex re("epoch (\\d+)/\\d+ world \\d+ \\|");
  int last = 0;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), re);
       it != std::sregex_iterator(); ++it)
    last = std::max(last, std::stoi((*it)[1]));
  return last;
}

// Resets every established TCP connection of process `pid` (its own end, found
// through /proc) with `ss -K`, as a NAT timeout or a middlebox would: the
// process lives on. Returns how many connections were reset.
int ResetConnectionsOf(pid_t pid) {
  std::set<std::string> inodes;
  const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR* d = ::opendir(fd_dir.c_str())) {
    while (dirent* entry = ::readdir(d)) {
      char target[256];
      const std::string link = fd_dir + "/" + entry->d_name;
      const ssize_t n = ::readlink(link.c_str(), target, sizeof(target) - 1);
      if (n <= 0) continue;
      const std::string t(target, static_cast<size_t>(n));
      if (t.rfind("socket:[", 0) == 0) inodes.insert(t.substr(8, t.size() - 9));
    }
    ::closedir(d);
  }
  std::set<int> ports;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::istringstream in(ReadFile(table));
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
          timeout >> inode;
      if (state != "01" || inodes.count(inode) == 0) continue;  // 01: established
      ports.insert(std::stoi(local.substr(local.find(':') + 1), nullptr, 16));
    }
  }
  for (int port : ports) {
    // ss exits 0 even when the kernel refuses (no CAP_NET_ADMIN): read what it says.
    const std::string command = "ss -K -tn 'sport = :" + std::to_string(port) + "' 2>&1";
    std::FILE* pipe = ::popen(command.c_str(), "r");
    if (pipe == nullptr) return -1;
    std::string said;
    char buffer[256];
    while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) said += buffer;
    if (::pclose(pipe) != 0 || said.find("SOCK_DESTROY") != std::string::npos) {
      std::fprintf(stderr, "ss -K failed: %s\n", said.c_str());
      return -1;
    }
  }
  return static_cast<int>(ports.size());
}

// The step of the state the first generation after `generation` restored
// (from any rank's sync line), or -1.
int64_t StepRestoredAfter(const std::string& output, int generation) {
  const std::regex re(
      "params generation=(\\d+) rank=0 world=\\d+ checksum=[0-9a-f]+ "
      "epoch=\\d+ position=\\d+ step=(\\d+)");
  for (std::sregex_iterator it(output.begin(), output.end(), re), end; it != end; ++it)
    if (std::stoi((*it)[1]) > generation) return std::stoll((*it)[2]);
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
