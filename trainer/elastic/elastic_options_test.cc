#include "trainer/elastic/elastic_options.h"

#include <chrono>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/elastic/protocol/job_spec.h"

namespace elastic::trainer {
namespace {

void ExpectFlagError(const ElasticOptions& options, const std::string& names) {
  try {
    ValidateElasticOptions(options, TrainOptions());
    FAIL() << "accepted, expected an error naming " << names;
  } catch (const FlagError& e) {
    EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
  }
}

TEST(ElasticOptionsTest, ImpossibleCombinationsNameTheFlag) {
  ElasticOptions o;
  o.workers = 2;
  ValidateElasticOptions(o, TrainOptions());  // the defaults are valid

  ElasticOptions join = o;
  join.join = "head:6380";
  ExpectFlagError(join, "--token-file");
  join.token_file = "token";
  join.workers = 0;
  ExpectFlagError(join, "--workers");
  join.workers = 1;
  join.join = "head";
  ExpectFlagError(join, "--join");
  join.join = "head:99999";
  ExpectFlagError(join, "--join");

  ElasticOptions bounds = o;
  bounds.min_workers = 4;
  bounds.max_workers = 3;
  ExpectFlagError(bounds, "--max-workers");
  bounds = o;
  bounds.commit_every = 0;
  ExpectFlagError(bounds, "--commit-every");
  bounds = o;
  bounds.rendezvous_timeout = 0;
  ExpectFlagError(bounds, "--rendezvous-timeout");
  bounds = o;
  bounds.heartbeat_timeout = 0.1;  // one heartbeat interval: one late beat would fail a peer
  ExpectFlagError(bounds, "--heartbeat-timeout");
  bounds.heartbeat_timeout = 0.2;
  ValidateElasticOptions(bounds, TrainOptions());
}

TEST(ElasticOptionsTest, PreemptionNoticeSourcesAreChecked) {
  ElasticOptions o;
  o.workers = 2;
  for (const char* good : {"gce", "aws", "gce:http://127.0.0.1:8080", "https://notice/x"}) {
    o.preemption_notice = good;
    ValidateElasticOptions(o, TrainOptions());
  }
  o.preemption_notice = "azure";
  ExpectFlagError(o, "--preemption-notice=azure: expected gce, aws");
  ElasticOptions controller;
  controller.controller_only = true;
  controller.preemption_notice = "gce";
  ExpectFlagError(controller, "--controller-only runs none");
}

TEST(ElasticOptionsTest, GlobalBatchNeedsASampleForEveryWorker) {
  ElasticOptions o;
  o.workers = 4;
  o.global_batch = 3;
  ExpectFlagError(o, "--global-batch=3 is below --workers=4");
  o.global_batch = 4;
  ValidateElasticOptions(o, TrainOptions());  // one sample per worker and step
  o.max_workers = 6;
  ExpectFlagError(o, "--max-workers=6");
  o.global_batch = 100;  // not divisible by any world: shares differ by one
  ValidateElasticOptions(o, TrainOptions());
  o.global_batch = -1;
  ExpectFlagError(o, "--global-batch");
}

TEST(ElasticOptionsTest, OneGlobalBatchByDefault) {
  ElasticOptions o;
  TrainOptions train;
  train.batch_size = 96;
  EXPECT_EQ(GlobalBatch(o, train), 96);  // --batch-size a step, whatever the world
  o.global_batch = 1000;
  EXPECT_EQ(GlobalBatch(o, train), 1000);
  o.global_batch = 0;
  o.per_worker_batch = true;
  EXPECT_EQ(GlobalBatch(o, train), 0);  // --batch-size per worker, lr x world

  ElasticOptions many;
  many.workers = 200;
  ExpectFlagError(many, "the global batch (--batch-size=128) is below --workers=200");
  many.per_worker_batch = true;
  ValidateElasticOptions(many, TrainOptions());
  many.global_batch = 256;
  ExpectFlagError(many, "--per-worker-batch and --global-batch=256 do not go together");
}

TEST(ElasticOptionsTest, Bf16IsAccepted) {
  ElasticOptions o;
  o.workers = 2;
  TrainOptions train;
  train.precision = "bf16";
  ValidateElasticOptions(o, train);  // bf16 autocast on CPU; gradients stay float32
}

TEST(ElasticOptionsTest, FlagsParseOnTheSharedFlagSet) {
  const JobSettings job =
      SettingsFromFlags({"--workers=4", "--model=resnet8", "--min-workers", "2", "--commit-every=5",
                         "--join=10.0.0.1:6380", "--role=worker"});
  const TrainOptions& train = job.train;
  const ElasticOptions& elastic = job.elastic;
  EXPECT_EQ(elastic.workers, 4);
  EXPECT_EQ(train.model, "resnet8");
  EXPECT_EQ(elastic.min_workers, 2);
  EXPECT_EQ(elastic.commit_every, 5);
  EXPECT_EQ(elastic.role, "worker");
  EXPECT_TRUE(IsElasticRun(elastic));
  std::string host;
  uint16_t port = 0;
  ParseHostPort(elastic.join, &host, &port);
  EXPECT_EQ(host, "10.0.0.1");
  EXPECT_EQ(port, 6380);
  EXPECT_THROW(SettingsFromFlags({"--role=driver"}), FlagError);
  EXPECT_FALSE(IsElasticRun(ElasticOptions()));
}

TEST(ElasticOptionsTest, AdmissionAndJoinWindow) {
  EXPECT_EQ(ElasticOptions().admit_at, "commit");
  const ElasticOptions elastic =
      SettingsFromFlags({"--admit-at=epoch", "--join-window=0.5"}).elastic;
  EXPECT_EQ(elastic.admit_at, "epoch");
  EXPECT_DOUBLE_EQ(elastic.join_window, 0.5);
  try {
    SettingsFromFlags({"--admit-at=step"});
    FAIL() << "--admit-at=step accepted";
  } catch (const FlagError& e) {
    EXPECT_NE(std::string(e.what()).find("--admit-at"), std::string::npos) << e.what();
  }
  ElasticOptions o;
  o.workers = 2;
  o.join_window = -1;
  ExpectFlagError(o, "--join-window");
  o.join_window = 601;
  ExpectFlagError(o, "--join-window");
  o.join_window = 0;
  ValidateElasticOptions(o, TrainOptions());
}

TEST(ElasticOptionsTest, StateDirIsTheDriversOnly) {
  TrainOptions train;
  ElasticOptions elastic;
  elastic.controller_only = true;
  elastic.state_dir = "/tmp/job-state";
  EXPECT_NO_THROW(ValidateElasticOptions(elastic, train));
  elastic.controller_only = false;
  elastic.join = "h:1";
  elastic.workers = 1;
  elastic.token_file = "t";
  try {
    ValidateElasticOptions(elastic, train);
    ADD_FAILURE() << "--state-dir with --join accepted";
  } catch (const FlagError& e) {
    EXPECT_NE(std::string(e.what()).find("--state-dir"), std::string::npos) << e.what();
  }
}

TEST(ElasticOptionsTest, ReconnectTimeoutIsBounded) {
  TrainOptions train;
  for (double seconds : {-1.0, 86401.0}) {
    ElasticOptions elastic;
    elastic.reconnect_timeout = seconds;
    try {
      ValidateElasticOptions(elastic, train);
      ADD_FAILURE() << "--reconnect-timeout=" << seconds << " accepted";
    } catch (const FlagError& e) {
      EXPECT_NE(std::string(e.what()).find("--reconnect-timeout"), std::string::npos) << e.what();
    }
  }
  ElasticOptions elastic;
  elastic.reconnect_timeout = 0;  // give up at once
  EXPECT_NO_THROW(ValidateElasticOptions(elastic, train));
}

TEST(ElasticOptionsTest, ControllerOnlyRunsNoWorkersAndTakesNoJoin) {
  TrainOptions train;
  ElasticOptions elastic;
  elastic.controller_only = true;
  EXPECT_TRUE(IsElasticRun(elastic));
  EXPECT_NO_THROW(ValidateElasticOptions(elastic, train));
  elastic.workers = 2;
  EXPECT_THROW(ValidateElasticOptions(elastic, train), FlagError);
  elastic.workers = 0;
  elastic.join = "h:1";
  EXPECT_THROW(ValidateElasticOptions(elastic, train), FlagError);
}

TEST(ElasticOptionsTest, StateCopyAndStepTimeoutBounds) {
  TrainOptions train;
  ElasticOptions elastic;
  elastic.workers = 1;
  elastic.state_copy_every = -1;
  EXPECT_THROW(ValidateElasticOptions(elastic, train), FlagError);
  elastic.state_copy_every = 0;
  EXPECT_NO_THROW(ValidateElasticOptions(elastic, train));
  elastic.step_timeout = 0.5;
  EXPECT_THROW(ValidateElasticOptions(elastic, train), FlagError);
}

// Every process of a job talks to the head with these: the timeout the user
// gave, and a heartbeat every tenth of it.
TEST(ElasticOptionsTest, TheTransportHeartbeatsEveryTenthOfTheTimeout) {
  ElasticOptions elastic;
  runtime::TransportOptions transport = TransportFor(elastic);
  EXPECT_EQ(transport.heartbeat_timeout, std::chrono::milliseconds(3000));
  EXPECT_EQ(transport.heartbeat_interval, std::chrono::milliseconds(300));
  elastic.heartbeat_timeout = 0.5;
  transport = TransportFor(elastic);
  EXPECT_EQ(transport.heartbeat_timeout, std::chrono::milliseconds(500));
  EXPECT_EQ(transport.heartbeat_interval, std::chrono::milliseconds(50));
  // What the runtime requires of every transport: the interval below the timeout.
  EXPECT_LT(transport.heartbeat_interval, transport.heartbeat_timeout);
}

}  // namespace
}  // namespace elastic::trainer
