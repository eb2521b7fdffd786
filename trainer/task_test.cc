// Task::Check refuses a model that does not fit the data before any training.
#include "trainer/task.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "models/registry.h"
#include "trainer/data/examples.h"
#include "trainer/objective.h"

namespace elastic::trainer {
namespace {

Task ImageTask(int64_t channels, int64_t model_classes, int64_t data_classes) {
  Task task;
  task.name = "test";
  task.model_name = "resnet8";
  task.model = [model_classes] { return models::CreateModel("resnet8", model_classes); };
  task.train = std::make_shared<TensorExamples>("train", torch::zeros({4, channels, 32, 32}),
                                                torch::zeros({4}, torch::kInt64));
  task.test = task.train;
  task.objective = std::make_shared<Classification>(data_classes);
  return task;
}

std::string Refusal(const Task& task) {
  try {
    task.Check();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(TaskTest, AModelThatFitsIsAccepted) { EXPECT_EQ(Refusal(ImageTask(3, 10, 10)), ""); }

TEST(TaskTest, InputsTheModelCannotTakeAreNamedWithTheirShape) {
  const std::string message = Refusal(ImageTask(1, 10, 10));
  EXPECT_NE(message.find("model 'resnet8' cannot run on the inputs of train [2, 1, 32, 32]"),
            std::string::npos)
      << message;
}

TEST(TaskTest, AnOutputThatDoesNotFitTheClassesIsNamed) {
  const std::string message = Refusal(ImageTask(3, 100, 10));
  EXPECT_NE(message.find("outputs [2, 100] for 2 inputs of train, which has 10 classes"),
            std::string::npos)
      << message;
}

}  // namespace
}  // namespace elastic::trainer
