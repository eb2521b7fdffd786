// The trainer's container image end to end (deploy/container): builds the
// image with deploy/container/build.sh, starts a controller container and two
// worker containers that join it on a podman network, stops one worker
// container (SIGTERM: its worker leaves at an epoch boundary), and checks that
// the job finishes with the invariants: one parameter checksum per
// generation, every sample of every epoch exactly once.
//
// Needs root, podman and runc (tools/setup.sh does not install them: see
// deploy/container/README.md); tagged manual, so `bazel test //...` leaves it
// out. Run it with deploy/container/test.sh.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/job_checks.h"
#include "tests/job_events.h"
#include "tests/process.h"

namespace {

using elastic::tests::ExpectEverySampleOnce;
using elastic::tests::ExpectOneChecksumPerGeneration;
using elastic::tests::FreshTempDir;
using elastic::tests::JobEvent;
using elastic::tests::JobEvents;
using elastic::tests::Process;
using elastic::tests::WaitForEvent;

constexpr int64_t kTrainSamples = 2048;
constexpr int kEpochs = 6;
constexpr char kFashionMnist[] = "/usr/share/datasets/fashion-mnist";

std::string Image() {
  const char* image = std::getenv("ELASTIC_TEST_IMAGE");
  return image != nullptr ? image : "elastic-trainer:test";
}

// Runs podman with `args`; its exit code, and its output in *output.
int Podman(const std::vector<std::string>& args, std::string* output = nullptr,
           std::chrono::seconds timeout = std::chrono::seconds(120)) {
  std::vector<std::string> command = {"/usr/bin/podman"};
  command.insert(command.end(), args.begin(), args.end());
  static int calls = 0;
  Process podman(command, FreshTempDir("podman-" + std::to_string(++calls)) + "/out.log");
  const int code = podman.Wait(timeout);
  if (output != nullptr) *output = podman.Output();
  return code;
}

std::string Trim(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// The repository holding this test's Dockerfile: the runfile is a link into
// the source tree (the test runs unsandboxed).
std::string Repository() {
  char path[PATH_MAX];
  if (::realpath("deploy/container/Dockerfile", path) == nullptr) return "";
  const std::string dockerfile = path;
  return dockerfile.substr(0,
                           dockerfile.size() - std::string("/deploy/container/Dockerfile").size());
}

// Removes the containers and the network of one test, whatever happened.
class Cleanup {
 public:
  explicit Cleanup(std::string network) : network_(std::move(network)) {}
  void Add(const std::string& container) { containers_.push_back(container); }
  ~Cleanup() {
    for (const std::string& container : containers_) Podman({"rm", "-f", "-t", "0", container});
    Podman({"network", "rm", "-f", network_});
  }

 private:
  std::string network_;
  std::vector<std::string> containers_;
};

TEST(ContainerTest, HeadAndTwoWorkerContainersSurviveAStoppedWorker) {
  ASSERT_EQ(::access("/usr/bin/podman", X_OK), 0)
      << "podman is not installed (deploy/container/README.md: apt-get install podman runc)";
  const std::string repository = Repository();
  ASSERT_FALSE(repository.empty()) << "cannot find the source tree";
  // runc and cgroupfs: what machines like CI's need (a caller's own setting wins).
  ::setenv("CONTAINERS_CONF", (repository + "/deploy/container/containers.conf").c_str(), 0);
  // The image, from this tree (cached layers make a rebuild quick).
  {
    Process build({repository + "/deploy/container/build.sh", Image()},
                  FreshTempDir("image") + "/build.log");
    ASSERT_EQ(build.Wait(std::chrono::seconds(3600)), 0) << build.Output();
  }

  const std::string suffix = std::to_string(::getpid());
  const std::string network = "elastic-test-" + suffix;
  Cleanup cleanup(network);
  ASSERT_EQ(Podman({"network", "create", network}), 0);

  // A shared directory for the token, the sample logs, the checkpoint and the
  // event log (dir/job/run here, /job/run in the head container), owned by the
  // image's non-root user (uid 10001).
  const std::string dir = FreshTempDir("container");
  ::mkdir((dir + "/job").c_str(), 0700);
  {
    std::random_device random;
    std::string token;
    for (int i = 0; i < 32; ++i) token += "0123456789abcdef"[random() % 16];
    std::ofstream(dir + "/job/token") << token << "\n";
  }
  ::chmod((dir + "/job/token").c_str(), 0600);
  ASSERT_EQ(::chown((dir + "/job").c_str(), 10001, 10001), 0);
  ASSERT_EQ(::chown((dir + "/job/token").c_str(), 10001, 10001), 0);
  const std::vector<std::string> volumes = {
      "-v", dir + "/job:/job", "-v", std::string(kFashionMnist) + ":" + kFashionMnist + ":ro"};

  const std::string head = "elastic-head-" + suffix;
  std::vector<std::string> run = {"run", "-d", "--name", head, "--network", network};
  run.insert(run.end(), volumes.begin(), volumes.end());
  for (const std::string& arg :
       {Image(), std::string("--controller-only"), std::string("--listen=0.0.0.0"),
        std::string("--port=6380"), std::string("--token-file=/job/token"),
        // One worker is enough to train on: the stopped one's leave must not
        // pause the job (the test waits for an epoch with both first).
        std::string("--min-workers=1"), std::string("--model=resnet8"),
        std::string("--dataset=fashion-mnist"), "--train-samples=" + std::to_string(kTrainSamples),
        std::string("--test-samples=500"), "--epochs=" + std::to_string(kEpochs),
        std::string("--batch-size=32"), std::string("--lr=0.05"), std::string("--warmup-epochs=0"),
        std::string("--seed=1"), std::string("--loader-threads=1"), std::string("--commit-every=8"),
        std::string("--log-samples=/job/samples"), std::string("--checkpoint-dir=/job/checkpoint"),
        std::string("--run-dir=/job/run")})
    run.push_back(arg);
  cleanup.Add(head);
  std::string out;
  ASSERT_EQ(Podman(run, &out), 0) << out;
  // No DNS on podman's CNI networks without the dnsname plugin: join by address.
  std::string address;
  ASSERT_EQ(
      Podman({"inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", head},
             &address),
      0);
  address = Trim(address);
  ASSERT_FALSE(address.empty());

  std::vector<std::string> workers;
  for (int i = 1; i <= 2; ++i) {
    const std::string name = "elastic-worker-" + std::to_string(i) + "-" + suffix;
    std::vector<std::string> join = {"run", "-d", "--name", name, "--network", network};
    join.insert(join.end(), volumes.begin(), volumes.end());
    for (const std::string& arg :
         {Image(), "--join=" + address + ":6380", std::string("--token-file=/job/token"),
          std::string("--workers=1")})
      join.push_back(arg);
    cleanup.Add(name);
    ASSERT_EQ(Podman(join, &out), 0) << out;
    workers.push_back(name);
  }

  // Training with world 2, then the second worker's container is stopped.
  const auto logs = [](const std::string& container) {
    std::string text;
    Podman({"logs", container}, &text);
    return text;
  };
  const std::string run_dir = dir + "/job/run";
  const JobEvent both = WaitForEvent(run_dir, std::chrono::seconds(300), [](const JobEvent& e) {
    return e["event"] == "epoch" && e["world"] == 2;
  });
  ASSERT_FALSE(both.is_null()) << JobEvents::Read(run_dir).Text() << logs(head) << logs(workers[0])
                               << logs(workers[1]);
  ASSERT_EQ(Podman({"stop", "-t", "120", workers[1]}, &out, std::chrono::seconds(180)), 0) << out;
  std::string code;
  ASSERT_EQ(Podman({"wait", head}, &code, std::chrono::seconds(600)), 0);
  const std::string driver = logs(head);
  const std::string all = driver + logs(workers[0]) + logs(workers[1]);
  const JobEvents events = JobEvents::Read(run_dir);
  EXPECT_EQ(Trim(code), "0") << all;
  std::string stopped;
  Podman({"inspect", "-f", "{{.State.ExitCode}}", workers[1]}, &stopped);
  EXPECT_EQ(Trim(stopped), "0") << "the stopped worker's agent drained and exited cleanly\n"
                                << logs(workers[1]);
  // The stopped worker asked to leave; after that the job trained an epoch alone.
  const std::vector<JobEvent>& logged = events.all();
  size_t leaving = logged.size();
  for (size_t i = 0; i < logged.size() && leaving == logged.size(); ++i)
    if (logged[i]["event"] == "draining") leaving = i;
  ASSERT_LT(leaving, logged.size()) << events.Text();
  bool alone = false;
  for (size_t i = leaving + 1; i < logged.size(); ++i) {
    if (logged[i]["event"] == "epoch" && logged[i]["epochs"] == kEpochs && logged[i]["world"] == 1)
      alone = true;
  }
  EXPECT_TRUE(alone) << events.Text();
  const JobEvent done = events.Last("done");
  ASSERT_FALSE(done.is_null()) << events.Text();
  EXPECT_EQ(done["epochs"], kEpochs) << events.Text();
  ExpectOneChecksumPerGeneration(events);
  ExpectEverySampleOnce(dir + "/job/samples", kTrainSamples, kEpochs);
}

}  // namespace
