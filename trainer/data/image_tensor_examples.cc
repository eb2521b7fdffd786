#include "trainer/data/image_tensor_examples.h"

#include <sstream>
#include <stdexcept>
#include <utility>

namespace elastic::trainer {

ImageTensorExamples::ImageTensorExamples(std::string name, torch::Tensor images,
                                         torch::Tensor labels, PixelNormalizer normalizer)
    : name_(std::move(name)),
      images_(images.contiguous()),
      labels_(labels.contiguous()),
      normalizer_(std::move(normalizer)) {
  const auto type = images_.scalar_type();
  if ((type != torch::kUInt8 && type != torch::kFloat32) || images_.dim() != 4 ||
      images_.size(0) < 1 || images_.size(1) != normalizer_.channels()) {
    std::ostringstream what;
    what << name_ << ": images must be uint8 or float32 [N, " << normalizer_.channels()
         << ", H, W] with N >= 1, got " << type << " " << images_.sizes();
    throw std::invalid_argument(what.str());
  }
  if (labels_.scalar_type() != torch::kInt64 || labels_.dim() != 1 ||
      labels_.size(0) != images_.size(0)) {
    throw std::invalid_argument(name_ + ": labels must be int64 [" +
                                std::to_string(images_.size(0)) + "]");
  }
  padding_ = CropPaddingFor(images_.size(2), images_.size(3));
}

Batch ImageTensorExamples::Get(const std::vector<int64_t>& indices,
                               const BatchRequest& request) const {
  const auto b = static_cast<int64_t>(indices.size());
  const int64_t c = images_.size(1), h = images_.size(2), w = images_.size(3);
  const int64_t image_size = c * h * w;
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
  const bool is_uint8 = images_.scalar_type() == torch::kUInt8;
  for (int64_t i = 0; i < b; ++i) {
    const int64_t sample = indices[i];
    const CropFlip crop = request.augment
                              ? RandomCropFlip(request.seed, request.epoch, sample, padding_)
                              : CentredCrop(padding_);
    if (is_uint8) {
      normalizer_.Apply(images_.data_ptr<uint8_t>() + sample * image_size, PixelLayout::kCHW, h, w,
                        crop, out + i * image_size, layout);
    } else {
      normalizer_.Apply(images_.data_ptr<float>() + sample * image_size, PixelLayout::kCHW, h, w,
                        crop, out + i * image_size, layout);
    }
    out_labels[i] = labels[sample];
  }
  return batch;
}

}  // namespace elastic::trainer
