// deploy/slurm/elastic.sbatch end to end on a real one-machine Slurm cluster
// (deploy/slurm/start_cluster.sh: munged, slurmctld, slurmd): sbatch runs the
// controller in the batch script and two job steps of one joining node agent
// each; once both agents' workers train, one step is ended with
// `scancel JOBID.STEP`, and the job must go on without it and finish with the
// invariants: one parameter checksum per generation, every sample of every
// epoch exactly once.
//
// Needs root and Debian's slurm-wlm and munge; starts daemons, so it runs
// outside the sandbox, and is tagged manual (`bazel test //...` leaves it
// out): deploy/slurm/README.md says how to run it.
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/elastic_job.h"
#include "tests/job_checks.h"
#include "tests/job_events.h"
#include "tests/process.h"

namespace {

using elastic::tests::ExpectEverySampleOnce;
using elastic::tests::ExpectOneChecksumPerGeneration;
using elastic::tests::FreshTempDir;
using elastic::tests::JobEvent;
using elastic::tests::JobEvents;
using elastic::tests::LastEpoch;
using elastic::tests::Process;
using elastic::tests::ReadFile;

using Clock = std::chrono::steady_clock;

constexpr int64_t kTrainSamples = 1024;
constexpr int kEpochs = 12;
// The stopped job: enough epochs that the stop comes before the end.
constexpr int kLongEpochs = 20;

// The absolute path of runfile `path` (the test runs unsandboxed, so it is a
// link into the source tree or bazel-out, which slurmd's steps can read too).
std::string Absolute(const std::string& path) {
  char resolved[PATH_MAX];
  return ::realpath(path.c_str(), resolved) != nullptr ? resolved : "";
}

// A TCP port that was free a moment ago.
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof(address);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), size) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) == 0)
    port = ntohs(address.sin_port);
  ::close(fd);
  return port;
}

// Runs `args` to completion; its exit code (-1 on timeout), its output in *output.
int RunCommand(const std::vector<std::string>& args, std::string* output = nullptr,
               std::chrono::seconds timeout = std::chrono::seconds(120)) {
  static int calls = 0;
  Process process(args, FreshTempDir("run-" + std::to_string(++calls)) + "/out.log");
  const int code = process.Wait(timeout);
  if (output != nullptr) *output = process.Output();
  return code;
}

// A one-machine Slurm cluster in a short directory of its own under /tmp
// (munge's socket path must stay short), stopped and removed at the end,
// whatever happened. SLURM_CONF points the Slurm commands at it.
class Cluster {
 public:
  Cluster() {
    char dir[] = "/tmp/elastic-slurm-test-XXXXXX";
    if (::mkdtemp(dir) == nullptr) return;
    dir_ = dir;
    ::setenv("ELASTIC_SLURMCTLD_PORT", std::to_string(FreePort()).c_str(), 1);
    ::setenv("ELASTIC_SLURMD_PORT", std::to_string(FreePort()).c_str(), 1);
    started_ = RunCommand({Absolute("deploy/slurm/start_cluster.sh"), dir_}, &log_) == 0;
    ::setenv("SLURM_CONF", (dir_ + "/slurm.conf").c_str(), 1);
  }
  ~Cluster() {
    if (!dir_.empty()) RunCommand({Absolute("deploy/slurm/stop_cluster.sh"), dir_, "--purge"});
  }
  bool started() const { return started_; }
  const std::string& log() const { return log_; }

 private:
  std::string dir_;
  std::string log_;
  bool started_ = false;
};

