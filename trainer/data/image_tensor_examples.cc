#include "trainer/data/image_tensor_examples.h"

#include <cstring>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace elastic::trainer {

const uint8_t* ImageArray::image_bytes(int64_t i) const {
  const int64_t item = type == torch::kUInt8 ? 1 : sizeof(float);
  return static_cast<const uint8_t*>(data) + i * image_values() * item;
}

const float* ImageArray::float_image(int64_t i, std::vector<float>* staging) const {
  const uint8_t* bytes = image_bytes(i);
  if (reinterpret_cast<uintptr_t>(bytes) % alignof(float) == 0) {
    return reinterpret_cast<const float*>(bytes);
  }
  staging->resize(image_values());
  std::memcpy(staging->data(), bytes, staging->size() * sizeof(float));
  return staging->data();
}

ImageTensorExamples::ImageTensorExamples(std::string name, ImageArray images, torch::Tensor labels,
                                         PixelNormalizer normalizer)
    : name_(std::move(name)),
      images_(std::move(images)),
      labels_(labels.contiguous()),
      normalizer_(std::move(normalizer)) {
  const auto type = images_.type;
  if ((type != torch::kUInt8 && type != torch::kFloat32) || images_.data == nullptr ||
      images_.count < 1 || images_.channels != normalizer_.channels()) {
    std::ostringstream what;
    what << name_ << ": images must be uint8 or float32 [N, " << normalizer_.channels()
         << ", H, W] with N >= 1, got " << type << " [" << images_.count << ", " << images_.channels
         << ", " << images_.height << ", " << images_.width << "]";
    throw std::invalid_argument(what.str());
  }
  if (labels_.scalar_type() != torch::kInt64 || labels_.dim() != 1 ||
      labels_.size(0) != images_.count) {
    throw std::invalid_argument(name_ + ": labels must be int64 [" + std::to_string(images_.count) +
                                "]");
  }
  padding_ = CropPaddingFor(images_.height, images_.width);
}

Batch ImageTensorExamples::Get(const std::vector<int64_t>& indices,
                               const BatchRequest& request) const {
  const auto b = static_cast<int64_t>(indices.size());
  const int64_t c = images_.channels, h = images_.height, w = images_.width;
  const int64_t image_size = images_.image_values();
  Batch batch;
  batch.indices = indices;
  batch.inputs = torch::empty(
      {b, c, h, w}, torch::TensorOptions(torch::kFloat32)
                        .memory_format(request.channels_last ? torch::MemoryFormat::ChannelsLast
                                                             : torch::MemoryFormat::Contiguous));
  batch.targets = torch::empty({b}, torch::kInt64);
  float* out = batch.inputs.data_ptr<float>();
  int64_t* out_labels = batch.targets.data_ptr<int64_t>();
  const int64_t* labels = labels_.data_ptr<int64_t>();
  const PixelLayout layout = request.channels_last ? PixelLayout::kHWC : PixelLayout::kCHW;
  std::vector<float> staging;
  for (int64_t i = 0; i < b; ++i) {
    const int64_t sample = indices[i];
    const CropFlip crop = request.augment
                              ? RandomCropFlip(request.seed, request.epoch, sample, padding_)
                              : CentredCrop(padding_);
    // From the array into the batch in one pass: crop, flip, normalise, and
    // for an (N, H, W, C) array the transposition to the batch's layout.
    if (images_.type == torch::kUInt8) {
      normalizer_.Apply(images_.image_bytes(sample), images_.layout, h, w, crop,
                        out + i * image_size, layout);
    } else {
      normalizer_.Apply(images_.float_image(sample, &staging), images_.layout, h, w, crop,
                        out + i * image_size, layout);
    }
    out_labels[i] = labels[sample];
  }
  return batch;
}

}  // namespace elastic::trainer
