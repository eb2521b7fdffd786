#include "trainer/progress.h"

#include "gtest/gtest.h"

namespace elastic::trainer {
namespace {

TEST(ProgressTest, AnEvaluationLineSaysWhereAndWhat) {
  EvaluationSummary s;
  s.step = 250;
  s.epoch = 1;
  s.epoch_fraction = 0.191;
  s.world = 2;
  s.test_loss = 1.8821;
  s.test_accuracy = 0.441;
  s.seconds = 0.84;
  MetricLabel language_model;
  language_model.name = "token accuracy";
  language_model.perplexity = true;
  EXPECT_EQ(FormatEvaluation(s, language_model),
            "eval step 250 (epoch 1, 19%) world 2 | test loss 1.8821 perplexity 6.567 token "
            "accuracy 44.10% | 0.8s");
  EXPECT_EQ(FormatEvaluation(s, MetricLabel{}),
            "eval step 250 (epoch 1, 19%) world 2 | test loss 1.8821 acc 44.10% | 0.8s");
}

}  // namespace
}  // namespace elastic::trainer
