// Examples over images of any size and 1..4 channels, uint8 or float32, stored
// one after another in an (N, C, H, W) or (N, H, W, C) array: what the .npy
// format (npy.h) serves from its mapped files, each image read in place.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainer/data/examples.h"
#include "trainer/data/pixels.h"

namespace elastic::trainer {

// N images of C x H x W pixels, each `layout` (planes or interleaved), one
// after another from `data`, which `owner` keeps valid (a mapped .npy file).
struct ImageArray {
  std::shared_ptr<const void> owner;
  const void* data = nullptr;
  torch::ScalarType type = torch::kUInt8;  // kUInt8 or kFloat32
  PixelLayout layout = PixelLayout::kCHW;
  int64_t count = 0;
  int64_t channels = 0;
  int64_t height = 0;
  int64_t width = 0;

  int64_t image_values() const { return channels * height * width; }
  // Where image i starts; i in [0, count), unchecked.
  const uint8_t* image_bytes(int64_t i) const;
  // Image i of a float32 array: in place, or copied into `staging` when the
  // data are not 4-byte aligned (a .npy header of an odd length), since a
  // float must not be read from an unaligned address. np.save aligns its
  // data to 64 bytes, so the copy (one image) is for hand-made files only.
  const float* float_image(int64_t i, std::vector<float>* staging) const;
};

// Inputs float [B, C, H, W], normalised by `normalizer`; when augmenting, a
// random crop with zero padding CropPaddingFor(H, W) and a horizontal flip
// (pixels.h). Targets are the int64 labels. Each image goes straight from
// the array (in either layout) into the batch: no copy of the array is made.
class ImageTensorExamples : public Examples {
 public:
  // Throws std::invalid_argument unless images are uint8 or float32 with
  // count >= 1 and channels == normalizer.channels(), and labels int64 [count].
  ImageTensorExamples(std::string name, ImageArray images, torch::Tensor labels,
                      PixelNormalizer normalizer);

  std::string name() const override { return name_; }
  int64_t size() const override { return images_.count; }
  Batch Get(const std::vector<int64_t>& indices, const BatchRequest& request) const override;

  const ImageArray& images() const { return images_; }
  const torch::Tensor& labels() const { return labels_; }
  const PixelNormalizer& normalizer() const { return normalizer_; }

 private:
  std::string name_;
  ImageArray images_;
  torch::Tensor labels_;
  PixelNormalizer normalizer_;
  int64_t padding_;
};

}  // namespace elastic::trainer
