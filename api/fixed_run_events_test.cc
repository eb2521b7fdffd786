#include "api/fixed_run_events.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace elastic {
namespace {

using Json = nlohmann::json;

std::string TempPath(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::filesystem::path dir =
      std::filesystem::path(tmp != nullptr ? tmp : "/tmp") / ("fixed-run-events-" + name);
  std::filesystem::remove_all(dir);
  return (dir / "events.jsonl").string();
}

std::vector<Json> ReadEvents(const std::string& path) {
  std::vector<Json> events;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) events.push_back(Json::parse(line));
  return events;
}

trainer::MetricLabel Accuracy() { return trainer::MetricLabel(); }

// A run of two ranks as each rank's FixedWorld tells it: the events
// docs/events.md names, generation 0, member ids the ranks.
TEST(FixedRunEventsTest, WritesTheElasticJobsEventsForAFixedWorld) {
  const std::string path = TempPath("run");
  {
    trainer::EventLog log(path, [](const std::string& line) { FAIL() << line; });
    FixedRunEvents rank0(log, Accuracy());
    FixedRunEvents rank1(log, Accuracy());
    trainer::TrainOptions options;
    options.model = "resnet8";
    options.dataset = "fashion-mnist";
    options.epochs = 2;
    rank0.Start("00ff00ff00ff00ff", options, 2);
    rank0.OnParams(0, 2, trainer::StatePoint{1, 0, 48}, 0x0123456789abcdefULL, false);
    rank1.OnParams(1, 2, trainer::StatePoint{1, 0, 48}, 0x0123456789abcdefULL, false);
    trainer::EvaluationSummary evaluation;
    evaluation.step = 60;
    evaluation.epoch = 2;
    evaluation.epoch_fraction = 0.25;
    evaluation.world = 2;
    evaluation.test_loss = 0.9;
    evaluation.test_accuracy = 0.6;
    evaluation.seconds = 0.5;
    rank0.OnEvaluation(evaluation);
    trainer::EpochSummary epoch;
    epoch.epoch = 2;
    epoch.epochs = 2;
    epoch.world = 2;
    epoch.train_loss = 0.8;
    epoch.train_accuracy = 0.7;
    epoch.test_loss = 0.85;
    epoch.test_accuracy = 0.68;
    epoch.images_per_second = 500;
    epoch.seconds = 6;
    epoch.lr = 0.001;
    epoch.arithmetic = "fp32, contiguous";
    rank0.OnEpochEnd(epoch);
    rank0.OnCheckpoint(trainer::StatePoint{2, 0, 96}, "/c/checkpoint.ckpt");
    rank1.OnParams(1, 2, trainer::StatePoint{2, 0, 96}, 0xfedcba9876543210ULL, true);
    rank0.OnParams(0, 2, trainer::StatePoint{2, 0, 96}, 0xfedcba9876543210ULL, true);
    rank0.OnFinished(trainer::StatePoint{2, 0, 96}, 0.68, false);
    rank0.End(0, "the job is done");
  }
  const std::vector<Json> e = ReadEvents(path);
  ASSERT_EQ(e.size(), 10u);
  std::vector<std::string> names;
  for (const Json& event : e) names.push_back(event["event"]);
  EXPECT_EQ(names, (std::vector<std::string>{"start", "params", "params", "evaluation", "epoch",
                                             "checkpoint", "params", "params", "done", "end"}));
  EXPECT_EQ(e[0]["job_id"], "00ff00ff00ff00ff");
  EXPECT_EQ(e[0]["taken_over"], false);
  EXPECT_EQ(e[0]["model"], "resnet8");
  EXPECT_EQ(e[0]["dataset"], "fashion-mnist");
  EXPECT_EQ(e[0]["epochs"], 2);
  EXPECT_EQ(e[0]["workers"], 2);
  EXPECT_EQ(e[0]["metric"], "accuracy");
  EXPECT_EQ(e[2]["generation"], 0);
  EXPECT_EQ(e[2]["member"], 1);
  EXPECT_EQ(e[2]["rank"], 1);
  EXPECT_EQ(e[2]["world"], 2);
  EXPECT_EQ(e[2]["checksum"], "0123456789abcdef");
  EXPECT_EQ(e[2]["point"], (Json{{"epoch", 1}, {"position", 0}, {"step", 48}}));
  EXPECT_EQ(e[2]["pid"], static_cast<int>(::getpid()));
  EXPECT_EQ(e[3]["step"], 60);
  EXPECT_EQ(e[3]["epoch_fraction"], 0.25);
  EXPECT_EQ(e[3]["test_metric"], 0.6);
  EXPECT_EQ(e[4]["epoch"], 2);
  EXPECT_EQ(e[4]["world"], 2);
  EXPECT_EQ(e[4]["train_loss"], 0.8);
  EXPECT_EQ(e[4]["train_metric"], 0.7);
  EXPECT_EQ(e[4]["test_loss"], 0.85);
  EXPECT_EQ(e[4]["test_metric"], 0.68);
  EXPECT_EQ(e[4]["samples_per_second"], 500);
  EXPECT_EQ(e[4]["tokens_per_second"], 0);
  EXPECT_EQ(e[4]["learning_rate"], 0.001);
  EXPECT_EQ(e[4]["arithmetic"], "fp32, contiguous");
  EXPECT_EQ(e[5]["path"], "/c/checkpoint.ckpt");
  EXPECT_EQ(e[5]["writer"], "worker");
  EXPECT_EQ(e[5]["point"]["step"], 96);
  EXPECT_EQ(e[7]["checksum"], "fedcba9876543210");
  EXPECT_EQ(e[7]["point"]["epoch"], 2);
  EXPECT_EQ(e[8]["generation"], 0);
  EXPECT_EQ(e[8]["epochs"], 2);
  EXPECT_EQ(e[8]["steps"], 96);
  EXPECT_EQ(e[8]["test_metric"], 0.68);
  EXPECT_EQ(e[8]["early_stop"], false);
  EXPECT_EQ(e[9]["exit_code"], 0);
  EXPECT_EQ(e[9]["outcome"], "done");
  EXPECT_EQ(e[9]["reason"], "the job is done");
}

// A language model's throughput is also counted in tokens, as the driver does.
TEST(FixedRunEventsTest, CountsTokensOfALanguageModel) {
  trainer::MetricLabel tokens;
  tokens.unit = "tok";
  tokens.units_per_sample = 64;
  trainer::EpochSummary epoch;
  epoch.images_per_second = 10;
  EXPECT_EQ(EpochEvent(epoch, tokens).tokens_per_second, 640);
  EXPECT_EQ(EpochEvent(epoch, Accuracy()).tokens_per_second, 0);
  EXPECT_EQ(EpochEvent(epoch, tokens).samples_per_second, 10);
}

// --max-steps inside an epoch: the epochs completed in all, as an elastic
// job's `done` counts them.
TEST(FixedRunEventsTest, DoneCountsTheEpochsCompleted) {
  const trainer::run_event::Done done = DoneEvent(trainer::StatePoint{1, 320, 13}, 0.5, true);
  EXPECT_EQ(done.generation, 0u);
  EXPECT_EQ(done.epochs, 1);
  EXPECT_EQ(done.steps, 13);
  EXPECT_EQ(done.test_metric, 0.5);
  EXPECT_TRUE(done.early_stop);
}

}  // namespace
}  // namespace elastic
