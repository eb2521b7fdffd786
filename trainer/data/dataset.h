// Data sets for the trainer: every data set is a set of 3x32x32 uint8 images
// with one label each, behind one interface, so models, loaders and the
// training loop never know which data set they are fed. The interface serves
// one sample at a time, so a data set may keep its images where they are:
// CIFAR-10 reads them from its mapped files (cifar10.h), Fashion-MNIST holds
// its padded images in memory (InMemoryDataset).
#pragma once

#include <torch/types.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace elastic::trainer {

// Per-channel mean and standard deviation of the pixels scaled to [0, 1];
// the loader maps a pixel p to (p / 255 - mean) / std.
struct Normalization {
  std::array<float, 3> mean;
  std::array<float, 3> std;
};

class Dataset {
 public:
  virtual ~Dataset() = default;

  virtual std::string name() const = 0;
  virtual int64_t size() const = 0;
  // The 3 x 32 x 32 pixels of sample i (planes R, G, B, each row-major),
  // valid as long as the data set lives. i must be in [0, size()): callers
  // check indices once (Loader::Start), not once per pixel read.
  virtual const uint8_t* image(int64_t i) const = 0;
  // The label of sample i, in [0, num_classes()); i as for image().
  virtual int64_t label(int64_t i) const = 0;
  virtual std::vector<std::string> class_names() const = 0;
  int64_t num_classes() const { return static_cast<int64_t>(class_names().size()); }
  // The same for both splits of a data set (the training split's statistics).
  virtual Normalization normalization() const = 0;
};

enum class Split { kTrain, kTest };

// "train" or "test".
const char* SplitName(Split split);

// A Dataset over tensors already in memory. Validates shapes, dtypes and the
// label range, so every loader below may trust what it holds.
class InMemoryDataset : public Dataset {
 public:
  InMemoryDataset(std::string name, torch::Tensor images, torch::Tensor labels,
                  std::vector<std::string> class_names, Normalization normalization);

  std::string name() const override { return name_; }
  int64_t size() const override { return size_; }
  const uint8_t* image(int64_t i) const override { return pixels_ + i * 3 * 32 * 32; }
  int64_t label(int64_t i) const override { return label_data_[i]; }
  std::vector<std::string> class_names() const override { return class_names_; }
  Normalization normalization() const override { return normalization_; }

  // uint8 [N, 3, 32, 32], contiguous; int64 [N].
  const torch::Tensor& images() const { return images_; }
  const torch::Tensor& labels() const { return labels_; }

 private:
  std::string name_;
  torch::Tensor images_;
  torch::Tensor labels_;
  std::vector<std::string> class_names_;
  Normalization normalization_;
  int64_t size_;
  const uint8_t* pixels_ = nullptr;      // images_'s data
  const int64_t* label_data_ = nullptr;  // labels_'s data
};

// Measures the per-channel mean and standard deviation of `images` (uint8
// [N, 3, H, W]) scaled to [0, 1]. Used to derive and check the constants.
Normalization MeasureNormalization(const torch::Tensor& images);
// The same over every image of a data set, one image at a time (no copy).
Normalization MeasureNormalization(const Dataset& dataset);

// CIFAR-10 in its binary format from data_dir: for kTrain every
// data_batch_1.bin .. data_batch_5.bin that is present (at least one), for
// kTest test_batch.bin. Throws std::runtime_error naming the file and byte
// offset for a truncated or corrupt file. Declared here, defined in cifar10.cc.
std::shared_ptr<Dataset> LoadCifar10(const std::string& data_dir, Split split);

// Where Debian's dataset-fashion-mnist installs its IDX files.
inline constexpr char kFashionMnistDefaultDir[] = "/usr/share/datasets/fashion-mnist";

// Fashion-MNIST from its gzip'd IDX files in dir (train-* or t10k-*); the
// 28x28 gray images are zero-padded to 32x32 and replicated to 3 channels so
// every CIFAR model runs on them unchanged. Defined in fashion_mnist.cc.
std::shared_ptr<Dataset> LoadFashionMnist(const std::string& dir, Split split);

// The data set names LoadDataset accepts: "cifar10", "fashion-mnist".
std::vector<std::string> DatasetNames();

// A data set by name. cifar10: from data_dir when it is given, otherwise from
// the cache directory (CifarCacheDir()), downloading it there first when it is
// missing. fashion-mnist: from data_dir, or kFashionMnistDefaultDir when empty.
std::shared_ptr<Dataset> LoadDataset(const std::string& name, const std::string& data_dir,
                                     Split split);

}  // namespace elastic::trainer
