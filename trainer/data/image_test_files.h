// Writers of JPEG and PNG files for the image tests and the decode benchmark:
// the encoders the data set reader never needs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace elastic::trainer::testing {

// Writes a PNG of `color_type` (PNG_COLOR_TYPE_*) and `bit_depth` whose rows
// are given as libpng takes them: `rows` holds height rows of packed samples
// (16-bit samples big-endian). `palette` is RGB triples for a palette image;
// `transparency` its tRNS alpha values (optional). `interlaced`: Adam7.
// Throws std::runtime_error when libpng refuses.
void WritePng(const std::string& path, const std::vector<uint8_t>& rows, int width, int height,
              int color_type, int bit_depth, const std::vector<uint8_t>& palette = {},
              const std::vector<uint8_t>& transparency = {}, bool interlaced = false);

// An 8-bit RGB (or RGBA, channels 4) image as a PNG.
void WriteRgbPng(const std::string& path, const uint8_t* pixels, int width, int height,
                 int channels = 3);

// Writes `pixels` (interleaved, `channels` 1 (gray), 3 (RGB) or 4 (CMYK)) as
// a baseline JPEG of `quality`. Throws std::runtime_error when libjpeg refuses.
void WriteJpeg(const std::string& path, const uint8_t* pixels, int width, int height,
               int channels = 3, int quality = 95);

// A smooth, deterministic test image (gradients and a few soft shapes that
// vary with `seed`), interleaved RGB, as photographs are: what JPEG
// compresses well and resizing treats gently.
std::vector<uint8_t> SmoothRgbImage(int width, int height, int seed);

}  // namespace elastic::trainer::testing
