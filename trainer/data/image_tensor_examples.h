// Examples over images held in memory as one tensor, of any size and 1..4
// channels, uint8 or float32: what the .npy format (npy.h) loads into.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/data/examples.h"
#include "trainer/data/pixels.h"

namespace elastic::trainer {

// Inputs float [B, C, H, W], normalised by `normalizer`; when augmenting, a
// random crop with zero padding CropPaddingFor(H, W) and a horizontal flip
// (pixels.h). Targets are the int64 labels.
class ImageTensorExamples : public Examples {
 public:
  // Throws std::invalid_argument unless images are uint8 or float32
  // [N, C, H, W] with N >= 1 and C == normalizer.channels(), and labels int64 [N].
  ImageTensorExamples(std::string name, torch::Tensor images, torch::Tensor labels,
                      PixelNormalizer normalizer);

  std::string name() const override { return name_; }
  int64_t size() const override { return images_.size(0); }
  Batch Get(const std::vector<int64_t>& indices, const BatchRequest& request) const override;

  const torch::Tensor& images() const { return images_; }  // contiguous NCHW
  const torch::Tensor& labels() const { return labels_; }
  const PixelNormalizer& normalizer() const { return normalizer_; }

 private:
  std::string name_;
  torch::Tensor images_;
  torch::Tensor labels_;
  PixelNormalizer normalizer_;
  int64_t padding_;
};

}  // namespace elastic::trainer
