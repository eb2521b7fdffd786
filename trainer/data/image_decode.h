// JPEG (libjpeg-turbo) and PNG (libpng) files to 8-bit RGB pixels, and a
// resampler to a given size: the codecs behind `--dataset image-folder`.
//
// A broken file is an ImageDecodeError, never a crash: both libraries report
// errors by longjmp to a point set in this file's own functions, which then
// throw. A JPEG that ends early is an error too (libjpeg would only warn
// and fill the rest with gray; PIL raises "image file is truncated").
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace elastic::trainer {

// A file that is not a readable JPEG or PNG image; what() names the file and
// says why.
class ImageDecodeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class ImageFormat { kJpeg, kPng };

// What an image file's header says.
struct ImageInfo {
  ImageFormat format = ImageFormat::kJpeg;
  int64_t width = 0;
  int64_t height = 0;
};

// Images with more pixels than this are refused (Pillow's limit for a
// decompression bomb): a wrong header must not make a loader allocate gigabytes.
inline constexpr int64_t kMaxImagePixels = 178956970;

// Reads the header only (JPEG: up to the first scan; PNG: the chunks before
// the image data), cheap enough to run on every file of a data set. The
// format is told by the file's signature, not its name. Throws
// ImageDecodeError for anything else, a broken header, a CMYK JPEG, a size
// of 0 or above kMaxImagePixels.
ImageInfo ProbeImage(const std::string& path);

// An 8-bit RGB image, pixels interleaved row by row (HWC).
struct RgbImage {
  int64_t width = 0;
  int64_t height = 0;
  std::vector<uint8_t> pixels;  // height * width * 3
};

// Decodes the whole image to RGB: grayscale is replicated, a palette looked
// up, 16-bit samples scaled to 8 bits and an alpha channel dropped (as PIL's
// convert("RGB") does). A JPEG is decoded at the smallest of libjpeg-turbo's
// scales M/8 whose sides are still at least min_width x min_height, which
// costs a fraction of a full decode when the image is much larger (0: full
// size). Throws ImageDecodeError for a file that is not a readable JPEG or PNG.
RgbImage DecodeImage(const std::string& path, int64_t min_width = 0, int64_t min_height = 0);

// An encoded JPEG or PNG image in memory: a member of a mapped WebDataset
// shard. `name` names it in errors ("train/shard-000003.tar at byte 1536").
struct EncodedImage {
  std::string name;
  const uint8_t* data = nullptr;
  size_t size = 0;
};

// DecodeImage of an image in memory (through fmemopen: the codecs read it as a file).
RgbImage DecodeImage(const EncodedImage& image, int64_t min_width = 0, int64_t min_height = 0);

// Resamples an image of `channels` interleaved uint8 values per pixel to
// dst_width x dst_height with a triangle (bilinear) filter whose support
// widens with the reduction, as PIL's resize(BILINEAR) does, so a large
// reduction averages instead of aliasing. Values are rounded. The two
// images must not overlap.
void ResizeBilinear(const uint8_t* src, int64_t src_width, int64_t src_height, int64_t channels,
                    uint8_t* dst, int64_t dst_width, int64_t dst_height);

// DecodeImage, then ResizeBilinear to width x height (no resampling when
// the decoded size already is that).
RgbImage LoadRgbImage(const std::string& path, int64_t width, int64_t height);
RgbImage LoadRgbImage(const EncodedImage& image, int64_t width, int64_t height);

}  // namespace elastic::trainer
