// End-to-end tests of the fixed-size MPI mode: real `mpirun` starting real
// ranks of //trainer:cifar (resnet8 on a subset of Fashion-MNIST) that talk
// over Open MPI's TCP transport on loopback.
//
// What they check, from the processes' own output:
// - two ranks train to accuracy; each rank logs a checksum of its parameters
//   at the start (after rank 0's broadcast) and at the end, and they agree;
// - rank 0 alone prints the progress, one summary line per epoch;
// - two ranks of per-rank batch B and lr L train like one process of batch 2B
//   and lr 2L (same samples in every step, same schedule);
// - a run stopped after one epoch and resumed from rank 0's checkpoint ends
//   with parameters bit-identical to the uninterrupted run;
// - three ranks over a data set whose last step is too short to give every
//   rank a sample (weighted gradients, a filler sample) finish in agreement;
// - the elastic flags and a missing checkpoint are refused with clear errors.
#include <stdlib.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/job_checks.h"
#include "tests/process.h"

namespace {

using elastic::tests::FreshTempDir;

using elastic::tests::Process;

constexpr char kMpirun[] = "/usr/bin/mpirun";
constexpr std::chrono::seconds kJobTimeout(480);

std::string Binary() {
  char* path = ::realpath("trainer/cifar", nullptr);
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

double FinalAccuracy(const std::string& output) {
  std::smatch m;
  const std::regex re("done: \\d+ epochs, \\d+ steps, test accuracy ([0-9.]+)%");
  if (!std::regex_search(output, m, re)) return -1;
  return std::stod(m[1]);
}

// The first match of `pattern`'s group 1 in `output`, or "".
std::string Field(const std::string& output, const std::string& pattern) {
  std::smatch m;
  if (!std::regex_search(output, m, std::regex(pattern))) return "";
  return m[1];
}

int Count(const std::string& output, const std::string& pattern) {
  const std::regex re(pattern);
  return static_cast<int>(std::distance(std::sregex_iterator(output.begin(), output.end(), re),
                                        std::sregex_iterator()));
}

// The parameter checksum each rank logged at `when` ("start" or "end").
std::map<int, std::string> Checksums(const std::string& output, int ranks,
                                     const std::string& when) {
  const std::regex re("rank (\\d+) of " + std::to_string(ranks) + ": parameters at " + when +
                      ": checksum=([0-9a-f]{16})");
  std::map<int, std::string> by_rank;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), re);
       it != std::sregex_iterator(); ++it) {
    by_rank[std::stoi((*it)[1])] = (*it)[2];
  }
  return by_rank;
}

// Every rank logged a checksum at `when`, all equal; returns it.
std::string AgreedChecksum(const std::string& output, int ranks, const std::string& when) {
  const std::map<int, std::string> sums = Checksums(output, ranks, when);
  EXPECT_EQ(sums.size(), static_cast<size_t>(ranks))
      << "not every rank logged its checksum at " << when << "\n"
      << output;
  if (sums.empty()) return "";
  for (const auto& [rank, sum] : sums) {
    EXPECT_EQ(sum, sums.begin()->second) << "rank " << rank << " differs at " << when;
  }
  return sums.begin()->second;
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
                                             "--checkpoint-dir=" + dir + "/checkpoint"})),
              dir + "/mpirun.log");
  ASSERT_EQ(job.Wait(kJobTimeout), 0) << job.Output();
  const std::string output = job.Output();
  EXPECT_NE(output.find("mpirun: 2 ranks, 32 images per rank and step, lr 0.05 x 2"),
            std::string::npos)
      << output;
  // resnet8 after 2 epochs of 3072 samples: ~68% on the first 2000 test images.
  const double accuracy = FinalAccuracy(output);
  EXPECT_GE(accuracy, 55.0) << output;
  // Rank 0 alone reports: one summary line per epoch, one result.
  EXPECT_EQ(Count(output, "epoch 1/2 train loss"), 1) << output;
  EXPECT_EQ(Count(output, "epoch 2/2 train loss"), 1) << output;
  EXPECT_EQ(Count(output, "done: "), 1) << output;
  EXPECT_EQ(Count(output, "step 48/48 \\(global 96\\)"), 1) << "2 x 32 samples per step";
  AgreedChecksum(output, 2, "start");
  g_two_rank_checksum = AgreedChecksum(output, 2, "end");
  EXPECT_TRUE(Exists(dir + "/checkpoint/checkpoint.ckpt"));

  // One process, batch 2 x 32 and lr 2 x 0.05: every step trains on the same
  // 64 samples with the same learning rate, and the allreduced average of two
  // 32-sample mean gradients is the 64-sample mean gradient. What differs is
  // batch normalisation (each rank normalises with the statistics of its own
  // 32 samples) and the order of float sums, so the runs agree closely but not
  // bit for bit.
  std::vector<std::string> single_args = {Binary(), "--batch-size=64", "--lr=0.1"};
  for (const std::string& flag : TrainFlags(2)) single_args.push_back(flag);
  Process single(single_args, dir + "/single.log");
  ASSERT_EQ(single.Wait(kJobTimeout), 0) << single.Output();
  const double single_accuracy = FinalAccuracy(single.Output());
  ASSERT_GE(single_accuracy, 0) << single.Output();
  const std::string single_output = single.Output();
  // The learning rate of the same step is the same: --lr x ranks.
  const std::string lr_at_step_16 =
      "epoch 1/2 step 16/48 \\(global 16\\) loss [0-9.]+ acc [0-9.]+% lr ([0-9.e-]+) ";
  EXPECT_EQ(Field(output, lr_at_step_16), Field(single_output, lr_at_step_16));
  EXPECT_FALSE(Field(output, lr_at_step_16).empty()) << output;
  // Measured (seed 1, two runs each): np=2 68.15% and 68.10%, one process
  // 68.15% and 67.85%; one process with seed 2: 68.80%. 3 points is several
  // times both the np=2 / one-process difference and the seed-to-seed spread.
  // (It does not catch a missing lr scaling: lr 0.05 ends at 66.80%; the
  // lr comparison above does.)
  EXPECT_NEAR(accuracy, single_accuracy, 3.0)
      << "np=2 and one process of the same global batch disagree\n"
      << output << single_output;
}

