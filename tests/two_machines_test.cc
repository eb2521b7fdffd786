// Two node agents as two machines on one host. Machine A runs the driver of
// //trainer:cifar (its head and 2 workers), machine B a `--join` node agent
// adding 2 more; everything between them crosses a real network link.
//
// Preferred: each machine is a network namespace of its own, joined by a veth
// pair (10.77.X.1 and 10.77.X.2), so each machine has only its own addresses
// and a worker that advertised a loopback address to its peers would be
// unreachable. Where namespaces cannot be made (not root, or a sandbox), the
// test falls back to two addresses of the one loopback interface (head on
// 127.0.0.2) and says so loudly: that proves less, and the log shows it.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/job_checks.h"
#include "tests/process.h"

namespace {

using elastic::tests::ExpectOneChecksumPerGeneration;
using elastic::tests::FreshTempDir;
using elastic::tests::JobEvent;
using elastic::tests::JobEvents;
using elastic::tests::Process;
using elastic::tests::StopAfterAnEpochWithWorld;
using elastic::tests::WaitForEvent;

constexpr char kBinary[] = "examples/cifar/cifar";
constexpr char kNamespacePrefix[] = "elastic-two-";

// Runs a shell command; its exit status, with stdout and stderr in *output.
int RunCommand(const std::string& command, std::string* output) {
  std::FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[512];
  output->clear();
  while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) *output += buffer;
  return ::pclose(pipe);
}

std::string IpBinary() {
  for (const char* path : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
    if (::access(path, X_OK) == 0) return path;
  return "";
}

// Where a process of one machine runs: the command prefix that puts it there
// and the machine's address.
struct Machine {
  std::vector<std::string> prefix;
  std::string address;

  std::vector<std::string> Command(const std::vector<std::string>& args) const {
    std::vector<std::string> command = prefix;
    command.insert(command.end(), args.begin(), args.end());
    return command;
  }
};

// Bazel ends a test that runs past its timeout with SIGTERM, which runs no
// destructor: the machines' processes (process groups of their own) and the
// namespaces would outlive the test. So while a test runs, SIGTERM and SIGINT
// kill those groups and delete the namespaces first, with async-signal-safe
// calls only (kill, fork, execv, waitpid), then end the test.
namespace signal_teardown {

char ip[64];
char namespaces[2][64];
volatile sig_atomic_t namespace_count = 0;
volatile pid_t groups[4];
volatile sig_atomic_t group_count = 0;

void OnSignal(int signal_number) {
  for (int i = 0; i < group_count; ++i) ::kill(-groups[i], SIGKILL);
  for (int i = 0; i < namespace_count; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      char netns[] = "netns", del[] = "delete";
      char* argv[] = {ip, netns, del, namespaces[i], nullptr};
      ::execv(ip, argv);
      ::_exit(127);
    }
    if (pid > 0) ::waitpid(pid, nullptr, 0);
  }
  ::signal(signal_number, SIG_DFL);
  ::raise(signal_number);
}

void AddNamespaces(const std::string& ip_path, const std::string& a, const std::string& b) {
  std::snprintf(ip, sizeof(ip), "%s", ip_path.c_str());
  std::snprintf(namespaces[0], sizeof(namespaces[0]), "%s", a.c_str());
  std::snprintf(namespaces[1], sizeof(namespaces[1]), "%s", b.c_str());
  namespace_count = 2;
}

void RemoveNamespaces() { namespace_count = 0; }

void AddProcessGroup(pid_t group) {
  if (group_count < 4) groups[group_count++] = group;
}

// Installs the handler for its lifetime; declare it before what it cleans up.
class Scope {
 public:
  Scope() {
    ::signal(SIGTERM, OnSignal);
    ::signal(SIGINT, OnSignal);
  }
  ~Scope() {
    ::signal(SIGTERM, SIG_DFL);
    ::signal(SIGINT, SIG_DFL);
    group_count = 0;
    namespace_count = 0;
  }
};

}  // namespace signal_teardown

