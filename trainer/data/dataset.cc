#include "trainer/data/dataset.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "trainer/data/download.h"

namespace elastic::trainer {

const char* SplitName(Split split) { return split == Split::kTrain ? "train" : "test"; }

InMemoryDataset::InMemoryDataset(std::string name, torch::Tensor images, torch::Tensor labels,
                                 std::vector<std::string> class_names, Normalization normalization)
    : name_(std::move(name)),
      images_(std::move(images)),
      labels_(std::move(labels)),
      class_names_(std::move(class_names)),
      normalization_(normalization) {
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument("data set " + name_ + ": " + what);
  };
  if (images_.scalar_type() != torch::kUInt8 || images_.dim() != 4 || images_.size(1) != 3 ||
      images_.size(2) != 32 || images_.size(3) != 32) {
    std::ostringstream shape;
    shape << images_.sizes() << " " << images_.scalar_type();
    fail("images must be uint8 [N, 3, 32, 32], got " + shape.str());
  }
  if (labels_.scalar_type() != torch::kInt64 || labels_.dim() != 1 ||
      labels_.size(0) != images_.size(0)) {
    fail("labels must be int64 [N] with N = " + std::to_string(images_.size(0)));
  }
  if (class_names_.empty()) fail("no class names");
  images_ = images_.contiguous();
  labels_ = labels_.contiguous();
  size_ = images_.size(0);
  pixels_ = images_.data_ptr<uint8_t>();
  label_data_ = labels_.data_ptr<int64_t>();
  const int64_t* label = label_data_;
  for (int64_t i = 0; i < size_; ++i) {
    if (label[i] < 0 || label[i] >= static_cast<int64_t>(class_names_.size())) {
      fail("sample " + std::to_string(i) + " has label " + std::to_string(label[i]) +
           ", expected 0.." + std::to_string(class_names_.size() - 1));
    }
  }
  for (int c = 0; c < 3; ++c) {
    if (!(normalization_.std[c] > 0)) fail("normalization std must be positive");
  }
}

namespace {

// Exact integer sums over images given one at a time: no float copy of the
// whole data set, and no copy at all of a data set served from a mapping.
class MomentSums {
 public:
  explicit MomentSums(int64_t plane) : plane_(plane) {}

  void Add(const uint8_t* image) {
    for (int c = 0; c < 3; ++c) {
      const uint8_t* channel = image + c * plane_;
      uint64_t sum = 0, sum_sq = 0;
      for (int64_t j = 0; j < plane_; ++j) {
        sum += channel[j];
        sum_sq += uint64_t{channel[j]} * channel[j];
      }
      sum_[c] += sum;
      sum_sq_[c] += sum_sq;
    }
    ++images_;
  }

  Normalization Result() const {
    Normalization norm{};
    const double count = static_cast<double>(images_ * plane_);
    for (int c = 0; c < 3; ++c) {
      const double mean = sum_[c] / count / 255.0;
      const double var = sum_sq_[c] / count / (255.0 * 255.0) - mean * mean;
      norm.mean[c] = static_cast<float>(mean);
      norm.std[c] = static_cast<float>(std::sqrt(std::max(var, 0.0)));
    }
    return norm;
  }

 private:
  int64_t plane_;
  int64_t images_ = 0;
  std::array<uint64_t, 3> sum_{};
  std::array<uint64_t, 3> sum_sq_{};
};

}  // namespace

Normalization MeasureNormalization(const torch::Tensor& images) {
  if (images.scalar_type() != torch::kUInt8 || images.dim() != 4 || images.size(1) != 3) {
    throw std::invalid_argument("MeasureNormalization: expected uint8 images [N, 3, H, W]");
  }
  const torch::Tensor x = images.contiguous();
  const uint8_t* p = x.data_ptr<uint8_t>();
  const int64_t plane = x.size(2) * x.size(3);
  MomentSums sums(plane);
  for (int64_t i = 0; i < x.size(0); ++i) sums.Add(p + i * 3 * plane);
  return sums.Result();
}

Normalization MeasureNormalization(const Dataset& dataset) {
  MomentSums sums(32 * 32);
  for (int64_t i = 0; i < dataset.size(); ++i) sums.Add(dataset.image(i));
  return sums.Result();
}

std::vector<std::string> DatasetNames() { return {"cifar10", "fashion-mnist"}; }

std::shared_ptr<Dataset> LoadDataset(const std::string& name, const std::string& data_dir,
                                     Split split) {
  if (name == "cifar10") {
    return LoadCifar10(data_dir.empty() ? EnsureCifar10(CifarCacheDir()) : data_dir, split);
  }
  if (name == "fashion-mnist") {
    return LoadFashionMnist(data_dir.empty() ? kFashionMnistDefaultDir : data_dir, split);
  }
  std::string known;
  for (const std::string& n : DatasetNames()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown data set '" + name + "'; known: " + known);
}

}  // namespace elastic::trainer
