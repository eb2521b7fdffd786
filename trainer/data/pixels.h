// Augmentation and normalisation of one image of any size and 1..4 channels,
// from uint8 or float32 pixels, written straight into a float batch tensor's
// memory. The general form of augment.h's fixed 3x32x32 path (which stays as
// it is for CIFAR): the user data sets (npy.h, image_folder.h) use this one.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace elastic::trainer {

// Where the values of one C x H x W image sit in memory: planes (CHW), or
// interleaved pixels (HWC, the layout of one image of a channels-last batch
// and of a decoded JPEG or PNG).
enum class PixelLayout { kCHW, kHWC };

// The zero border of the random crop: max(1, min(height, width) / 8), so 4
// for 32x32 images as in CIFAR's RandomCrop(32, padding=4).
int64_t CropPaddingFor(int64_t height, int64_t width);

// A window of the image's own size taken from the image zero-padded by
// `padding` on every side, then flipped horizontally when `flip`.
struct CropFlip {
  int64_t padding = 0;
  int64_t dy = 0;  // window offset in the padded image, 0..2*padding
  int64_t dx = 0;
  bool flip = false;
};

// The random window and flip of sample `index`: a pure function of (seed,
// epoch, index). For padding 4 it is the same choice as AugmentationFor's
// (augment.h), so a 32x32 image is augmented exactly as CIFAR's are.
CropFlip RandomCropFlip(uint64_t seed, uint64_t epoch, int64_t index, int64_t padding);

// The identity (evaluation): the centred window, no flip.
CropFlip CentredCrop(int64_t padding);

// Per-channel normalisation v -> (v * scale - mean[c]) / std[c], where the
// scale is 1/255 for uint8 pixels and 1 for float pixels; mean and std are
// those of the scaled values.
class PixelNormalizer {
 public:
  // Throws std::invalid_argument unless mean and std have the same size in
  // 1..4 and every mean is finite and every std finite and positive.
  PixelNormalizer(std::vector<float> mean, std::vector<float> std);

  int64_t channels() const { return static_cast<int64_t>(mean_.size()); }
  const std::vector<float>& mean() const { return mean_; }
  const std::vector<float>& std() const { return std_; }

  // Writes image `src` (channels() x height x width in `src_layout`)
  // cropped and flipped as `crop` says, then normalised, into `dst` (float,
  // the same size, in `dst_layout`). Padding pixels are zeros, normalised
  // like any other value.
  void Apply(const uint8_t* src, PixelLayout src_layout, int64_t height, int64_t width,
             const CropFlip& crop, float* dst, PixelLayout dst_layout) const;
  void Apply(const float* src, PixelLayout src_layout, int64_t height, int64_t width,
             const CropFlip& crop, float* dst, PixelLayout dst_layout) const;

 private:
  std::vector<float> mean_;
  std::vector<float> std_;
  // Every normalised uint8 value, per channel: a lookup instead of a divide,
  // computed as augment.cc computes it so that both paths agree to the bit.
  std::vector<std::array<float, 256>> uint8_tables_;
};

// Accumulates the per-channel mean and standard deviation of pixel values
// (scaled as PixelNormalizer scales them) over the images added, one at a time.
class ChannelMoments {
 public:
  // Throws std::invalid_argument unless channels is in 1..4.
  explicit ChannelMoments(int64_t channels);

  void Add(const uint8_t* pixels, PixelLayout layout, int64_t height, int64_t width);
  void Add(const float* pixels, PixelLayout layout, int64_t height, int64_t width);
  int64_t images() const { return images_; }

  // The normaliser for what was added. A constant channel (std 0) gets std 1,
  // so that normalising only centres it. Throws std::logic_error when nothing
  // was added and std::invalid_argument for non-finite pixel values.
  PixelNormalizer Normalizer() const;

 private:
  int64_t channels_;
  int64_t images_ = 0;
  int64_t count_ = 0;  // values per channel
  // Exact sums for uint8 pixels (no overflow below 2.8e14 values per channel).
  std::vector<uint64_t> uint8_sum_;
  std::vector<uint64_t> uint8_sum_sq_;
  std::vector<double> float_sum_;
  std::vector<double> float_sum_sq_;
};

}  // namespace elastic::trainer
