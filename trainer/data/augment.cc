#include "trainer/data/augment.h"

namespace elastic::trainer {
namespace {

constexpr int kSide = 32;

// SplitMix64's finaliser: a bijection that spreads every input bit over the output.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t AugmentationHash(uint64_t seed, uint64_t epoch, int64_t index) {
  return Mix(Mix(Mix(seed) ^ epoch) ^ static_cast<uint64_t>(index));
}

Augmentation AugmentationFor(uint64_t seed, uint64_t epoch, int64_t index) {
  const uint64_t h = AugmentationHash(seed, epoch, index);
  constexpr uint64_t kOffsets = 2 * kCropPadding + 1;
  Augmentation aug;
  aug.dy = static_cast<int>(h % kOffsets);
  aug.dx = static_cast<int>((h >> 16) % kOffsets);
  aug.flip = ((h >> 32) & 1) != 0;
  return aug;
}

void AugmentAndNormalize(const uint8_t* src, const Augmentation& aug, const Normalization& norm,
                         float* dst, bool channels_last) {
  // Where value (c, y, x) goes: c * channel_step + (y * kSide + x) * pixel_step.
  const int channel_step = channels_last ? 1 : kSide * kSide;
  const int pixel_step = channels_last ? 3 : 1;
  for (int c = 0; c < 3; ++c) {
    // Every output value is one of 256 per channel: look them up.
    float table[256];
    for (int v = 0; v < 256; ++v) table[v] = (v / 255.0f - norm.mean[c]) / norm.std[c];
    const float padding = table[0];  // zero padding is a black pixel, normalised like one

    const uint8_t* plane = src + c * kSide * kSide;
    float* out = dst + c * channel_step;
    for (int y = 0; y < kSide; ++y) {
      const int sy = y + aug.dy - kCropPadding;  // row in the unpadded image
      float* out_row = out + y * kSide * pixel_step;
      if (sy < 0 || sy >= kSide) {
        for (int x = 0; x < kSide; ++x) out_row[x * pixel_step] = padding;
        continue;
      }
      const uint8_t* row = plane + sy * kSide;
      for (int x = 0; x < kSide; ++x) {
        // The crop window is taken first, then flipped, as RandomCrop then
        // RandomHorizontalFlip do in the pytorch-cifar pipeline.
        const int wx = aug.flip ? kSide - 1 - x : x;
        const int sx = wx + aug.dx - kCropPadding;
        out_row[x * pixel_step] = (sx < 0 || sx >= kSide) ? padding : table[row[sx]];
      }
    }
  }
}

}  // namespace elastic::trainer