TEST(MpiTest, ResumeFromRankZerosCheckpointContinuesExactly) {
  const std::string dir = FreshTempDir("resume");
  const std::vector<std::string> flags = Plus(
      TrainFlags(2), {"--batch-size=32", "--lr=0.05", "--checkpoint-dir=" + dir + "/checkpoint"});
  // Stop after the first epoch (48 steps of 2 x 32), then resume the second.
  Process first(Mpirun(2, Plus(flags, {"--max-steps=48"})), dir + "/first.log");
  ASSERT_EQ(first.Wait(kJobTimeout), 0) << first.Output();
  EXPECT_NE(first.Output().find("done: 1 epochs, 48 steps"), std::string::npos) << first.Output();
  ASSERT_TRUE(Exists(dir + "/checkpoint/checkpoint.ckpt"));
  const std::string after_first = AgreedChecksum(first.Output(), 2, "end");

  Process second(Mpirun(2, Plus(flags, {"--resume"})), dir + "/second.log");
  ASSERT_EQ(second.Wait(kJobTimeout), 0) << second.Output();
  const std::string output = second.Output();
  EXPECT_EQ(Count(output, "resumed from .* at epoch 2, position 0, step 48"), 1) << output;
  // Rank 1 never read the file: it starts from what rank 0 broadcast.
  EXPECT_EQ(AgreedChecksum(output, 2, "start"), after_first);
  EXPECT_EQ(Count(output, "epoch 1/2 train loss"), 0) << output;
  EXPECT_EQ(Count(output, "epoch 2/2 train loss"), 1) << output;
  const std::string final_sum = AgreedChecksum(output, 2, "end");
  // The training is deterministic (fixed seed, ordered sums over two ranks,
  // augmentation a function of seed, epoch and sample), so the interrupted run
  // must end exactly where the uninterrupted one did.
  if (!g_two_rank_checksum.empty()) {
    EXPECT_EQ(final_sum, g_two_rank_checksum)
        << "the resumed run does not end with the uninterrupted run's parameters\n"
        << output;
  }
}

TEST(MpiTest, ThreeRanksFinishAShortLastStepWithoutSamplesForOneRank) {
  const std::string dir = FreshTempDir("three");
  // 962 = 10 steps of 3 x 32, then a last step of 2 samples: ranks 0 and 1
  // train one each, rank 2 none (a zero-weighted filler sample).
  Process job(Mpirun(3, {"--model=resnet8", "--dataset=fashion-mnist", "--train-samples=962",
                         "--test-samples=500", "--epochs=1", "--batch-size=32", "--lr=0.05",
                         "--seed=1", "--loader-threads=1", "--log-every=1"}),
              dir + "/mpirun.log");
  ASSERT_EQ(job.Wait(kJobTimeout), 0) << job.Output();
  const std::string output = job.Output();
  EXPECT_EQ(Count(output, "step 11/11 \\(global 11\\)"), 1) << output;
  EXPECT_EQ(Count(output, "epoch 1/1 train loss"), 1) << output;
  AgreedChecksum(output, 3, "start");
  AgreedChecksum(output, 3, "end");
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
  Process job(Mpirun(2, Plus(TrainFlags(1), {"--resume", "--checkpoint-dir=" + dir + "/none"})),
              dir + "/mpirun.log");
  ASSERT_GT(job.Wait(std::chrono::seconds(120)), 0) << job.Output();
  const std::string output = job.Output();
  EXPECT_NE(output.find("cifar: error (MPI rank 0 of 2): "), std::string::npos) << output;
  EXPECT_NE(output.find(dir + "/none/checkpoint.ckpt"), std::string::npos)
      << "rank 0's error names the file\n"
      << output;
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
