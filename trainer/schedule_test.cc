// Learning-rate schedules, warm-up and early stopping, value by value.
#include "trainer/schedule.h"

#include <gtest/gtest.h>

#include <cmath>

#include "trainer/bytes.h"

namespace elastic::trainer {
namespace {

ScheduleOptions Options(ScheduleKind kind) {
  ScheduleOptions o;
  o.kind = kind;
  o.base_lr = 0.1;
  o.total_epochs = 10;
  return o;
}

TEST(ScheduleTest, CosineFollowsHalfACosine) {
  ScheduleOptions o = Options(ScheduleKind::kCosine);
  LrSchedule s(o);
  EXPECT_DOUBLE_EQ(s.LearningRate(0, 0), 0.1);
  EXPECT_NEAR(s.LearningRate(5, 0), 0.05, 1e-12);
  EXPECT_NEAR(s.LearningRate(2.5, 0), 0.05 * (1 + std::cos(M_PI / 4)), 1e-12);
  EXPECT_NEAR(s.LearningRate(10, 0), 0, 1e-12);
  EXPECT_NEAR(s.LearningRate(12, 0), 0, 1e-12);  // stays at the floor after the end
  o.min_lr = 0.01;
  EXPECT_NEAR(LrSchedule(o).LearningRate(10, 0), 0.01, 1e-12);
  EXPECT_NEAR(LrSchedule(o).LearningRate(5, 0), 0.055, 1e-12);
}

TEST(ScheduleTest, WarmupRisesLinearlyThenCosineSpansTheRest) {
  ScheduleOptions o = Options(ScheduleKind::kCosine);
  o.warmup_epochs = 2;
  LrSchedule s(o);
  EXPECT_DOUBLE_EQ(s.LearningRate(0, 0), 0);
  EXPECT_NEAR(s.LearningRate(0.5, 0), 0.025, 1e-12);
  EXPECT_NEAR(s.LearningRate(1, 0), 0.05, 1e-12);
  EXPECT_NEAR(s.LearningRate(2, 0), 0.1, 1e-12);
  EXPECT_NEAR(s.LearningRate(6, 0), 0.05, 1e-12);  // half-way through the 8 cosine epochs
  EXPECT_NEAR(s.LearningRate(10, 0), 0, 1e-12);
}

TEST(ScheduleTest, WarmupStepsAloneRiseByTheStep) {
  ScheduleOptions o = Options(ScheduleKind::kConstant);
  o.warmup_steps = 100;
  LrSchedule s(o);
  EXPECT_NEAR(s.LearningRate(0.01, 1), 0.001, 1e-12);
  EXPECT_NEAR(s.LearningRate(3, 50), 0.05, 1e-12);  // epochs do not matter
  EXPECT_NEAR(s.LearningRate(0.1, 100), 0.1, 1e-12);
  EXPECT_NEAR(s.LearningRate(0.1, 5000), 0.1, 1e-12);
}

TEST(ScheduleTest, WarmupLastsUntilBothItsEpochsAndItsStepsHavePassed) {
  ScheduleOptions o = Options(ScheduleKind::kConstant);
  o.warmup_epochs = 5;
  o.warmup_steps = 100;
  LrSchedule s(o);
  // A world of 8 on 4,068 images: 4 steps an epoch, so the steps are the longer ramp.
  EXPECT_NEAR(s.WarmupFactor(20.0 / 4, 20), 0.2, 1e-12);
  EXPECT_NEAR(s.LearningRate(20.0 / 4, 20), 0.02, 1e-12);
  EXPECT_NEAR(s.LearningRate(100.0 / 4, 100), 0.1, 1e-12);
  // A world of 1 on 50,000 images: 391 steps an epoch, so the epochs are.
  EXPECT_NEAR(s.WarmupFactor(100.0 / 391, 100), 0.0511509, 1e-6);
  EXPECT_NEAR(s.WarmupFactor(5, 1955), 1, 1e-12);
  // The warm-up scales the decayed rate: with cosine, the product of both.
  o.kind = ScheduleKind::kCosine;
  o.warmup_epochs = 0;
  o.warmup_steps = 10;
  EXPECT_NEAR(LrSchedule(o).LearningRate(5, 5), 0.5 * 0.05, 1e-12);
}

// nanoGPT's CPU recipe on tiny Shakespeare: lr 1e-3, 100 warm-up steps, cosine
// to 1e-4 at step 2,000 (its get_lr: lr * it / warmup_iters, then
// min_lr + 0.5 * (1 + cos(pi * (it - warmup) / (decay - warmup))) * (lr - min_lr)).
TEST(ScheduleTest, CosineOverStepsIsNanoGptsSchedule) {
  ScheduleOptions o = Options(ScheduleKind::kCosine);
  o.base_lr = 1e-3;
  o.min_lr = 1e-4;
  o.warmup_steps = 100;
  o.decay_steps = 2000;
  o.total_epochs = 1;  // the epochs do not count
  LrSchedule s(o);
  EXPECT_NEAR(s.LearningRate(0.01, 1), 1e-5, 1e-15);
  EXPECT_NEAR(s.LearningRate(0.5, 50), 5e-4, 1e-15);
  EXPECT_NEAR(s.LearningRate(3, 100), 1e-3, 1e-15);
  EXPECT_NEAR(s.LearningRate(7, 1050), 1e-4 + 0.5 * 9e-4, 1e-15);  // half-way
  const double quarter = 1e-4 + 0.5 * (1 + std::cos(3.14159265358979323846 * 0.25)) * 9e-4;
  EXPECT_NEAR(s.LearningRate(9, 575), quarter, 1e-15);
  EXPECT_NEAR(s.LearningRate(10, 2000), 1e-4, 1e-15);
  EXPECT_NEAR(s.LearningRate(12, 2500), 1e-4, 1e-15);  // then the floor
  o.decay_steps = 100;
  EXPECT_THROW(LrSchedule{o}, std::invalid_argument);  // no steps left to decay over
}

TEST(ScheduleTest, NegativeWarmupIsRefused) {
  ScheduleOptions o = Options(ScheduleKind::kCosine);
  o.warmup_steps = -1;
  EXPECT_THROW(LrSchedule{o}, std::invalid_argument);
  o.warmup_steps = 0;
  o.warmup_epochs = -0.5;
  EXPECT_THROW(LrSchedule{o}, std::invalid_argument);
}

TEST(ScheduleTest, StepDecaysEveryStepSizeEpochs) {
  ScheduleOptions o = Options(ScheduleKind::kStep);
  o.step_size = 3;
  o.gamma = 0.1;
  LrSchedule s(o);
  EXPECT_NEAR(s.LearningRate(0, 0), 0.1, 1e-12);
  EXPECT_NEAR(s.LearningRate(2.99, 0), 0.1, 1e-12);
  EXPECT_NEAR(s.LearningRate(3, 0), 0.01, 1e-12);
  EXPECT_NEAR(s.LearningRate(6.5, 0), 0.001, 1e-12);
}

TEST(ScheduleTest, ConstantIgnoresProgress) {
  LrSchedule s(Options(ScheduleKind::kConstant));
  EXPECT_DOUBLE_EQ(s.LearningRate(0, 0), 0.1);
  EXPECT_DOUBLE_EQ(s.LearningRate(9, 0), 0.1);
}

TEST(ScheduleTest, PlateauDropsAfterPatienceAndSurvivesSaveLoad) {
  ScheduleOptions o = Options(ScheduleKind::kPlateau);
  o.plateau_patience = 2;
  o.plateau_factor = 0.5;
  o.min_lr = 0.02;
  LrSchedule s(o);
  s.EndEpoch(1.0);
  s.EndEpoch(0.9);   // improvement
  s.EndEpoch(0.9);   // bad 1
  s.EndEpoch(0.91);  // bad 2: not yet more than patience
  EXPECT_DOUBLE_EQ(s.LearningRate(4, 0), 0.1);
  s.EndEpoch(0.8999999);  // bad 3: below the 1e-4 relative threshold, not an improvement
  EXPECT_DOUBLE_EQ(s.LearningRate(5, 0), 0.05);

  LrSchedule restored(o);
  restored.Load(s.Save());
  EXPECT_DOUBLE_EQ(restored.LearningRate(5, 0), 0.05);
  for (int i = 0; i < 3; ++i) restored.EndEpoch(2.0);  // counting continues from the save
  EXPECT_DOUBLE_EQ(restored.LearningRate(8, 0), 0.025);
  for (int i = 0; i < 3; ++i) restored.EndEpoch(2.0);
  EXPECT_DOUBLE_EQ(restored.LearningRate(11, 0), 0.02);  // floored at min_lr
}

TEST(ScheduleTest, StateOfAnotherScheduleIsRejected) {
  LrSchedule cosine(Options(ScheduleKind::kCosine));
  LrSchedule plateau(Options(ScheduleKind::kPlateau));
  EXPECT_THROW(plateau.Load(cosine.Save()), StateFormatError);
  const std::string bytes = plateau.Save();
  EXPECT_THROW(plateau.Load(bytes.substr(0, bytes.size() - 1)), StateFormatError);
  EXPECT_THROW(plateau.Load(bytes + "x"), StateFormatError);
}

TEST(EarlyStoppingTest, StopsAfterPatienceEpochsWithoutImprovement) {
  EarlyStopping stop(3);
  EXPECT_FALSE(stop.Update(1.0));
  EXPECT_FALSE(stop.Update(0.8));
  EXPECT_FALSE(stop.Update(0.81));
  EXPECT_FALSE(stop.Update(0.82));
  EarlyStopping restored(3);
  restored.Load(stop.Save());
  EXPECT_EQ(restored.bad_epochs(), 2);
  EXPECT_TRUE(restored.Update(0.83));
  EXPECT_TRUE(stop.Update(0.8));  // equal is not better
}

TEST(EarlyStoppingTest, ImprovementResetsAndZeroPatienceNeverStops) {
  EarlyStopping stop(2);
  stop.Update(1.0);
  stop.Update(1.1);
  EXPECT_FALSE(stop.Update(0.5));
  EXPECT_EQ(stop.bad_epochs(), 0);
  EarlyStopping never(0);
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(never.Update(1.0 + i));
}

}  // namespace
}  // namespace elastic::trainer
