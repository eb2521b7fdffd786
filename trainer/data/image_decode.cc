#include "trainer/data/image_decode.h"

// libjpeg's header needs <cstdio> (FILE, size_t) before it.
#include <csetjmp>
#include <cstdio>
// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on
#include <png.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

namespace elastic::trainer {
namespace {

// The error branches below run after a longjmp out of libjpeg or libpng back
// into the function that called setjmp. That is only sound when no C++
// object was constructed between the setjmp and the library call that
// jumped, so every such function does nothing but C calls after its setjmp
// and throws only from the branch that the jump takes.

// A file, or an image in memory read through the same FILE* interface
// (fmemopen), so that both codecs' stdio sources serve either.
class File {
 public:
  explicit File(const std::string& path) : path_(path), file_(std::fopen(path.c_str(), "rb")) {
    if (file_ == nullptr) Fail(std::string("cannot open (") + std::strerror(errno) + ")");
  }
  explicit File(const EncodedImage& image) : path_(image.name) {
    if (image.size == 0) Fail("empty file");
    // Opened for reading only: fmemopen never writes to the (read-only) mapping.
    file_ = fmemopen(const_cast<uint8_t*>(image.data), image.size, "rb");
    if (file_ == nullptr) Fail(std::string("cannot open (") + std::strerror(errno) + ")");
  }
  ~File() { std::fclose(file_); }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  FILE* get() const { return file_; }
  [[noreturn]] void Fail(const std::string& why) const {
    throw ImageDecodeError(path_ + ": " + why);
  }

 private:
  std::string path_;
  FILE* file_ = nullptr;
};

ImageFormat FormatOf(const File& file) {
  unsigned char signature[8] = {};
  const size_t n = std::fread(signature, 1, sizeof(signature), file.get());
  std::rewind(file.get());
  if (n >= 3 && signature[0] == 0xFF && signature[1] == 0xD8 && signature[2] == 0xFF) {
    return ImageFormat::kJpeg;
  }
  if (n == 8 && png_sig_cmp(signature, 0, 8) == 0) return ImageFormat::kPng;
  file.Fail(n == 0 ? "empty file" : "not a JPEG or PNG image (unknown signature)");
}

void CheckSize(const File& file, int64_t width, int64_t height) {
  if (width < 1 || height < 1) {
    file.Fail("image of " + std::to_string(width) + "x" + std::to_string(height) + " pixels");
  }
  if (width * height > kMaxImagePixels) {
    file.Fail("image of " + std::to_string(width) + "x" + std::to_string(height) +
              " pixels is larger than " + std::to_string(kMaxImagePixels) + " pixels");
  }
}

// ---- JPEG ------------------------------------------------------------------

struct JpegErrors {
  jpeg_error_mgr manager;  // first: libjpeg sees a pointer to it
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void JpegErrorExit(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  std::longjmp(errors->jump, 1);
}

// Warnings are quiet, but data that ends early is an error: libjpeg would
// fill the missing rows with gray and go on.
void JpegEmitMessage(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) JpegErrorExit(cinfo);
}

class JpegReader {
 public:
  explicit JpegReader(const File& file) : file_(file) {
    cinfo_.err = jpeg_std_error(&errors_.manager);
    errors_.manager.error_exit = JpegErrorExit;
    errors_.manager.emit_message = JpegEmitMessage;
    if (setjmp(errors_.jump)) file_.Fail(std::string("not a JPEG: ") + errors_.message);
    jpeg_create_decompress(&cinfo_);
    created_ = true;
  }
  ~JpegReader() {
    if (created_) jpeg_destroy_decompress(&cinfo_);
  }
  JpegReader(const JpegReader&) = delete;
  JpegReader& operator=(const JpegReader&) = delete;

  // Reads the header; its size is the full-size image's.
  ImageInfo ReadHeader() {
    if (setjmp(errors_.jump)) file_.Fail(std::string("not a JPEG: ") + errors_.message);
    jpeg_stdio_src(&cinfo_, file_.get());
    jpeg_read_header(&cinfo_, TRUE);
    if (cinfo_.jpeg_color_space == JCS_CMYK || cinfo_.jpeg_color_space == JCS_YCCK) {
      file_.Fail("CMYK JPEG images are not supported");
    }
    CheckSize(file_, cinfo_.image_width, cinfo_.image_height);
    return ImageInfo{ImageFormat::kJpeg, cinfo_.image_width, cinfo_.image_height};
  }

  // Chooses the scale and starts decoding; the output size is then known.
  void Start(int64_t min_width, int64_t min_height) {
    if (setjmp(errors_.jump)) file_.Fail(std::string("corrupt JPEG: ") + errors_.message);
    cinfo_.out_color_space = JCS_RGB;
    cinfo_.scale_num = 8;
    cinfo_.scale_denom = 8;
    if (min_width > 0 && min_height > 0) {
      // The smallest M/8 whose output still covers the target.
      for (unsigned m = 1; m < 8; ++m) {
        cinfo_.scale_num = m;
        jpeg_calc_output_dimensions(&cinfo_);
        if (cinfo_.output_width >= min_width && cinfo_.output_height >= min_height) break;
        cinfo_.scale_num = 8;
      }
    }
    jpeg_start_decompress(&cinfo_);
  }
  int64_t width() const { return cinfo_.output_width; }
  int64_t height() const { return cinfo_.output_height; }

