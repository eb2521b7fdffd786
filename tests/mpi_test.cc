// End-to-end tests of the fixed-size MPI mode: real `mpirun` starting real
// ranks of //trainer:cifar (resnet8 on a subset of Fashion-MNIST) that talk
// over Open MPI's TCP transport on loopback.
//
// What they check, from the job's event log (<--run-dir>/events.jsonl,
// docs/events.md), which every rank appends to:
// - two ranks train to accuracy; each rank logs a checksum of its parameters
//   (a `params` event) at the start (after rank 0's broadcast) and at the
//   end, and they agree;
// - rank 0 alone reports the progress, one `epoch` event per epoch;
// - two ranks of per-rank batch B and lr L train like one process of batch 2B
//   and lr 2L (same samples in every step, same schedule);
// - a run stopped after one epoch and resumed from rank 0's checkpoint ends
//   with parameters bit-identical to the uninterrupted run;
// - three ranks over a data set whose last step is too short to give every
//   rank a sample (weighted gradients, a filler sample) finish in agreement;
// - the elastic flags and a missing checkpoint are refused with clear errors
//   (those, the words for people, from the processes' output).
#include <stdlib.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/job_checks.h"
#include "tests/job_events.h"
#include "tests/process.h"

namespace {

using elastic::tests::FreshTempDir;
using elastic::tests::JobEvent;
using elastic::tests::JobEvents;
using elastic::tests::Process;

constexpr char kMpirun[] = "/usr/bin/mpirun";
constexpr std::chrono::seconds kJobTimeout(480);

std::string Binary() {
  char* path = ::realpath("examples/cifar/cifar", nullptr);
  if (path == nullptr) std::abort();
  std::string result(path);
  std::free(path);
  return result;
}

// The training flags of every run but the batch size and learning rate.
std::vector<std::string> TrainFlags(int epochs) {
  return {"--model=resnet8", "--dataset=fashion-mnist", "--train-samples=3072",
          "--test-samples=2000", "--epochs=" + std::to_string(epochs), "--seed=1",
          "--warmup-epochs=0", "--loader-threads=1", "--log-every=16",
          // The even split: shares sized by speed follow the ranks' timings,
          // and the resume below must end bit for bit where the
          // uninterrupted run did (docs/elastic.md, --no-balance).
          "--no-balance"};
}

std::vector<std::string> Mpirun(int ranks, const std::vector<std::string>& flags) {
  std::vector<std::string> args = {kMpirun, "--allow-run-as-root", "--oversubscribe",
                                   "-np",   std::to_string(ranks), Binary()};
  args.insert(args.end(), flags.begin(), flags.end());
  return args;
}

std::vector<std::string> Plus(std::vector<std::string> flags,
                              const std::vector<std::string>& more) {
  flags.insert(flags.end(), more.begin(), more.end());
  return flags;
}

// The final test accuracy (percent) of a run: its `done` event's, or -1.
double FinalAccuracy(const JobEvents& events) {
  const JobEvent done = events.Last("done");
  return done.is_null() ? -1 : 100 * done["test_metric"].get<double>();
}

// How many `epoch` events the run logged for epoch `epoch` (counted from 1).
int EpochEvents(const JobEvents& events, int epoch) {
  int count = 0;
  for (const JobEvent& e : events.Of("epoch"))
    if (e["epoch"] == epoch) ++count;
  return count;
}

// The `params` events of each rank, in its order: the start's (after the
// sync), then the end's (docs/events.md, "Fixed-size runs").
std::map<int, std::vector<JobEvent>> ParamsByRank(const JobEvents& events) {
  std::map<int, std::vector<JobEvent>> by_rank;
  for (const JobEvent& p : events.Of("params")) by_rank[p["rank"].get<int>()].push_back(p);
  return by_rank;
}

// The `params` event each rank logged at `when` ("start" or "end").
std::map<int, JobEvent> Checksums(const JobEvents& events, const std::string& when) {
  std::map<int, JobEvent> by_rank;
  for (const auto& [rank, params] : ParamsByRank(events)) {
    EXPECT_EQ(params.size(), 2u) << "rank " << rank << ": one at the start, one at the end\n"
                                 << events.Text();
    const size_t index = when == "start" ? 0 : 1;
    if (index < params.size()) by_rank[rank] = params[index];
  }
  return by_rank;
}

// Every rank of `ranks` logged a checksum at `when`, all equal, at the same
// point (at the end: where the run's `done` says it ended); returns it.
std::string AgreedChecksum(const JobEvents& events, int ranks, const std::string& when) {
  const std::map<int, JobEvent> sums = Checksums(events, when);
  EXPECT_EQ(sums.size(), static_cast<size_t>(ranks))
      << "not every rank logged its checksum at " << when << "\n"
      << events.Text();
  if (sums.empty()) return "";
  const JobEvent& first = sums.begin()->second;
  for (const auto& [rank, params] : sums) {
    EXPECT_EQ(params["world"], ranks) << params.dump();
    EXPECT_EQ(params["generation"], 0) << params.dump();
    EXPECT_EQ(params["member"], rank) << params.dump();
    EXPECT_EQ(params["checksum"], first["checksum"]) << "rank " << rank << " differs at " << when;
    EXPECT_EQ(params["point"], first["point"]) << "rank " << rank << " at " << when;
  }
  const JobEvent done = events.Last("done");
  if (when == "end" && !done.is_null()) {
    EXPECT_EQ(first["point"]["step"], done["steps"]) << events.Text();
    EXPECT_EQ(first["point"]["epoch"], done["epochs"]) << events.Text();
  }
  return first["checksum"].get<std::string>();
}

// Rank 0 logged the run from its start to its end, which is this exit code.
void ExpectOneRun(const JobEvents& events, int ranks, int exit_code) {
  ASSERT_EQ(events.Of("start").size(), 1u) << events.Text();
  EXPECT_EQ(events.all().front()["event"], "start") << events.Text();
  EXPECT_EQ(events.all().front()["workers"], ranks);
  EXPECT_EQ(events.all().back()["event"], "end") << events.Text();
  EXPECT_EQ(events.Of("end").size(), 1u) << events.Text();
  EXPECT_EQ(events.all().back()["exit_code"], exit_code) << events.Text();
}

bool Exists(const std::string& path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0;
}

// Results of the uninterrupted two-rank run, for the tests after it (tests run
// in the order of this file).
std::string g_two_rank_checksum;

TEST(MpiTest, TwoRanksTrainLikeOneProcessOfTheirGlobalBatch) {
  const std::string dir = FreshTempDir("two");
  Process job(Mpirun(2, Plus(TrainFlags(2), {"--batch-size=32", "--lr=0.05",
                                             "--checkpoint-dir=" + dir + "/checkpoint",
                                             "--run-dir=" + dir + "/run"})),
              dir + "/mpirun.log");
  ASSERT_EQ(job.Wait(kJobTimeout), 0) << job.Output();
  const std::string output = job.Output();
  EXPECT_NE(output.find("mpirun: 2 ranks, 32 images per rank and step, lr 0.05 x 2"),
            std::string::npos)
      << output;
  const JobEvents events = JobEvents::Read(dir + "/run");
  ExpectOneRun(events, 2, 0);
  // resnet8 after 2 epochs of 3072 samples: ~68% on the first 2000 test images.
  const double accuracy = FinalAccuracy(events);
  EXPECT_GE(accuracy, 55.0) << events.Text();
  // Rank 0 alone reports: one summary per epoch, one result.
  EXPECT_EQ(EpochEvents(events, 1), 1) << events.Text();
  EXPECT_EQ(EpochEvents(events, 2), 1) << events.Text();
  EXPECT_EQ(events.Of("epoch").size(), 2u) << events.Text();
  ASSERT_EQ(events.Of("done").size(), 1u) << events.Text();
  // 48 steps an epoch: 2 x 32 samples per step.
  EXPECT_EQ(events.Last("done")["steps"], 96) << events.Text();
  EXPECT_EQ(events.Last("done")["epochs"], 2) << events.Text();
  for (const JobEvent& e : events.Of("epoch")) EXPECT_EQ(e["world"], 2) << e.dump();
  AgreedChecksum(events, 2, "start");
  g_two_rank_checksum = AgreedChecksum(events, 2, "end");
  EXPECT_TRUE(Exists(dir + "/checkpoint/checkpoint.ckpt"));
  const JobEvent checkpoint = events.Last("checkpoint");
  ASSERT_FALSE(checkpoint.is_null()) << events.Text();
  EXPECT_EQ(checkpoint["path"], dir + "/checkpoint/checkpoint.ckpt");
  EXPECT_EQ(checkpoint["point"]["step"], 96);

  // One process, batch 2 x 32 and lr 2 x 0.05: every step trains on the same
  // 64 samples with the same learning rate, and the allreduced average of two
  // 32-sample mean gradients is the 64-sample mean gradient. What differs is
  // batch normalisation (each rank normalises with the statistics of its own
  // 32 samples) and the order of float sums, so the runs agree closely but not
  // bit for bit.
  std::vector<std::string> single_args = {Binary(), "--batch-size=64", "--lr=0.1",
                                          "--run-dir=" + dir + "/single-run"};
  for (const std::string& flag : TrainFlags(2)) single_args.push_back(flag);
  Process single(single_args, dir + "/single.log");
  ASSERT_EQ(single.Wait(kJobTimeout), 0) << single.Output();
  const JobEvents single_events = JobEvents::Read(dir + "/single-run");
  ExpectOneRun(single_events, 1, 0);
  const double single_accuracy = FinalAccuracy(single_events);
  ASSERT_GE(single_accuracy, 0) << single_events.Text();
  EXPECT_EQ(single_events.Last("done")["steps"], 96) << single_events.Text();
  // The learning rate of the same step is the same: --lr x ranks (at each
  // epoch's last step: 48, halfway down the cosine, and 96, its end at 0).
  const std::vector<JobEvent> epochs = events.Of("epoch");
  const std::vector<JobEvent> single_epochs = single_events.Of("epoch");
  ASSERT_EQ(single_epochs.size(), epochs.size()) << single_events.Text();
  ASSERT_FALSE(epochs.empty()) << events.Text();
  EXPECT_GT(epochs[0]["learning_rate"].get<double>(), 0) << epochs[0].dump();
  for (size_t i = 0; i < epochs.size(); ++i) {
    EXPECT_DOUBLE_EQ(epochs[i]["learning_rate"].get<double>(),
                     single_epochs[i]["learning_rate"].get<double>())
        << "epoch " << i + 1;
  }
  // Measured (seed 1, two runs each): np=2 68.15% and 68.10%, one process
  // 68.15% and 67.85%; one process with seed 2: 68.80%. 3 points is several
  // times both the np=2 / one-process difference and the seed-to-seed spread.
  // (It does not catch a missing lr scaling: lr 0.05 ends at 66.80%; the
  // lr comparison above does.)
  EXPECT_NEAR(accuracy, single_accuracy, 3.0)
      << "np=2 and one process of the same global batch disagree\n"
      << events.Text() << single_events.Text();
}

TEST(MpiTest, ResumeFromRankZerosCheckpointContinuesExactly) {
  const std::string dir = FreshTempDir("resume");
  const std::vector<std::string> flags = Plus(
      TrainFlags(2), {"--batch-size=32", "--lr=0.05", "--checkpoint-dir=" + dir + "/checkpoint"});
  // Stop after the first epoch (48 steps of 2 x 32), then resume the second.
  Process first(Mpirun(2, Plus(flags, {"--max-steps=48", "--run-dir=" + dir + "/first"})),
                dir + "/first.log");
  ASSERT_EQ(first.Wait(kJobTimeout), 0) << first.Output();
  const JobEvents first_events = JobEvents::Read(dir + "/first");
  ExpectOneRun(first_events, 2, 0);
  const JobEvent first_done = first_events.Last("done");
  ASSERT_FALSE(first_done.is_null()) << first_events.Text();
  EXPECT_EQ(first_done["epochs"], 1) << first_events.Text();
  EXPECT_EQ(first_done["steps"], 48) << first_events.Text();
  ASSERT_TRUE(Exists(dir + "/checkpoint/checkpoint.ckpt"));
  const std::string after_first = AgreedChecksum(first_events, 2, "end");

  Process second(Mpirun(2, Plus(flags, {"--resume", "--run-dir=" + dir + "/second"})),
                 dir + "/second.log");
  ASSERT_EQ(second.Wait(kJobTimeout), 0) << second.Output();
  const JobEvents events = JobEvents::Read(dir + "/second");
  ExpectOneRun(events, 2, 0);
  // Rank 1 never read the file: it starts from what rank 0 broadcast, the
  // point of the checkpoint (epoch 2 to people, 1 counted from 0).
  EXPECT_EQ(AgreedChecksum(events, 2, "start"), after_first);
  for (const auto& [rank, params] : Checksums(events, "start")) {
    EXPECT_EQ(params["point"], (JobEvent{{"epoch", 1}, {"position", 0}, {"step", 48}}))
        << params.dump();
  }
  EXPECT_EQ(EpochEvents(events, 1), 0) << events.Text();
  EXPECT_EQ(EpochEvents(events, 2), 1) << events.Text();
  EXPECT_EQ(events.Last("done")["steps"], 96) << events.Text();
  const std::string final_sum = AgreedChecksum(events, 2, "end");
  // The training is deterministic (fixed seed, ordered sums over two ranks,
  // augmentation a function of seed, epoch and sample), so the interrupted run
  // must end exactly where the uninterrupted one did.
  if (!g_two_rank_checksum.empty()) {
    EXPECT_EQ(final_sum, g_two_rank_checksum)
        << "the resumed run does not end with the uninterrupted run's parameters\n"
        << events.Text();
  }
}

TEST(MpiTest, ThreeRanksFinishAShortLastStepWithoutSamplesForOneRank) {
  const std::string dir = FreshTempDir("three");
  // 962 = 10 steps of 3 x 32, then a last step of 2 samples: ranks 0 and 1
  // train one each, rank 2 none (a zero-weighted filler sample).
  Process job(
      Mpirun(3, {"--model=resnet8", "--dataset=fashion-mnist", "--train-samples=962",
                 "--test-samples=500", "--epochs=1", "--batch-size=32", "--lr=0.05", "--seed=1",
                 "--loader-threads=1", "--log-every=1", "--run-dir=" + dir + "/run"}),
      dir + "/mpirun.log");
  ASSERT_EQ(job.Wait(kJobTimeout), 0) << job.Output();
  const JobEvents events = JobEvents::Read(dir + "/run");
  ExpectOneRun(events, 3, 0);
  ASSERT_EQ(events.Of("done").size(), 1u) << events.Text();
  EXPECT_EQ(events.Last("done")["steps"], 11) << events.Text();
  EXPECT_EQ(events.Last("done")["epochs"], 1) << events.Text();
  EXPECT_EQ(EpochEvents(events, 1), 1) << events.Text();
  AgreedChecksum(events, 3, "start");
  AgreedChecksum(events, 3, "end");
}

// A refused run: mpirun exits non-zero and the output names the problem.
void ExpectRefused(const std::vector<std::string>& flags, const std::string& message) {
  const std::string dir = FreshTempDir("refused");
  Process job(Mpirun(2, flags), dir + "/mpirun.log");
  const int code = job.Wait(std::chrono::seconds(120));
  EXPECT_NE(code, 0) << job.Output();
  EXPECT_NE(code, -1) << "mpirun did not exit\n" << job.Output();
  EXPECT_NE(job.Output().find(message), std::string::npos) << job.Output();
}

TEST(MpiTest, ElasticFlagsAreRefused) {
  ExpectRefused({"--workers=2", "--model=resnet8"},
                "cifar: --workers is a flag of the elastic trainer, but this process was "
                "started by mpirun");
  ExpectRefused({"--join=127.0.0.1:6380", "--token-file=/nonexistent", "--workers=1"},
                "is a flag of the elastic trainer");
  ExpectRefused({"--global-batch=64"}, "cifar: --global-batch is a flag of the elastic trainer");
}

TEST(MpiTest, MissingCheckpointIsAClearError) {
  const std::string dir = FreshTempDir("missing");
  Process job(Mpirun(2, Plus(TrainFlags(1), {"--resume", "--checkpoint-dir=" + dir + "/none",
                                             "--run-dir=" + dir + "/run"})),
              dir + "/mpirun.log");
  ASSERT_GT(job.Wait(std::chrono::seconds(120)), 0) << job.Output();
  const std::string output = job.Output();
  EXPECT_NE(output.find("cifar: error (MPI rank 0 of 2): "), std::string::npos) << output;
  EXPECT_NE(output.find(dir + "/none/checkpoint.ckpt"), std::string::npos)
      << "rank 0's error names the file\n"
      << output;
  // Nothing trained. Rank 0's log ends in the error, unless mpirun ended
  // rank 0 first, for rank 1's own error (the sync it waited in failed).
  const JobEvents events = JobEvents::Read(dir + "/run");
  EXPECT_EQ(events.Of("start").size(), 1u) << events.Text();
  EXPECT_TRUE(events.Of("epoch").empty()) << events.Text();
  EXPECT_TRUE(events.Of("done").empty()) << events.Text();
  const JobEvent end = events.Last("end");
  if (!end.is_null()) {
    EXPECT_EQ(end["outcome"], "error") << events.Text();
    EXPECT_NE(end["reason"].get<std::string>().find(dir + "/none/checkpoint.ckpt"),
              std::string::npos)
        << events.Text();
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Open MPI under Bazel: a writable home, TCP on loopback only (as in
  // collectives/mpi_communicator_test.sh).
  const char* tmp = std::getenv("TEST_TMPDIR");
  ::setenv("HOME", tmp != nullptr ? tmp : "/tmp", 1);
  ::setenv("OMPI_MCA_btl", "self,tcp", 1);
  ::setenv("OMPI_MCA_btl_tcp_if_include", "lo", 1);
  ::setenv("OMPI_MCA_oob_tcp_if_include", "lo", 1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
