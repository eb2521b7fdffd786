// Per-sample augmentation and normalisation, written straight into the
// float batch tensor: one pass over the uint8 pixels, no intermediate tensors.
#pragma once

#include <cstdint>

#include "trainer/data/dataset.h"

namespace elastic::trainer {

// Padding of the random crop: the 32x32 image is zero-padded to 40x40 and a
// 32x32 window is taken at a random offset.
inline constexpr int kCropPadding = 4;

// 64 well-mixed bits that are a pure function of (seed, epoch, index): the
// source of every random choice of one sample's augmentation (here and in
// pixels.h), so that it never depends on timing or thread.
uint64_t AugmentationHash(uint64_t seed, uint64_t epoch, int64_t index);

// The augmentation of one sample, a pure function of (seed, epoch, index).
struct Augmentation {
  int dy = kCropPadding;  // window offset in the padded image, 0..2*kCropPadding
  int dx = kCropPadding;
  bool flip = false;
};
Augmentation AugmentationFor(uint64_t seed, uint64_t epoch, int64_t index);

// The identity: centred window, no flip (evaluation).
inline constexpr Augmentation kNoAugmentation = {};

// Writes image `src` (uint8 3x32x32, CHW) cropped, flipped and normalised
// into `dst` (float 3x32x32): CHW, or HWC when `channels_last` (the layout of
// one image of an NCHW tensor in torch's channels-last memory format).
void AugmentAndNormalize(const uint8_t* src, const Augmentation& aug, const Normalization& norm,
                         float* dst, bool channels_last = false);

}  // namespace elastic::trainer