  // Decodes every row into `pixels` (height() * width() * 3).
  void Read(uint8_t* pixels) {
    if (setjmp(errors_.jump)) file_.Fail(std::string("corrupt JPEG: ") + errors_.message);
    const size_t stride = static_cast<size_t>(cinfo_.output_width) * 3;
    while (cinfo_.output_scanline < cinfo_.output_height) {
      JSAMPROW rows[8];
      const JDIMENSION n = std::min<JDIMENSION>(8, cinfo_.output_height - cinfo_.output_scanline);
      for (JDIMENSION i = 0; i < n; ++i) rows[i] = pixels + (cinfo_.output_scanline + i) * stride;
      jpeg_read_scanlines(&cinfo_, rows, n);
    }
    jpeg_finish_decompress(&cinfo_);
  }

 private:
  const File& file_;
  jpeg_decompress_struct cinfo_{};
  JpegErrors errors_{};
  bool created_ = false;
};

// ---- PNG -------------------------------------------------------------------

struct PngErrors {
  char message[256];
};

void PngError(png_structp png, png_const_charp message) {
  auto* errors = static_cast<PngErrors*>(png_get_error_ptr(png));
  std::snprintf(errors->message, sizeof(errors->message), "%s", message);
  png_longjmp(png, 1);
}

void PngWarning(png_structp, png_const_charp) {}  // e.g. a known-incorrect sRGB profile

class PngReader {
 public:
  explicit PngReader(const File& file) : file_(file) {
    png_ = png_create_read_struct(PNG_LIBPNG_VER_STRING, &errors_, PngError, PngWarning);
    if (png_ != nullptr) info_ = png_create_info_struct(png_);
    if (png_ == nullptr || info_ == nullptr) file_.Fail("libpng could not start (out of memory)");
  }
  ~PngReader() { png_destroy_read_struct(&png_, info_ != nullptr ? &info_ : nullptr, nullptr); }
  PngReader(const PngReader&) = delete;
  PngReader& operator=(const PngReader&) = delete;

  ImageInfo ReadHeader() {
    if (setjmp(png_jmpbuf(png_))) file_.Fail(std::string("not a PNG: ") + errors_.message);
    png_init_io(png_, file_.get());
    png_read_info(png_, info_);
    const int64_t width = png_get_image_width(png_, info_);
    const int64_t height = png_get_image_height(png_, info_);
    CheckSize(file_, width, height);
    return ImageInfo{ImageFormat::kPng, width, height};
  }

  // Asks libpng for 8-bit samples, RGB, and says how many values a row's
  // pixel has (3, or 4 when an alpha channel is left for Read to drop).
  int Start() {
    if (setjmp(png_jmpbuf(png_))) file_.Fail(std::string("corrupt PNG: ") + errors_.message);
    const int color = png_get_color_type(png_, info_);
    const int depth = png_get_bit_depth(png_, info_);
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png_);
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png_);
    if (depth == 16) png_set_scale_16(png_);
    if ((color & PNG_COLOR_MASK_ALPHA) != 0) png_set_strip_alpha(png_);
    if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) {
      png_set_gray_to_rgb(png_);
    }
    png_set_interlace_handling(png_);
    png_read_update_info(png_, info_);
    if (png_get_bit_depth(png_, info_) != 8) png_error(png_, "not 8 bits after conversion");
    return png_get_channels(png_, info_);
  }

  // Decodes every row; rows[y] points at row y (width * channels values).
  void Read(png_bytep* rows) {
    if (setjmp(png_jmpbuf(png_))) file_.Fail(std::string("corrupt PNG: ") + errors_.message);
    png_read_image(png_, rows);
  }

 private:
  const File& file_;
  PngErrors errors_{};
  png_structp png_ = nullptr;
  png_infop info_ = nullptr;
};

RgbImage DecodeJpeg(const File& file, int64_t min_width, int64_t min_height) {
  JpegReader reader(file);
  reader.ReadHeader();
  reader.Start(min_width, min_height);
  RgbImage image;
  image.width = reader.width();
  image.height = reader.height();
  image.pixels.resize(image.width * image.height * 3);
  reader.Read(image.pixels.data());
  return image;
}

RgbImage DecodePng(const File& file) {
  PngReader reader(file);
  const ImageInfo info = reader.ReadHeader();
  const int channels = reader.Start();
  if (channels != 3 && channels != 4) {
    file.Fail("corrupt PNG: " + std::to_string(channels) + " channels after conversion to RGB");
  }
  std::vector<uint8_t> decoded(info.width * info.height * channels);
  std::vector<png_bytep> rows(info.height);
  for (int64_t y = 0; y < info.height; ++y) rows[y] = decoded.data() + y * info.width * channels;
  reader.Read(rows.data());
  RgbImage image;
  image.width = info.width;
  image.height = info.height;
  if (channels == 3) {
    image.pixels = std::move(decoded);
  } else {
    image.pixels.resize(info.width * info.height * 3);
    for (int64_t i = 0; i < info.width * info.height; ++i) {
      std::copy_n(decoded.data() + i * 4, 3, image.pixels.data() + i * 3);
    }
  }
  return image;
}

