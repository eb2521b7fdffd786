#include "trainer/mpi_mode.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/elastic/elastic_options.h"
#include "trainer/train_options.h"

namespace elastic::trainer {
namespace {

TEST(MpiModeTest, DetectsMpirunFromItsEnvironment) {
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  EXPECT_FALSE(StartedByMpirun());
  ::setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  EXPECT_TRUE(StartedByMpirun());
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
}

// The flags `args` give, checked as a process that mpirun started checks them.
std::string Rejection(std::vector<std::string> args) {
  TrainOptions train;
  ElasticOptions elastic;
  FlagSet flags("cifar", "");
  RegisterTrainFlags(flags, train);
  RegisterElasticFlags(flags, elastic);
  args.insert(args.begin(), "cifar");
  std::vector<const char*> argv;
  for (const std::string& arg : args) argv.push_back(arg.c_str());
  flags.Parse(static_cast<int>(argv.size()), argv.data());
  try {
    ValidateMpiRun(flags, ProcessFlagsOfEveryMode());
  } catch (const FlagError& e) {
    return e.what();
  }
  return "";
}

TEST(MpiModeTest, AcceptsTrainingFlags) {
  EXPECT_EQ(Rejection({}), "");
  EXPECT_EQ(Rejection({"--model=resnet8", "--lr=0.05", "--batch-size", "64", "--no-augment",
                       "--checkpoint-dir=/tmp/x", "--threads=2"}),
            "");
}

// The event log is every mode's: mpirun's ranks write it too.
TEST(MpiModeTest, AcceptsTheRunDirectory) {
  EXPECT_EQ(Rejection({"--run-dir=/tmp/run", "--model=resnet8"}), "");
  TrainOptions train;
  ElasticOptions elastic;
  FlagSet flags("cifar", "");
  RegisterTrainFlags(flags, train);
  RegisterElasticFlags(flags, elastic);
  const char* argv[] = {"cifar", "--run-dir=/tmp/run"};
  flags.Parse(2, argv);
  // Only where the registering side says so: by scope alone it is this
  // process's, as --workers is.
  EXPECT_THROW(ValidateMpiRun(flags), FlagError);
}

TEST(MpiModeTest, RejectsElasticFlagsNamingThem) {
  EXPECT_NE(Rejection({"--workers=4"}).find("--workers is a flag of the elastic trainer"),
            std::string::npos);
  EXPECT_NE(Rejection({"--join", "head:6380"}).find("--join"), std::string::npos);
  EXPECT_NE(Rejection({"--global-batch=256"}).find("--global-batch"), std::string::npos);
  EXPECT_NE(Rejection({"--global-batch=256"}).find("mpirun"), std::string::npos);
  EXPECT_NE(Rejection({"--per-worker-batch"}).find("--per-worker-batch"), std::string::npos);
  // Given at its default value is still given: mpirun has no such setting.
  EXPECT_NE(Rejection({"--commit-every=20"}).find("--commit-every"), std::string::npos);
}

// Every flag the elastic trainer registers is refused, by its declared
// scope: before scopes, a list kept here missed seven of them.
TEST(MpiModeTest, RejectsEveryElasticFlagItWasNotToldAbout) {
  for (const char* flag :
       {"--controller-only", "--admit-at=epoch", "--step-timeout=10", "--join-window=1",
        "--heartbeat-timeout=5", "--state-copy-every=2", "--preemption-notice=gce"}) {
    EXPECT_NE(Rejection({flag}).find("is a flag of the elastic trainer"), std::string::npos)
        << flag;
  }
  TrainOptions train;
  ElasticOptions elastic;
  FlagSet flags("cifar", "");
  RegisterTrainFlags(flags, train);
  RegisterElasticFlags(flags, elastic);
  int elastic_flags = 0;
  const std::vector<std::string> every_mode = ProcessFlagsOfEveryMode();
  EXPECT_EQ(every_mode, std::vector<std::string>{"run-dir"});
  for (const FlagSet::Described& flag : flags.Describe()) {
    if (flag.scope == FlagScope::kTraining) continue;
    if (std::find(every_mode.begin(), every_mode.end(), flag.name) != every_mode.end()) continue;
    ++elastic_flags;
    const std::string arg = flag.kind == 'b'       ? "--" + flag.name
                            : flag.choices.empty() ? "--" + flag.name + "=1"
                                                   : "--" + flag.name + "=" + flag.choices.back();
    EXPECT_NE(Rejection({arg}).find("--" + flag.name + " is a flag"), std::string::npos) << arg;
  }
  EXPECT_EQ(elastic_flags, 28);
}

TEST(MpiModeTest, SharesTheCoresAmongTheRanksOfThisMachine) {
  ::setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "1", 1);
  const int64_t all = MpiThreadsPerRank();
  EXPECT_GE(all, 1);
  ::setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "1000000", 1);
  EXPECT_EQ(MpiThreadsPerRank(), 1);
  ::setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
  EXPECT_EQ(MpiThreadsPerRank(), std::max<int64_t>(1, all / 2));
  ::unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
}

}  // namespace
}  // namespace elastic::trainer