// Two network namespaces joined by a veth pair, deleted (with the link) when
// this goes away, also when the test fails. Names carry the test's pid, so
// parallel runs never collide and leftovers of a killed run are recognised.
class NamespacePair {
 public:
  // nullptr, with the reason in *error, when namespaces cannot be made here.
  static std::unique_ptr<NamespacePair> Create(std::string* error) {
    const std::string ip = IpBinary();
    if (ip.empty()) {
      *error = "no `ip` binary (iproute2)";
      return nullptr;
    }
    DeleteLeftovers(ip);
    std::random_device random;
    const unsigned tag = random() % 0xffffff;
    const unsigned subnet = 1 + random() % 254;
    char suffix[32];
    std::snprintf(suffix, sizeof(suffix), "%d-%06x", static_cast<int>(::getpid()), tag);
    char veth_a[16], veth_b[16];  // interface names: 15 characters at most
    std::snprintf(veth_a, sizeof(veth_a), "ea%06x", tag);
    std::snprintf(veth_b, sizeof(veth_b), "eb%06x", tag);
    auto pair = std::unique_ptr<NamespacePair>(new NamespacePair(ip));
    const std::string ns_a = std::string(kNamespacePrefix) + "a-" + suffix;
    const std::string ns_b = std::string(kNamespacePrefix) + "b-" + suffix;
    const std::string net = "10.77." + std::to_string(subnet) + ".";
    signal_teardown::AddNamespaces(ip, ns_a, ns_b);
    pair->a_ = {{ip, "netns", "exec", ns_a}, net + "1"};
    pair->b_ = {{ip, "netns", "exec", ns_b}, net + "2"};
    const std::vector<std::string> setup = {
        "netns add " + ns_a,
        "netns add " + ns_b,
        std::string("link add name ") + veth_a + " netns " + ns_a + " type veth peer name " +
            veth_b + " netns " + ns_b,
        "-n " + ns_a + " addr add " + net + "1/24 dev " + veth_a,
        "-n " + ns_b + " addr add " + net + "2/24 dev " + veth_b,
        "-n " + ns_a + " link set lo up",
        "-n " + ns_b + " link set lo up",
        "-n " + ns_a + " link set " + veth_a + " up",
        "-n " + ns_b + " link set " + veth_b + " up",
    };
    for (const std::string& step : setup) {
      std::string output;
      if (RunCommand(ip + " " + step, &output) != 0) {
        *error = "`ip " + step + "` failed: " + output;
        return nullptr;  // ~NamespacePair deletes what was made
      }
      if (step.rfind("netns add ", 0) == 0) pair->namespaces_.push_back(step.substr(10));
    }
    return pair;
  }

  ~NamespacePair() {
    signal_teardown::RemoveNamespaces();
    for (const std::string& ns : namespaces_) {
      std::string output;
      if (RunCommand(ip_ + " netns delete " + ns, &output) != 0)
        std::cerr << "two_machines_test: could not delete namespace " << ns << ": " << output;
    }
  }

  const Machine& a() const { return a_; }
  const Machine& b() const { return b_; }
  std::string Describe() const {
    return "namespaces " + namespaces_[0] + " (" + a_.address + ") and " + namespaces_[1] + " (" +
           b_.address + ") joined by a veth pair";
  }

 private:
  explicit NamespacePair(std::string ip) : ip_(std::move(ip)) {}

  // Namespaces of earlier runs that were killed before their teardown.
  static void DeleteLeftovers(const std::string& ip) {
    std::string list;
    if (RunCommand(ip + " netns list", &list) != 0) return;
    const std::regex re(std::string(kNamespacePrefix) + "[ab]-(\\d+)-[0-9a-f]+");
    for (auto it = std::sregex_iterator(list.begin(), list.end(), re); it != std::sregex_iterator();
         ++it) {
      const pid_t owner = static_cast<pid_t>(std::stol((*it)[1]));
      if (owner == ::getpid() || ::kill(owner, 0) == 0) continue;
      std::string output;
      RunCommand(ip + " netns delete " + (*it)[0].str(), &output);
    }
  }

  std::string ip_;
  std::vector<std::string> namespaces_;
  Machine a_, b_;
};

