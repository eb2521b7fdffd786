#include "trainer/mpi_mode.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace elastic::trainer {
namespace {

TEST(MpiModeTest, DetectsMpirunFromItsEnvironment) {
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  EXPECT_FALSE(StartedByMpirun());
  ::setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  EXPECT_TRUE(StartedByMpirun());
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
}

TEST(MpiModeTest, AcceptsTheDefaults) { EXPECT_NO_THROW(ValidateMpiRun(ElasticOptions())); }

std::string Rejection(const ElasticOptions& o) {
  try {
    ValidateMpiRun(o);
  } catch (const FlagError& e) {
    return e.what();
  }
  return "";
}

TEST(MpiModeTest, RejectsElasticFlagsNamingThem) {
  ElasticOptions workers;
  workers.workers = 4;
  EXPECT_NE(Rejection(workers).find("--workers is a flag of the elastic trainer"),
            std::string::npos);
  ElasticOptions join;
  join.join = "head:6380";
  EXPECT_NE(Rejection(join).find("--join"), std::string::npos);
  ElasticOptions global_batch;
  global_batch.global_batch = 256;
  EXPECT_NE(Rejection(global_batch).find("--global-batch"), std::string::npos);
  EXPECT_NE(Rejection(global_batch).find("mpirun"), std::string::npos);
  ElasticOptions per_worker;
  per_worker.per_worker_batch = true;
  EXPECT_NE(Rejection(per_worker).find("--per-worker-batch"), std::string::npos);
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