// ---- Resampling ------------------------------------------------------------

// For each output position: the first input position it reads and the
// normalised weights of the inputs from there (PIL's precompute_coeffs for
// its bilinear filter).
struct Taps {
  std::vector<int64_t> first;
  std::vector<int64_t> count;
  std::vector<float> weights;  // out * width, row i holds count[i] weights
  int64_t width = 0;
};

Taps TapsFor(int64_t in, int64_t out) {
  const double scale = static_cast<double>(in) / out;
  const double filter_scale = std::max(scale, 1.0);
  const double support = filter_scale;  // the triangle's support is 1 input pixel, widened
  Taps taps;
  taps.width = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  taps.first.resize(out);
  taps.count.resize(out);
  taps.weights.assign(out * taps.width, 0.0f);
  std::vector<double> w(taps.width);
  for (int64_t i = 0; i < out; ++i) {
    const double center = (i + 0.5) * scale;
    const int64_t lo = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    const int64_t hi = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in);
    double total = 0;
    int64_t n = 0;
    for (int64_t x = lo; x < hi && n < taps.width; ++x, ++n) {
      const double d = std::abs((x - center + 0.5) / filter_scale);
      w[n] = d < 1.0 ? 1.0 - d : 0.0;
      total += w[n];
    }
    taps.first[i] = lo;
    taps.count[i] = n;
    for (int64_t k = 0; k < n; ++k) {
      taps.weights[i * taps.width + k] = static_cast<float>(total > 0 ? w[k] / total : 0.0);
    }
  }
  return taps;
}

}  // namespace

ImageInfo ProbeImage(const std::string& path) {
  const File file(path);
  if (FormatOf(file) == ImageFormat::kJpeg) return JpegReader(file).ReadHeader();
  return PngReader(file).ReadHeader();
}

RgbImage DecodeImage(const std::string& path, int64_t min_width, int64_t min_height) {
  const File file(path);
  if (FormatOf(file) == ImageFormat::kJpeg) return DecodeJpeg(file, min_width, min_height);
  return DecodePng(file);
}

RgbImage DecodeImage(const EncodedImage& image, int64_t min_width, int64_t min_height) {
  const File file(image);
  if (FormatOf(file) == ImageFormat::kJpeg) return DecodeJpeg(file, min_width, min_height);
  return DecodePng(file);
}

void ResizeBilinear(const uint8_t* src, int64_t src_width, int64_t src_height, int64_t channels,
                    uint8_t* dst, int64_t dst_width, int64_t dst_height) {
  const Taps across = TapsFor(src_width, dst_width);
  const Taps down = TapsFor(src_height, dst_height);
  // Horizontal pass into floats (src_height x dst_width), then the vertical one.
  std::vector<float> mid(src_height * dst_width * channels);
  for (int64_t y = 0; y < src_height; ++y) {
    const uint8_t* row = src + y * src_width * channels;
    float* out = mid.data() + y * dst_width * channels;
    for (int64_t x = 0; x < dst_width; ++x) {
      const float* w = across.weights.data() + x * across.width;
      const uint8_t* in = row + across.first[x] * channels;
      for (int64_t c = 0; c < channels; ++c) {
        float sum = 0;
        for (int64_t k = 0; k < across.count[x]; ++k) sum += w[k] * in[k * channels + c];
        out[x * channels + c] = sum;
      }
    }
  }
  const int64_t row_values = dst_width * channels;
  std::vector<float> sum(row_values);
  for (int64_t y = 0; y < dst_height; ++y) {
    std::fill(sum.begin(), sum.end(), 0.0f);
    const float* w = down.weights.data() + y * down.width;
    for (int64_t k = 0; k < down.count[y]; ++k) {
      const float* in = mid.data() + (down.first[y] + k) * row_values;
      for (int64_t i = 0; i < row_values; ++i) sum[i] += w[k] * in[i];
    }
    uint8_t* out = dst + y * row_values;
    for (int64_t i = 0; i < row_values; ++i) {
      out[i] = static_cast<uint8_t>(std::clamp(std::lround(sum[i]), 0L, 255L));
    }
  }
}

namespace {

RgbImage Resized(RgbImage decoded, int64_t width, int64_t height) {
  if (decoded.width == width && decoded.height == height) return decoded;
  RgbImage resized;
  resized.width = width;
  resized.height = height;
  resized.pixels.resize(width * height * 3);
  ResizeBilinear(decoded.pixels.data(), decoded.width, decoded.height, 3, resized.pixels.data(),
                 width, height);
  return resized;
}

}  // namespace

RgbImage LoadRgbImage(const std::string& path, int64_t width, int64_t height) {
  return Resized(DecodeImage(path, width, height), width, height);
}

RgbImage LoadRgbImage(const EncodedImage& image, int64_t width, int64_t height) {
  return Resized(DecodeImage(image, width, height), width, height);
}

}  // namespace elastic::trainer
