#include "trainer/data/pixels.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include "trainer/data/augment.h"

namespace elastic::trainer {
namespace {

constexpr int64_t kMaxChannels = 4;

// Element strides of one image: value (c, y, x) is at c * channel + (y * W + x) * pixel.
struct Strides {
  int64_t channel;
  int64_t pixel;
};

Strides StridesOf(PixelLayout layout, int64_t channels, int64_t height, int64_t width) {
  return layout == PixelLayout::kCHW ? Strides{height * width, 1} : Strides{1, channels};
}

// The crop, flip and normalisation loop shared by both source types.
// `normaliser(c)` gives channel c's map from a source value to a float;
// `padding[c]` is a normalised zero. Each row is split into the columns whose
// source lies in the image, walked with a fixed step, and the padded ones,
// so the inner loop has no bounds checks.
template <typename T, typename Normaliser>
void CropFlipNormalize(const T* src, PixelLayout src_layout, int64_t channels, int64_t height,
                       int64_t width, const CropFlip& crop, float* dst, PixelLayout dst_layout,
                       const float* padding, Normaliser normaliser) {
  const Strides in = StridesOf(src_layout, channels, height, width);
  const Strides out = StridesOf(dst_layout, channels, height, width);
  // The window is taken first, then flipped (RandomCrop, then
  // RandomHorizontalFlip), as augment.cc does: output column x reads source
  // column sx = (flip ? width - 1 - x : x) + shift.
  const int64_t shift = crop.dx - crop.padding;
  const int64_t x_begin = std::clamp<int64_t>(crop.flip ? shift : -shift, 0, width);
  const int64_t x_end = std::clamp<int64_t>(crop.flip ? width + shift : width - shift, 0, width);
  const int64_t first_sx = (crop.flip ? width - 1 - x_begin : x_begin) + shift;
  const int64_t step = crop.flip ? -in.pixel : in.pixel;
  for (int64_t c = 0; c < channels; ++c) {
    const auto normalise = normaliser(c);
    const float pad = padding[c];
    const T* plane = src + c * in.channel;
    float* out_plane = dst + c * out.channel;
    for (int64_t y = 0; y < height; ++y) {
      const int64_t sy = y + crop.dy - crop.padding;  // row in the unpadded image
      float* out_row = out_plane + y * width * out.pixel;
      if (sy < 0 || sy >= height) {
        for (int64_t x = 0; x < width; ++x) out_row[x * out.pixel] = pad;
        continue;
      }
      for (int64_t x = 0; x < x_begin; ++x) out_row[x * out.pixel] = pad;
      const T* p = plane + sy * width * in.pixel + first_sx * in.pixel;
      for (int64_t x = x_begin; x < x_end; ++x, p += step) out_row[x * out.pixel] = normalise(*p);
      for (int64_t x = std::max(x_begin, x_end); x < width; ++x) out_row[x * out.pixel] = pad;
    }
  }
}

void CheckChannels(int64_t channels, const char* who) {
  if (channels < 1 || channels > kMaxChannels) {
    throw std::invalid_argument(std::string(who) + ": " + std::to_string(channels) +
                                " channels; 1 to 4 are supported");
  }
}

}  // namespace

int64_t CropPaddingFor(int64_t height, int64_t width) {
  return std::max<int64_t>(1, std::min(height, width) / 8);
}

CropFlip RandomCropFlip(uint64_t seed, uint64_t epoch, int64_t index, int64_t padding) {
  // The bits AugmentationFor uses, so padding 4 chooses as it does.
  const uint64_t h = AugmentationHash(seed, epoch, index);
  const uint64_t offsets = 2 * static_cast<uint64_t>(padding) + 1;
  CropFlip crop;
  crop.padding = padding;
  crop.dy = static_cast<int64_t>(h % offsets);
  crop.dx = static_cast<int64_t>((h >> 16) % offsets);
  crop.flip = ((h >> 32) & 1) != 0;
  return crop;
}

CropFlip CentredCrop(int64_t padding) { return CropFlip{padding, padding, padding, false}; }

PixelNormalizer::PixelNormalizer(std::vector<float> mean, std::vector<float> std)
    : mean_(std::move(mean)), std_(std::move(std)) {
  CheckChannels(static_cast<int64_t>(mean_.size()), "PixelNormalizer");
  if (std_.size() != mean_.size()) {
    throw std::invalid_argument("PixelNormalizer: " + std::to_string(mean_.size()) + " means but " +
                                std::to_string(std_.size()) + " stds");
  }
  for (size_t c = 0; c < mean_.size(); ++c) {
    if (!std::isfinite(mean_[c]) || !std::isfinite(std_[c]) || !(std_[c] > 0)) {
      throw std::invalid_argument("PixelNormalizer: channel " + std::to_string(c) + " has mean " +
                                  std::to_string(mean_[c]) + " and std " + std::to_string(std_[c]) +
                                  "; the mean must be finite and the std finite and positive");
    }
    std::array<float, 256> table;
    for (int v = 0; v < 256; ++v) table[v] = (v / 255.0f - mean_[c]) / std_[c];
    uint8_tables_.push_back(table);
  }
}

void PixelNormalizer::Apply(const uint8_t* src, PixelLayout src_layout, int64_t height,
                            int64_t width, const CropFlip& crop, float* dst,
                            PixelLayout dst_layout) const {
  float padding[kMaxChannels];
  for (int64_t c = 0; c < channels(); ++c) padding[c] = uint8_tables_[c][0];
  CropFlipNormalize(src, src_layout, channels(), height, width, crop, dst, dst_layout, padding,
                    [this](int64_t c) {
                      const float* table = uint8_tables_[c].data();
                      return [table](uint8_t v) { return table[v]; };
                    });
}

void PixelNormalizer::Apply(const float* src, PixelLayout src_layout, int64_t height, int64_t width,
                            const CropFlip& crop, float* dst, PixelLayout dst_layout) const {
  float padding[kMaxChannels];
  for (int64_t c = 0; c < channels(); ++c) padding[c] = (0.0f - mean_[c]) / std_[c];
  CropFlipNormalize(src, src_layout, channels(), height, width, crop, dst, dst_layout, padding,
                    [this](int64_t c) {
                      const float mean = mean_[c], std = std_[c];
                      return [mean, std](float v) { return (v - mean) / std; };
                    });
}

ChannelMoments::ChannelMoments(int64_t channels)
    : channels_(channels),
      uint8_sum_(channels, 0),
      uint8_sum_sq_(channels, 0),
      float_sum_(channels, 0.0),
      float_sum_sq_(channels, 0.0) {
  CheckChannels(channels, "ChannelMoments");
}

void ChannelMoments::Add(const uint8_t* pixels, PixelLayout layout, int64_t height, int64_t width) {
  const Strides s = StridesOf(layout, channels_, height, width);
  for (int64_t c = 0; c < channels_; ++c) {
    uint64_t sum = 0, sum_sq = 0;
    for (int64_t i = 0; i < height * width; ++i) {
      const uint64_t v = pixels[c * s.channel + i * s.pixel];
      sum += v;
      sum_sq += v * v;
    }
    uint8_sum_[c] += sum;
    uint8_sum_sq_[c] += sum_sq;
  }
  count_ += height * width;
  ++images_;
}

void ChannelMoments::Add(const float* pixels, PixelLayout layout, int64_t height, int64_t width) {
  const Strides s = StridesOf(layout, channels_, height, width);
  for (int64_t c = 0; c < channels_; ++c) {
    double sum = 0, sum_sq = 0;
    for (int64_t i = 0; i < height * width; ++i) {
      const double v = pixels[c * s.channel + i * s.pixel];
      sum += v;
      sum_sq += v * v;
    }
    float_sum_[c] += sum;
    float_sum_sq_[c] += sum_sq;
  }
  count_ += height * width;
  ++images_;
}

PixelNormalizer ChannelMoments::Normalizer() const {
  if (count_ == 0) throw std::logic_error("ChannelMoments: no pixels were added");
  std::vector<float> mean(channels_), std(channels_);
  const double n = static_cast<double>(count_);
  for (int64_t c = 0; c < channels_; ++c) {
    const double m = (uint8_sum_[c] / 255.0 + float_sum_[c]) / n;
    const double sq = (uint8_sum_sq_[c] / (255.0 * 255.0) + float_sum_sq_[c]) / n;
    if (!std::isfinite(m) || !std::isfinite(sq)) {
      throw std::invalid_argument("channel " + std::to_string(c) +
                                  " has non-finite pixel values (NaN or infinity)");
    }
    const double sd = std::sqrt(std::max(sq - m * m, 0.0));
    mean[c] = static_cast<float>(m);
    // Below the resolution of the values the channel is constant: centring is all it needs.
    std[c] = sd > 1e-6 * std::max(1.0, std::abs(m)) ? static_cast<float>(sd) : 1.0f;
  }
  return PixelNormalizer(std::move(mean), std::move(std));
}

}  // namespace elastic::trainer
