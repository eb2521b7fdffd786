#include "trainer/zoo_task.h"

#include <cstdio>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "models/registry.h"
#include "trainer/data/loader.h"

namespace elastic::trainer {
namespace {

// How inputs are prepared, as JSON stored with the trained model.
std::string PreprocessingJson(const Normalization& n, int64_t size) {
  std::ostringstream out;
  out << "{\"input\": \"float32 [N, 3, " << size << ", " << size
      << "], RGB, x = (pixel / 255 - mean[c]) / std[c]\", \"mean\": [" << n.mean[0] << ", "
      << n.mean[1] << ", " << n.mean[2] << "], \"std\": [" << n.std[0] << ", " << n.std[1] << ", "
      << n.std[2] << "]}";
  return out.str();
}

}  // namespace

void SetModel(const TrainOptions& options, int64_t classes, Task& task) {
  if (options.model_file.empty()) {
    task.model_name = options.model;
    task.model = [name = options.model, classes] { return models::CreateModel(name, classes); };
    task.prefers_channels_last = models::PrefersChannelsLast(options.model);
    return;
  }
  std::shared_ptr<const models::ModelFile> file = models::OpenModelFile(options.model_file);
  for (const std::string& warning : file->warnings()) {
    std::fprintf(stderr, "warning: %s\n", warning.c_str());
  }
  // The file's name, not its path: a checkpoint resumes from a copy elsewhere.
  task.model_name = "file:" + std::filesystem::path(options.model_file).filename().string();
  task.model = [file] { return file->Create(); };
  task.model_file = std::move(file);
}

Task ZooTask(const TrainOptions& options, std::shared_ptr<const Dataset> train,
             std::shared_ptr<const Dataset> test) {
  if (!train || !test) throw std::invalid_argument("Trainer: missing data set");
  if (train->num_classes() != test->num_classes())
    throw std::invalid_argument("Trainer: train and test splits have different classes");
  const int64_t classes = train->num_classes();
  Task task;
  task.name = "cifar";
  SetModel(options, classes, task);
  task.class_names = train->class_names();
  task.preprocessing = PreprocessingJson(train->normalization(), 32);
  task.train = std::make_shared<ImageExamples>(std::move(train));
  task.test = std::make_shared<ImageExamples>(std::move(test));
  task.objective = std::make_shared<Classification>(classes, options.label_smoothing);
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