// The index in the job's event log in `run_dir` of its first epoch of a
// world of `world` workers after index `after` (-1: any), waiting up to 300 s
// for one; -1 if none came.
int WaitForEpochWithWorld(const std::string& run_dir, int world, int after = -1) {
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(300);
  while (true) {
    const JobEvents events = JobEvents::Read(run_dir);
    const std::vector<JobEvent>& all = events.all();
    for (int i = after + 1; i < static_cast<int>(all.size()); ++i)
      if (all[i]["event"] == "epoch" && all[i]["world"] == world) return i;
    if (Clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

// The job's steps as squeue lists them ("JOBID.0", "JOBID.1", "JOBID.batch").
std::vector<std::string> Steps(const std::string& job_id) {
  std::string out;
  RunCommand({"/usr/bin/squeue", "--steps", "--noheader", "--format=%i", "--jobs=" + job_id}, &out);
  std::vector<std::string> steps;
  const std::regex re(job_id + "\\.(\\d+)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator();
       ++it)
    steps.push_back((*it)[0]);
  return steps;
}

// One cluster for every test of this file: starting it takes seconds, but
// each test's jobs are its own.
class SlurmTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new Cluster(); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  void SetUp() override {
    ASSERT_EQ(::getuid(), 0u) << "starting slurmd needs root";
    ASSERT_EQ(::access("/usr/sbin/slurmctld", X_OK), 0)
        << "Slurm is not installed (deploy/slurm/README.md: apt-get install slurm-wlm munge)";
    ASSERT_TRUE(cluster_->started()) << cluster_->log();
    ASSERT_FALSE(Absolute("examples/cifar/cifar").empty());
    ASSERT_FALSE(Absolute("deploy/slurm/elastic.sbatch").empty());
  }

  // sbatch --wait of elastic.sbatch with two node agents as two steps on this
  // one node, one worker each; the job's directory is `job_dir` (the same one
  // continues a job), its log `log`, its event log in `run_dir`, and the
  // workers log their samples in `samples`. The returned process is sbatch,
  // which exits with the job.
  static std::unique_ptr<Process> Submit(const std::string& dir, const std::string& job_dir,
                                         const std::string& log, const std::string& run_dir,
                                         const std::string& samples, int epochs) {
    ::setenv("ELASTIC_CIFAR", Absolute("examples/cifar/cifar").c_str(), 1);
    ::setenv("ELASTIC_JOB_DIR", job_dir.c_str(), 1);
    ::setenv("ELASTIC_PORT", std::to_string(FreePort()).c_str(), 1);
    ::setenv("ELASTIC_AGENTS_PER_NODE", "2", 1);
    ::setenv("ELASTIC_WORKERS_PER_AGENT", "1", 1);
    return std::make_unique<Process>(
        std::vector<std::string>{
            "/usr/bin/sbatch", "--wait", "--parsable", "--nodes=1", "--ntasks-per-node=2",
            "--output=" + log, "--chdir=" + dir, Absolute("deploy/slurm/elastic.sbatch"),
            // The controller's training flags.
            "--min-workers=1", "--metrics-port=0", "--run-dir=" + run_dir, "--model=resnet8",
            "--dataset=fashion-mnist", "--train-samples=" + std::to_string(kTrainSamples),
            "--test-samples=500", "--epochs=" + std::to_string(epochs), "--batch-size=32",
            "--lr=0.05", "--warmup-epochs=0", "--seed=1", "--loader-threads=1", "--log-every=4",
            "--commit-every=8", "--log-samples=" + samples},
        log + ".sbatch");
  }

  // The job id sbatch --parsable printed ("" if none within a minute).
  static std::string JobId(Process& sbatch) {
    const std::smatch id = sbatch.WaitFor("^(\\d+)", std::chrono::seconds(60));
    return id.empty() ? "" : id[1].str();
  }

  static Cluster* cluster_;
};

Cluster* SlurmTest::cluster_ = nullptr;

// `scancel JOBID.STEP` kills a node agent's step (SIGKILL): its worker fails,
// the other one redoes the steps since the last commit and finishes alone.
TEST_F(SlurmTest, JobGoesOnWhenAnAgentStepIsCancelled) {
  const std::string dir = FreshTempDir("slurm-cancel");
  const std::string log = dir + "/job.log";
  const std::string run_dir = dir + "/run";
  std::unique_ptr<Process> sbatch =
      Submit(dir, dir + "/job", log, run_dir, dir + "/samples", kEpochs);
  const std::string job_id = JobId(*sbatch);
  ASSERT_FALSE(job_id.empty()) << sbatch->Output();

  // Both agents' workers train together (an epoch of world 2), then one step ends.
  const int two = WaitForEpochWithWorld(run_dir, 2);
  ASSERT_NE(two, -1) << JobEvents::Read(run_dir).Text() << ReadFile(log);
  const std::vector<std::string> steps = Steps(job_id);
  ASSERT_EQ(steps.size(), 2u) << ReadFile(log);
  ASSERT_EQ(RunCommand({"/usr/bin/scancel", steps.back()}), 0);

  // The job finishes in a world of one.
  ASSERT_EQ(sbatch->Wait(std::chrono::seconds(600)), 0) << ReadFile(log);
  const std::string output = ReadFile(log);
  const JobEvents events = JobEvents::Read(run_dir);
  EXPECT_NE(output.find("STEP " + steps.back() + " ON"), std::string::npos) << output;
  bool alone = false;
  for (int i = two + 1; i < static_cast<int>(events.all().size()); ++i) {
    const JobEvent& e = events.all()[i];
    if (e["event"] == "epoch" && e["world"] == 1) alone = true;
  }
  EXPECT_TRUE(alone) << "no epoch without the cancelled step:\n" << events.Text();
  const JobEvent done = events.Last("done");
  ASSERT_FALSE(done.is_null()) << events.Text();
  EXPECT_EQ(done["epochs"], kEpochs) << events.Text();
  ExpectOneChecksumPerGeneration(events);
  ExpectEverySampleOnce(dir + "/samples", kTrainSamples, kEpochs);
}

// `scancel --signal=TERM JOBID.STEP` drains a step: its worker leaves at an
// epoch boundary with status 0. Then SIGTERM to the batch script (what
// `#SBATCH --signal=B:TERM@120` sends before the time limit) stops the job
// with a checkpoint (exit 3), and the job submitted again with the same
// ELASTIC_JOB_DIR continues from it to the end.
TEST_F(SlurmTest, DrainedStepThenStoppedJobContinuesFromItsCheckpoint) {
  const std::string dir = FreshTempDir("slurm-stop");
  const std::string log = dir + "/job.log";
  const std::string run_dir = dir + "/run";
  std::unique_ptr<Process> sbatch =
      Submit(dir, dir + "/job", log, run_dir, dir + "/samples", kLongEpochs);
  const std::string job_id = JobId(*sbatch);
  ASSERT_FALSE(job_id.empty()) << sbatch->Output();

  const int two = WaitForEpochWithWorld(run_dir, 2);
  ASSERT_NE(two, -1) << JobEvents::Read(run_dir).Text() << ReadFile(log);
  const std::vector<std::string> steps = Steps(job_id);
  ASSERT_EQ(steps.size(), 2u) << ReadFile(log);
  ASSERT_EQ(RunCommand({"/usr/bin/scancel", "--signal=TERM", steps.back()}), 0);
  const int one = WaitForEpochWithWorld(run_dir, 1, two);
  ASSERT_NE(one, -1) << JobEvents::Read(run_dir).Text() << ReadFile(log);
  ASSERT_EQ(RunCommand({"/usr/bin/scancel", "--batch", "--signal=TERM", job_id}), 0);
  ASSERT_EQ(sbatch->Wait(std::chrono::seconds(600)), 3) << ReadFile(log);

  std::string output = ReadFile(log);
  JobEvents events = JobEvents::Read(run_dir);
  EXPECT_NE(output.find("SIGTERM to node agent"), std::string::npos) << output;
  // The drained worker asked to leave, and no worker failed.
  EXPECT_FALSE(events.Of("draining").empty()) << events.Text();
  for (const JobEvent& e : events.Of("leave")) EXPECT_NE(e["reason"], "failed") << events.Text();
  EXPECT_TRUE(events.Of("fault").empty()) << "a worker failed:\n" << events.Text();
  EXPECT_NE(output.find("elastic.sbatch: SIGTERM: stopping the job"), std::string::npos) << output;
  // Stopped with a checkpoint to continue from.
  const JobEvent end = events.Last("end");
  ASSERT_FALSE(end.is_null()) << events.Text();
  EXPECT_EQ(end["outcome"], "stopped") << events.Text();
  const JobEvent checkpoint = events.Last("checkpoint");
  ASSERT_FALSE(checkpoint.is_null()) << events.Text();
  EXPECT_EQ(checkpoint["path"].get<std::string>().rfind(dir + "/job/checkpoint/", 0), 0u)
      << events.Text();
  ExpectOneChecksumPerGeneration(events);
  // Every epoch the first job finished used every sample once.
  const int done_epochs = LastEpoch(events);
  ASSERT_GT(done_epochs, 0) << events.Text();
  ASSERT_LT(done_epochs, kLongEpochs) << "the job finished before it was stopped:\n"
                                      << events.Text();
  ExpectEverySampleOnce(dir + "/samples", kTrainSamples, done_epochs);

  // The same job directory: --resume from its checkpoint, to the last epoch.
  const std::string log2 = dir + "/job2.log";
  const std::string run_dir2 = dir + "/run2";
  std::unique_ptr<Process> again =
      Submit(dir, dir + "/job", log2, run_dir2, dir + "/samples2", kLongEpochs);
  ASSERT_EQ(again->Wait(std::chrono::seconds(600)), 0) << ReadFile(log2);
  output = ReadFile(log2);
  events = JobEvents::Read(run_dir2);
  // Which file it resumed from is in the worker's line only.
  EXPECT_NE(output.find("resuming from " + dir + "/job/checkpoint"), std::string::npos) << output;
  const std::vector<JobEvent> generations = events.Of("generation");
  ASSERT_FALSE(generations.empty()) << events.Text();
  EXPECT_EQ(generations.front()["source"], "resume") << events.Text();
  // Its first sync restored the boundary the first job stopped at.
  bool synced_at_resume = false;
  for (const JobEvent& p : events.Of("params")) {
    if (p["point"]["epoch"] == done_epochs && p["point"]["position"] == 0) synced_at_resume = true;
    EXPECT_GE(p["point"]["epoch"].get<int>(), done_epochs) << "it started over:\n" << events.Text();
  }
  EXPECT_TRUE(synced_at_resume) << events.Text();
  for (const JobEvent& e : events.Of("epoch"))
    EXPECT_GT(e["epoch"].get<int>(), done_epochs) << "it started over:\n" << events.Text();
  const JobEvent done = events.Last("done");
  ASSERT_FALSE(done.is_null()) << events.Text();
  EXPECT_EQ(done["epochs"], kLongEpochs) << events.Text();
  ExpectOneChecksumPerGeneration(events);
}

}  // namespace
