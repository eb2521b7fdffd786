#include "trainer/zoo_task.h"

#include <stdexcept>
#include <utility>

#include "models/registry.h"
#include "trainer/data/loader.h"

namespace elastic::trainer {

Task ZooTask(const TrainOptions& options, std::shared_ptr<const Dataset> train,
             std::shared_ptr<const Dataset> test) {
  if (!train || !test) throw std::invalid_argument("Trainer: missing data set");
  if (train->num_classes() != test->num_classes())
    throw std::invalid_argument("Trainer: train and test splits have different classes");
  const int64_t classes = train->num_classes();
  Task task;
  task.name = "cifar";
  task.model_name = options.model;
  task.model = [name = options.model, classes] { return models::CreateModel(name, classes); };
  task.class_names = train->class_names();
  task.train = std::make_shared<ImageExamples>(std::move(train));
  task.test = std::make_shared<ImageExamples>(std::move(test));
  task.objective = std::make_shared<Classification>(classes, options.label_smoothing);
  task.prefers_channels_last = models::PrefersChannelsLast(options.model);
  return task;
}

Task ZooTaskFromOptions(const TrainOptions& options) {
  // The training split first: a bad --data-dir is reported for it.
  std::shared_ptr<const Dataset> train =
      LoadDataset(options.dataset, options.data_dir, Split::kTrain);
  std::shared_ptr<const Dataset> test =
      LoadDataset(options.dataset, options.data_dir, Split::kTest);
  return ZooTask(options, std::move(train), std::move(test));
}

}  // namespace elastic::trainer
