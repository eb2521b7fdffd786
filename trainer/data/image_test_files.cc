#include "trainer/data/image_test_files.h"

#include <csetjmp>
#include <cstdio>
// clang-format off
#include <jpeglib.h>
// clang-format on
#include <png.h>

#include <cmath>
#include <memory>
#include <stdexcept>

namespace elastic::trainer::testing {
namespace {

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<FILE, FileCloser>;

FilePtr OpenForWriting(const std::string& path) {
  FilePtr file(std::fopen(path.c_str(), "wb"));
  if (!file) throw std::runtime_error("cannot write " + path);
  return file;
}

struct JpegErrors {
  jpeg_error_mgr manager;
  std::jmp_buf jump;
};

void JpegErrorExit(j_common_ptr cinfo) {
  std::longjmp(reinterpret_cast<JpegErrors*>(cinfo->err)->jump, 1);
}

}  // namespace

void WritePng(const std::string& path, const std::vector<uint8_t>& rows, int width, int height,
              int color_type, int bit_depth, const std::vector<uint8_t>& palette,
              const std::vector<uint8_t>& transparency, bool interlaced) {
  FilePtr file = OpenForWriting(path);
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  const size_t stride = rows.size() / height;
  std::vector<png_bytep> row_pointers(height);
  for (int y = 0; y < height; ++y) {
    row_pointers[y] = const_cast<png_bytep>(rows.data()) + y * stride;
  }
  std::vector<png_color> colors(palette.size() / 3);
  for (size_t i = 0; i < colors.size(); ++i) {
    colors[i] = png_color{palette[3 * i], palette[3 * i + 1], palette[3 * i + 2]};
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    throw std::runtime_error("libpng could not write " + path);
  }
  png_init_io(png, file.get());
  png_set_IHDR(png, info, width, height, bit_depth, color_type,
               interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (!colors.empty()) png_set_PLTE(png, info, colors.data(), static_cast<int>(colors.size()));
  if (!transparency.empty()) {
    png_set_tRNS(png, info, transparency.data(), static_cast<int>(transparency.size()), nullptr);
  }
  png_write_info(png, info);
  png_write_image(png, row_pointers.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
}

void WriteRgbPng(const std::string& path, const uint8_t* pixels, int width, int height,
                 int channels) {
  WritePng(path, std::vector<uint8_t>(pixels, pixels + width * height * channels), width, height,
           channels == 4 ? PNG_COLOR_TYPE_RGBA : PNG_COLOR_TYPE_RGB, 8);
}

void WriteJpeg(const std::string& path, const uint8_t* pixels, int width, int height, int channels,
               int quality) {
  FilePtr file = OpenForWriting(path);
  jpeg_compress_struct cinfo{};
  JpegErrors errors{};
  cinfo.err = jpeg_std_error(&errors.manager);
  errors.manager.error_exit = JpegErrorExit;
  if (setjmp(errors.jump)) {
    jpeg_destroy_compress(&cinfo);
    throw std::runtime_error("libjpeg could not write " + path);
  }
  jpeg_create_compress(&cinfo);
  jpeg_stdio_dest(&cinfo, file.get());
  cinfo.image_width = width;
  cinfo.image_height = height;
  cinfo.input_components = channels;
  cinfo.in_color_space = channels == 1 ? JCS_GRAYSCALE : channels == 4 ? JCS_CMYK : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(pixels) + cinfo.next_scanline * width * channels;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
}

std::vector<uint8_t> SmoothRgbImage(int width, int height, int seed) {
  std::vector<uint8_t> pixels(static_cast<size_t>(width) * height * 3);
  const double phase = seed * 0.7;
  const double cx = (0.3 + 0.4 * std::fmod(seed * 0.37, 1.0)) * width;
  const double cy = (0.3 + 0.4 * std::fmod(seed * 0.61, 1.0)) * height;
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const double u = static_cast<double>(x) / width, v = static_cast<double>(y) / height;
      const double r = std::hypot(x - cx, y - cy) / std::max(width, height);
      const double blob = std::exp(-r * r * 20);
      const double values[3] = {
          128 + 90 * std::sin(6.0 * u + phase) * (1 - blob) + 60 * blob,
          128 + 80 * std::cos(5.0 * v - phase) - 40 * blob,
          128 + 70 * std::sin(4.0 * (u + v) + 2 * phase) + 50 * blob,
      };
      for (int c = 0; c < 3; ++c) {
        pixels[(static_cast<size_t>(y) * width + x) * 3 + c] =
            static_cast<uint8_t>(std::lround(std::fmin(255, std::fmax(0, values[c]))));
      }
    }
  }
  return pixels;
}

}  // namespace elastic::trainer::testing
