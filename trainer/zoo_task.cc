#include "trainer/zoo_task.h"

#include <cstdio>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "models/registry.h"
#include "trainer/data/loader.h"
#include "trainer/data/token_stream.h"
#include "trainer/data/user_data.h"
#include "trainer/data/webdataset.h"

namespace elastic::trainer {
namespace {

std::string JsonList(const std::vector<float>& values) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
  out << "]";
  return out.str();
}

// How inputs are prepared, as JSON stored with the trained model.
std::string PreprocessingJson(int64_t channels, int64_t height, int64_t width, float pixel_scale,
                              const std::vector<float>& mean, const std::vector<float>& std) {
  std::ostringstream out;
  out << "{\"input\": \"float32 [N, " << channels << ", " << height << ", " << width
      << "], x = (pixel * pixel_scale - mean[c]) / std[c]\", \"pixel_scale\": " << pixel_scale
      << ", \"mean\": " << JsonList(mean) << ", \"std\": " << JsonList(std) << "}";
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
  const Normalization n = train->normalization();
  task.preprocessing = PreprocessingJson(3, 32, 32, 1.0f / 255, {n.mean.begin(), n.mean.end()},
                                         {n.std.begin(), n.std.end()});
  task.train = std::make_shared<ImageExamples>(std::move(train));
  task.test = std::make_shared<ImageExamples>(std::move(test));
  task.objective = std::make_shared<Classification>(classes, options.label_smoothing);
  return task;
}

Task UserDataTask(const TrainOptions& options, UserData data) {
  const auto classes = static_cast<int64_t>(data.class_names.size());
  Task task;
  task.name = "cifar";
  SetModel(options, classes, task);
  task.class_names = std::move(data.class_names);
  task.preprocessing = PreprocessingJson(data.channels, data.height, data.width, data.pixel_scale,
                                         data.mean, data.std);
  task.train = std::move(data.train);
  task.test = std::move(data.test);
  task.objective = std::make_shared<Classification>(classes, options.label_smoothing);
  // The job's other processes read the index this one found or built,
  // instead of listing and probing the folder (or scanning the shards) again.
  if (!data.index_key.empty() && options.image_index.empty()) {
    task.pinned_index = data.index_key;
  }
  return task;
}

// A GPT's position table (nanoGPT's wpe.weight, [block_size, embedding]) bounds
// the windows it can read: a longer --context is refused by name here, not
// as an index error from inside the model's forward.
void CheckPositionTable(const Task& task, int64_t context) {
  for (const auto& p : task.model()->named_parameters()) {
    const std::string& name = p.key();
    const bool table = name == "wpe.weight" ||
                       (name.size() > 11 && name.compare(name.size() - 11, 11, ".wpe.weight") == 0);
    if (table && p.value().dim() == 2 && p.value().size(0) < context) {
      throw std::invalid_argument("--context=" + std::to_string(context) +
                                  " is longer than the model's position table: " + name + " has " +
                                  std::to_string(p.value().size(0)) +
                                  " rows, so the model reads windows of at most that many tokens");
    }
  }
}

Task TokenTask(const TrainOptions& options) {
  if (options.model_file.empty()) {
    throw std::invalid_argument(
        "--dataset=tokens trains a language model, and the zoo (--model) holds image "
        "classifiers: give --model-file, a torch.jit.script'ed module whose forward maps [N, T] "
        "int64 tokens to [N, T, vocab] logits (docs/your-model-and-data.md), or use "
        "//examples/gpt");
  }
  TokenData data =
      LoadTokenData(options.data_dir, options.context, static_cast<uint64_t>(options.seed));
  Task task;
  task.name = "cifar";
  SetModel(options, data.info.vocab_size, task);
  CheckPositionTable(task, options.context);
  std::ostringstream preprocessing;
  preprocessing << "{\"input\": \"int64 [N, T] token ids, T <= " << options.context
                << "\", \"output\": \"[N, T, vocab_size] next-token logits\", \"vocab_size\": "
                << data.info.vocab_size << ", \"context\": " << options.context << ", \"dtype\": \""
                << TokenDtypeName(data.info.width) << "\"}";
  task.preprocessing = preprocessing.str();
  task.train = std::move(data.train);
  task.test = std::move(data.val);
  task.objective = std::make_shared<LanguageModel>(data.info.vocab_size);
  task.tokens_per_sample = options.context;
  return task;
}

Task ZooTaskFromOptions(const TrainOptions& options) {
  if (options.dataset == "tokens") return TokenTask(options);
  if (options.dataset == "npy") return UserDataTask(options, LoadNpyData(options.data_dir));
  if (options.dataset == "image-folder" || options.dataset == "webdataset") {
    const ChannelNormalization given = ParseNormalize(options.normalize);
    const ImageIndexOptions index{options.image_index_dir, options.image_index, given.mean,
                                  given.std};
    return UserDataTask(options, options.dataset == "image-folder"
                                     ? LoadImageFolder(options.data_dir, options.image_size, index)
                                     : LoadWebDataset(options.data_dir, options.image_size, index));
  }
  // The training split first: a bad --data-dir is reported for it.
  std::shared_ptr<const Dataset> train =
      LoadDataset(options.dataset, options.data_dir, Split::kTrain);
  std::shared_ptr<const Dataset> test =
      LoadDataset(options.dataset, options.data_dir, Split::kTest);
  return ZooTask(options, std::move(train), std::move(test));
}

}  // namespace elastic::trainer