TEST(TwoMachinesTest, AJoinFromAnotherMachineGrowsTheJobFromTwoToFour) {
  const signal_teardown::Scope teardown_on_signal;
  const std::string dir = FreshTempDir("two");
  std::string why_not;
  const std::unique_ptr<NamespacePair> namespaces = NamespacePair::Create(&why_not);
  Machine a, b;
  if (namespaces) {
    a = namespaces->a();
    b = namespaces->b();
    std::cout << "two_machines_test: MODE network-namespaces: " << namespaces->Describe()
              << std::endl;
  } else {
    // Same network stack: proves the --listen/--join plumbing, not routing.
    a = {{}, "127.0.0.2"};
    b = {{}, "127.0.0.1"};
    std::cout << "\n******************************************************************\n"
              << "two_machines_test: MODE loopback-fallback (127.0.0.2 / 127.0.0.1):\n"
              << "network namespaces are unavailable here: " << why_not
              << "******************************************************************" << std::endl;
  }

  // Up to 30 epochs: the test stops the job (SIGTERM to the driver) one epoch
  // after machine B's workers took effect, however long they took to start.
  const std::string run_dir = dir + "/run";
  Process driver(
      a.Command({kBinary, "--workers=2", "--listen=" + a.address, "--port=0",
                 "--token-file=" + dir + "/token", "--metrics-port=0", "--run-dir=" + run_dir,
                 "--checkpoint-dir=" + dir + "/checkpoint", "--model=resnet8",
                 "--dataset=fashion-mnist", "--train-samples=2048", "--test-samples=1000",
                 "--epochs=30", "--batch-size=32", "--lr=0.05", "--warmup-epochs=0", "--seed=1",
                 "--loader-threads=1", "--log-every=1"}),
      dir + "/machine-a.log");
  signal_teardown::AddProcessGroup(driver.pid());
  // Where its head listens: the address given, and the port it was given.
  const JobEvent start = WaitForEvent(run_dir, std::chrono::seconds(120),
                                      [](const JobEvent& e) { return e["event"] == "start"; });
  ASSERT_FALSE(start.is_null()) << driver.Output();
  const std::string head = start["head"].get<std::string>();
  ASSERT_EQ(head.rfind(a.address + ":", 0), 0u) << start.dump();
  // Machine B starts once epoch 1 ended at world 2: joiners enter at the next
  // commit, so started earlier they may enter within epoch 1 on a fast machine.
  const JobEvent first = WaitForEvent(run_dir, std::chrono::seconds(300), [](const JobEvent& e) {
    return e["event"] == "epoch" && e["epoch"] == 1 && e["epochs"] == 30 && e["world"] == 2;
  });
  ASSERT_FALSE(first.is_null()) << JobEvents::Read(run_dir).Text() << driver.Output();
  // The token file is the one secret machine B needs (copied over a trusted
  // channel in real life; here both machines see the same file system).
  Process joiner(
      b.Command({kBinary, "--join=" + head, "--workers=2", "--token-file=" + dir + "/token"}),
      dir + "/machine-b.log");
  signal_teardown::AddProcessGroup(joiner.pid());

  ASSERT_TRUE(StopAfterAnEpochWithWorld(driver, run_dir, 4, std::chrono::seconds(400)))
      << driver.Output() << joiner.Output();
  ASSERT_EQ(driver.Wait(std::chrono::seconds(300)), 3) << driver.Output() << joiner.Output();
  EXPECT_EQ(joiner.Wait(std::chrono::seconds(120)), 0) << joiner.Output();

  const JobEvents events = JobEvents::Read(run_dir);

  // The world went 2 -> 4 with machine B's workers in it.
  const std::vector<JobEvent> epochs = events.Of("epoch");
  ASSERT_GE(epochs.size(), 2u) << events.Text();
  EXPECT_EQ(epochs.front()["world"], 2) << events.Text();
  EXPECT_EQ(epochs.back()["world"], 4) << events.Text();
  // The controller published a view of four.
  bool view_of_four = false;
  for (const JobEvent& v : events.Of("view"))
    if (v["members"].size() == 4 && v["reason"] != "membership") view_of_four = true;
  EXPECT_TRUE(view_of_four) << events.Text();
  // Machine A's workers are the first generation's; B's are those of the
  // other node, and they trained at ranks 2 and 3 of a world of four.
  const std::vector<JobEvent> generations = events.Of("generation");
  ASSERT_FALSE(generations.empty()) << events.Text();
  std::set<uint64_t> nodes_of_a, members_of_b;
  for (const JobEvent& j : events.Of("join"))
    for (const JobEvent& m : generations.front()["members"])
      if (j["member"] == m) nodes_of_a.insert(j["node"].get<uint64_t>());
  EXPECT_EQ(nodes_of_a.size(), 1u) << events.Text();
  for (const JobEvent& j : events.Of("join"))
    if (nodes_of_a.count(j["node"].get<uint64_t>()) == 0)
      members_of_b.insert(j["member"].get<uint64_t>());
  EXPECT_EQ(members_of_b.size(), 2u) << events.Text();
  bool b_trained = false;
  for (const JobEvent& p : events.Of("params")) {
    if (members_of_b.count(p["member"].get<uint64_t>()) == 1 && p["world"] == 4 &&
        (p["rank"] == 2 || p["rank"] == 3))
      b_trained = true;
  }
  EXPECT_TRUE(b_trained) << "machine B's workers never trained\n" << events.Text();
  // Stopped at an epoch boundary with a checkpoint to continue from.
  const JobEvent end = events.Last("end");
  ASSERT_FALSE(end.is_null()) << events.Text();
  EXPECT_EQ(end["outcome"], "stopped") << events.Text();
  const JobEvent checkpoint = events.Last("checkpoint");
  ASSERT_FALSE(checkpoint.is_null()) << events.Text();
  EXPECT_EQ(checkpoint["path"].get<std::string>().rfind(dir + "/checkpoint/", 0), 0u)
      << events.Text();

  // Each machine's workers advertised their own machine's address to peers.
  std::vector<std::string> from_a, from_b;
  for (const JobEvent& j : events.Of("join")) {
    const bool of_a = nodes_of_a.count(j["node"].get<uint64_t>()) == 1;
    (of_a ? from_a : from_b).push_back(j["address"].get<std::string>());
  }
  ASSERT_EQ(from_a.size(), 2u) << events.Text();
  ASSERT_EQ(from_b.size(), 2u) << events.Text();
  if (namespaces) {
    for (const std::string& address : from_a) EXPECT_EQ(address, a.address);
    for (const std::string& address : from_b) EXPECT_EQ(address, b.address);
  }
  std::cout << "machine A workers at " << from_a[0] << ", " << from_a[1]
            << "; machine B workers at " << from_b[0] << ", " << from_b[1] << std::endl;

  ExpectOneChecksumPerGeneration(events);
}

}  // namespace
