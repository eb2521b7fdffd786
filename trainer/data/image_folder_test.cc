#include "trainer/data/image_folder.h"

#include <gtest/gtest.h>
#include <png.h>
#include <torch/torch.h>

#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/data/dataset.h"
#include "trainer/data/image_decode.h"
#include "trainer/data/image_test_files.h"
#include "trainer/data/loader.h"
#include "trainer/data/test_files.h"
#include "trainer/data/user_data.h"

namespace elastic::trainer {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "'" << (text) << "'"

std::vector<uint8_t> RandomPixels(int64_t n) {
  const torch::Tensor t = torch::randint(0, 256, {n}, torch::kUInt8);
  return std::vector<uint8_t>(t.data_ptr<uint8_t>(), t.data_ptr<uint8_t>() + n);
}

// HWC uint8 pixels as a CHW float tensor scaled to [0, 1].
torch::Tensor ToChw(const std::vector<uint8_t>& hwc, int64_t height, int64_t width) {
  return torch::from_blob(const_cast<uint8_t*>(hwc.data()), {height, width, 3}, torch::kUInt8)
      .permute({2, 0, 1})
      .to(torch::kFloat32)
      .div(255.0f);
}

double MeanAbsError(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += std::abs(int{a[i]} - int{b[i]});
  return sum / a.size();
}

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

void WriteText(const std::string& path, const std::string& text) {
  testing::WriteFile(path, std::vector<uint8_t>(text.begin(), text.end()));
}

// ---- Codecs ----------------------------------------------------------------

TEST(ImageDecode, PngIsLossless) {
  ScratchDir dir;
  const std::vector<uint8_t> rgb = RandomPixels(13 * 20 * 3);
  testing::WriteRgbPng(dir / "a.png", rgb.data(), 20, 13);
  const ImageInfo info = ProbeImage(dir / "a.png");
  EXPECT_EQ(info.format, ImageFormat::kPng);
  EXPECT_EQ(info.width, 20);
  EXPECT_EQ(info.height, 13);
  const RgbImage image = DecodeImage(dir / "a.png");
  EXPECT_EQ(image.width, 20);
  EXPECT_EQ(image.height, 13);
  EXPECT_EQ(image.pixels, rgb);
}

// Every PNG colour type and depth becomes the 8-bit RGB that PIL's convert("RGB") gives.
TEST(ImageDecode, PngColourTypesBecomeEightBitRgb) {
  ScratchDir dir;
  const int w = 4, h = 2;
  // Gray 8-bit: each value replicated.
  const std::vector<uint8_t> gray = {0, 10, 20, 30, 40, 50, 60, 255};
  testing::WritePng(dir / "gray.png", gray, w, h, PNG_COLOR_TYPE_GRAY, 8);
  std::vector<uint8_t> expected;
  for (uint8_t g : gray) expected.insert(expected.end(), {g, g, g});
  EXPECT_EQ(DecodeImage(dir / "gray.png").pixels, expected);

  // Gray 1-bit: 0 -> 0, 1 -> 255. Rows are packed, most significant bit first.
  testing::WritePng(dir / "bits.png", {0b10100000, 0b01010000}, w, h, PNG_COLOR_TYPE_GRAY, 1);
  const std::vector<uint8_t> bits = DecodeImage(dir / "bits.png").pixels;
  const std::vector<int> on = {1, 0, 1, 0, 0, 1, 0, 1};
  for (int i = 0; i < w * h; ++i) EXPECT_EQ(bits[i * 3], on[i] ? 255 : 0) << i;

  // Palette with transparency: looked up, alpha dropped.
  const std::vector<uint8_t> palette = {255, 0, 0, 0, 255, 0, 0, 0, 255};
  testing::WritePng(dir / "palette.png", {0, 1, 2, 1, 2, 0, 0, 0}, w, h, PNG_COLOR_TYPE_PALETTE, 8,
                    palette, {255, 0, 128});
  const std::vector<uint8_t> p = DecodeImage(dir / "palette.png").pixels;
  ASSERT_EQ(p.size(), 24u);
  EXPECT_EQ(std::vector<uint8_t>(p.begin() + 3, p.begin() + 6), (std::vector<uint8_t>{0, 255, 0}));
  EXPECT_EQ(std::vector<uint8_t>(p.begin() + 6, p.begin() + 9), (std::vector<uint8_t>{0, 0, 255}));

  // 16-bit RGB: v * 257 scales back to v exactly.
  const std::vector<uint8_t> rgb = RandomPixels(w * h * 3);
  std::vector<uint8_t> rgb16;
  for (uint8_t v : rgb) rgb16.insert(rgb16.end(), {v, v});  // big-endian v * 257
  testing::WritePng(dir / "deep.png", rgb16, w, h, PNG_COLOR_TYPE_RGB, 16);
  EXPECT_EQ(DecodeImage(dir / "deep.png").pixels, rgb);

  // RGBA and gray+alpha: the alpha channel is dropped, not composited.
  std::vector<uint8_t> rgba;
  for (int i = 0; i < w * h; ++i)
    rgba.insert(rgba.end(), {rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2], 7});
  testing::WriteRgbPng(dir / "alpha.png", rgba.data(), w, h, 4);
  EXPECT_EQ(DecodeImage(dir / "alpha.png").pixels, rgb);
  testing::WritePng(dir / "gray_alpha.png", {9, 0, 8, 0, 7, 0, 6, 0, 5, 0, 4, 0, 3, 0, 2, 0}, w, h,
                    PNG_COLOR_TYPE_GRAY_ALPHA, 8);
  EXPECT_EQ(DecodeImage(dir / "gray_alpha.png").pixels[3 * 7 + 2], 2);

  // Interlaced (Adam7) decodes to the same pixels.
  const std::vector<uint8_t> big = RandomPixels(9 * 11 * 3);
  testing::WritePng(dir / "adam7.png", big, 11, 9, PNG_COLOR_TYPE_RGB, 8, {}, {}, true);
  EXPECT_EQ(DecodeImage(dir / "adam7.png").pixels, big);
}

TEST(ImageDecode, JpegIsCloseToItsSource) {
  ScratchDir dir;
  const std::vector<uint8_t> rgb = testing::SmoothRgbImage(64, 48, 3);
  testing::WriteJpeg(dir / "a.jpg", rgb.data(), 64, 48);
  const ImageInfo info = ProbeImage(dir / "a.jpg");
  EXPECT_EQ(info.format, ImageFormat::kJpeg);
  EXPECT_EQ(info.width, 64);
  EXPECT_EQ(info.height, 48);
  const RgbImage image = DecodeImage(dir / "a.jpg");
  ASSERT_EQ(image.pixels.size(), rgb.size());
  EXPECT_LT(MeanAbsError(image.pixels, rgb), 2.0);

  // Grayscale JPEG: three equal channels.
  std::vector<uint8_t> gray(64 * 48);
  for (size_t i = 0; i < gray.size(); ++i) gray[i] = rgb[3 * i];
  testing::WriteJpeg(dir / "gray.jpg", gray.data(), 64, 48, 1);
  const RgbImage g = DecodeImage(dir / "gray.jpg");
  for (size_t i = 0; i < gray.size(); ++i) {
    ASSERT_EQ(g.pixels[3 * i], g.pixels[3 * i + 1]);
    ASSERT_EQ(g.pixels[3 * i], g.pixels[3 * i + 2]);
  }
}

// A much larger JPEG is decoded at a DCT scale that still covers the target,
// and the result is close to decoding it fully and resizing.
TEST(ImageDecode, LargeJpegDecodesAtAReducedScale) {
  ScratchDir dir;
  const std::vector<uint8_t> rgb = testing::SmoothRgbImage(256, 256, 5);
  testing::WriteJpeg(dir / "big.jpg", rgb.data(), 256, 256);
  const RgbImage quarter = DecodeImage(dir / "big.jpg", 64, 64);
  EXPECT_EQ(quarter.width, 64);  // 2/8 of 256
  EXPECT_EQ(quarter.height, 64);
  const RgbImage covering = DecodeImage(dir / "big.jpg", 70, 40);
  EXPECT_EQ(covering.width, 96);  // 3/8: the smallest scale with both sides covered
  const RgbImage full = DecodeImage(dir / "big.jpg");
  EXPECT_EQ(full.width, 256);
  std::vector<uint8_t> reference(64 * 64 * 3);
  ResizeBilinear(full.pixels.data(), 256, 256, 3, reference.data(), 64, 64);
  EXPECT_LT(MeanAbsError(quarter.pixels, reference), 2.0);
  const RgbImage loaded = LoadRgbImage(dir / "big.jpg", 48, 48);
  EXPECT_EQ(loaded.width, 48);
  EXPECT_EQ(loaded.pixels.size(), 48u * 48u * 3u);
}

// The resampler agrees with LibTorch's antialiased bilinear interpolation
// (the PIL-equivalent one) to within rounding, reducing and enlarging.
TEST(ImageDecode, ResizeMatchesAntialiasedBilinear) {
  const std::vector<uint8_t> src = RandomPixels(30 * 40 * 3);
  const torch::Tensor x = ToChw(src, 30, 40).unsqueeze(0) * 255.0f;
  for (const auto& [w, h] : std::vector<std::pair<int64_t, int64_t>>{{16, 16}, {64, 50}, {40, 7}}) {
    std::vector<uint8_t> out(w * h * 3);
    ResizeBilinear(src.data(), 40, 30, 3, out.data(), w, h);
    const torch::Tensor expected =
        torch::nn::functional::interpolate(x, torch::nn::functional::InterpolateFuncOptions()
                                                  .size(std::vector<int64_t>{h, w})
                                                  .mode(torch::kBilinear)
                                                  .align_corners(false)
                                                  .antialias(true));
    const torch::Tensor got = ToChw(out, h, w).unsqueeze(0) * 255.0f;
    EXPECT_LE((got - expected).abs().max().item<float>(), 1.0f) << w << "x" << h;
  }
  // Same size: a copy.
  std::vector<uint8_t> same(src.size());
  ResizeBilinear(src.data(), 40, 30, 3, same.data(), 40, 30);
  EXPECT_EQ(same, src);
}

TEST(ImageDecode, BrokenFilesAreErrorsThatSayWhy) {
  ScratchDir dir;
  WriteText(dir / "text.png", "this is not an image\n");
  EXPECT_CONTAINS(ErrorOf([&] { ProbeImage(dir / "text.png"); }), "not a JPEG or PNG image");
  EXPECT_CONTAINS(ErrorOf([&] { ProbeImage(dir / "text.png"); }), dir / "text.png");
  testing::WriteFile(dir / "empty.jpg", {});
  EXPECT_CONTAINS(ErrorOf([&] { ProbeImage(dir / "empty.jpg"); }), "empty file");
  EXPECT_CONTAINS(ErrorOf([&] { ProbeImage(dir / "absent.jpg"); }), "cannot open");

  const std::vector<uint8_t> rgb = testing::SmoothRgbImage(64, 64, 1);
  testing::WriteJpeg(dir / "good.jpg", rgb.data(), 64, 64);
  std::vector<uint8_t> bytes = testing::ReadFile(dir / "good.jpg");
  // Cut inside the header: the probe fails.
  testing::WriteFile(dir / "header_cut.jpg",
                     std::vector<uint8_t>(bytes.begin(), bytes.begin() + 100));
  EXPECT_CONTAINS(ErrorOf([&] { ProbeImage(dir / "header_cut.jpg"); }), "not a JPEG");
  // Cut inside the image data: the header is fine, the decode fails.
  testing::WriteFile(dir / "data_cut.jpg",
                     std::vector<uint8_t>(bytes.begin(), bytes.begin() + bytes.size() * 2 / 3));
  EXPECT_NO_THROW(ProbeImage(dir / "data_cut.jpg"));
  EXPECT_CONTAINS(ErrorOf([&] { DecodeImage(dir / "data_cut.jpg"); }), "Premature end");
  EXPECT_THROW(DecodeImage(dir / "data_cut.jpg"), ImageDecodeError);

  // A CMYK JPEG is refused at the probe.
  std::vector<uint8_t> cmyk(16 * 16 * 4, 100);
  testing::WriteJpeg(dir / "cmyk.jpg", cmyk.data(), 16, 16, 4);
  EXPECT_CONTAINS(ErrorOf([&] { ProbeImage(dir / "cmyk.jpg"); }), "CMYK");

  // A PNG cut inside its image data.
  testing::WriteRgbPng(dir / "good.png", RandomPixels(32 * 32 * 3).data(), 32, 32);
  bytes = testing::ReadFile(dir / "good.png");
  testing::WriteFile(dir / "cut.png",
                     std::vector<uint8_t>(bytes.begin(), bytes.begin() + bytes.size() / 2));
  EXPECT_NO_THROW(ProbeImage(dir / "cut.png"));
  EXPECT_CONTAINS(ErrorOf([&] { DecodeImage(dir / "cut.png"); }), "corrupt PNG");
  // A PNG whose IHDR checksum is wrong.
  bytes[20] ^= 0xff;
  testing::WriteFile(dir / "crc.png", bytes);
  EXPECT_CONTAINS(ErrorOf([&] { ProbeImage(dir / "crc.png"); }), "not a PNG");
}

// ---- Image folders ---------------------------------------------------------

// Writes `n` random w x h PNGs into dir/split/cls and returns their pixels.
std::vector<std::vector<uint8_t>> WritePngClass(const std::string& root, const std::string& cls,
                                                int n, int w, int h) {
  fs::create_directories(root + "/" + cls);
  std::vector<std::vector<uint8_t>> images;
  for (int i = 0; i < n; ++i) {
    images.push_back(RandomPixels(w * h * 3));
    testing::WriteRgbPng(root + "/" + cls + "/img" + std::to_string(i) + ".png",
                         images.back().data(), w, h);
  }
  return images;
}

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

TEST(ImageFolder, ScanSortsClassesAndFilesAsTorchvision) {
  ScratchDir dir;
  const std::string split = dir / "train";
  for (const std::string cls : {"b", "a", "C"}) fs::create_directories(split + "/" + cls);
  const std::vector<uint8_t> rgb = RandomPixels(8 * 8 * 3);
  for (const std::string f :
       {"b/2.png", "b/10.PNG", "a/z.jpg", "a/sub/a.png", "a/y.JPEG", "C/x.png"}) {
    fs::create_directories(fs::path(split + "/" + f).parent_path());
    if (f.find("jp") != std::string::npos || f.find("JP") != std::string::npos) {
      testing::WriteJpeg(split + "/" + f, rgb.data(), 8, 8);
    } else {
      testing::WriteRgbPng(split + "/" + f, rgb.data(), 8, 8);
    }
  }
  WriteText(split + "/a/notes.txt", "x");
  WriteText(split + "/README", "x");
  const ImageFolderSplit scan = ScanImageFolder(split);
  EXPECT_EQ(scan.class_names, (std::vector<std::string>{"C", "a", "b"}));
  std::vector<std::string> order;
  std::vector<int64_t> labels;
  for (const ImageFile& f : scan.files) {
    order.push_back(fs::relative(f.path, split).string());
    labels.push_back(f.label);
  }
  // Folder a's own files before those of a/sub, as sorted(os.walk(...)) gives them.
  EXPECT_EQ(order, (std::vector<std::string>{"C/x.png", "a/y.JPEG", "a/z.jpg", "a/sub/a.png",
                                             "b/10.PNG", "b/2.png"}));
  EXPECT_EQ(labels, (std::vector<int64_t>{0, 1, 1, 1, 2, 2}));
  EXPECT_EQ(scan.ignored.size(), 2u);
  EXPECT_TRUE(scan.unreadable.empty());
}

// PNG pixels go through losslessly: a batch is exactly the CIFAR path's
// result for the same 32x32 pixels and normalisation, augmented or not.
TEST(ImageFolder, PngImagesGiveTheCifarPathsBatch) {
  ScratchDir dir;
  std::vector<std::vector<uint8_t>> pixels;
  std::vector<int64_t> labels;
  for (int k = 0; k < 3; ++k) {
    for (auto& image : WritePngClass(dir / "train", "class" + std::to_string(k), 4, 32, 32)) {
      pixels.push_back(std::move(image));
      labels.push_back(k);
    }
  }
  WritePngClass(dir / "test", "class1", 2, 32, 32);
  const UserData data = LoadImageFolder(dir.path(), 32);
  EXPECT_EQ(data.class_names, (std::vector<std::string>{"class0", "class1", "class2"}));
  EXPECT_EQ(data.channels, 3);
  EXPECT_EQ(data.height, 32);
  EXPECT_EQ(data.train->size(), 12);
  EXPECT_EQ(data.test->size(), 2);
  EXPECT_TRUE(torch::equal(data.test->Get({0, 1}, {}).targets, torch::tensor({1, 1})));

  torch::Tensor images = torch::empty({12, 3, 32, 32}, torch::kUInt8);
  for (int64_t i = 0; i < 12; ++i) {
    images[i].copy_(
        torch::from_blob(pixels[i].data(), {32, 32, 3}, torch::kUInt8).permute({2, 0, 1}));
  }
  const auto& examples = dynamic_cast<const ImageFolderExamples&>(*data.train);
  const PixelNormalizer& norm = examples.normalizer();
  const Normalization measured = MeasureNormalization(images);
  Normalization same{};
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(norm.mean()[c], measured.mean[c], 1e-6);  // all 12 images are sampled
    EXPECT_NEAR(norm.std()[c], measured.std[c], 1e-6);
    same.mean[c] = norm.mean()[c];
    same.std[c] = norm.std()[c];
  }
  const ImageExamples cifar(std::make_shared<InMemoryDataset>(
      "cifar-like", images, torch::tensor(labels), data.class_names, same));
  for (bool augment : {false, true}) {
    for (bool channels_last : {false, true}) {
      const BatchRequest request{1, augment, 4, channels_last};
      const Batch got = data.train->Get(Iota(12), request);
      const Batch expected = cifar.Get(Iota(12), request);
      EXPECT_TRUE(torch::equal(got.inputs, expected.inputs))
          << "augment " << augment << " channels_last " << channels_last;
      EXPECT_TRUE(torch::equal(got.targets, expected.targets));
      EXPECT_EQ(got.inputs.is_contiguous(torch::MemoryFormat::ChannelsLast), channels_last);
    }
  }
  EXPECT_EQ(examples.failed_decodes(), 0);
}

TEST(ImageFolder, ResizesJpegsToTheImageSize) {
  ScratchDir dir;
  for (const std::string split : {"train", "val"}) {
    for (int k = 0; k < 2; ++k) {
      const std::string cls = dir / split + "/c" + std::to_string(k);
      fs::create_directories(cls);
      for (int i = 0; i < 3; ++i) {
        const std::vector<uint8_t> rgb = testing::SmoothRgbImage(40, 30, k * 10 + i);
        testing::WriteJpeg(cls + "/" + std::to_string(i) + ".jpg", rgb.data(), 40, 30);
      }
    }
  }
  const UserData data = LoadImageFolder(dir.path(), 24);  // test/ is absent: val/ is used
  EXPECT_EQ(data.height, 24);
  EXPECT_EQ(data.width, 24);
  EXPECT_EQ(data.test->size(), 6);
  const Batch batch = data.train->Get({4}, {});
  ASSERT_EQ(batch.inputs.sizes(), (std::vector<int64_t>{1, 3, 24, 24}));
  // The sample is the source resized, then normalised: compare in [0, 1] pixels.
  const auto& norm = dynamic_cast<const ImageFolderExamples&>(*data.train).normalizer();
  const torch::Tensor pixels = batch.inputs[0] * torch::tensor(norm.std()).view({3, 1, 1}) +
                               torch::tensor(norm.mean()).view({3, 1, 1});
  const std::vector<uint8_t> source = testing::SmoothRgbImage(40, 30, 11);
  std::vector<uint8_t> resized(24 * 24 * 3);
  ResizeBilinear(source.data(), 40, 30, 3, resized.data(), 24, 24);
  // JPEG's loss and the 7/8 DCT scale (35x27 covers 24x24) cost a few levels; another
  // image of the set is tens of levels away.
  EXPECT_LT((pixels - ToChw(resized, 24, 24)).abs().mean().item<float>(), 4.0f / 255);
  const std::vector<uint8_t> other = testing::SmoothRgbImage(40, 30, 10);
  ResizeBilinear(other.data(), 40, 30, 3, resized.data(), 24, 24);
  EXPECT_GT((pixels - ToChw(resized, 24, 24)).abs().mean().item<float>(), 10.0f / 255);
  EXPECT_TRUE(torch::equal(batch.targets, torch::tensor({1})));
}

TEST(ImageFolder, AugmentationIsDeterministicAndChannelsLastIsTheSameBatch) {
  ScratchDir dir;
  WritePngClass(dir / "train", "x", 6, 16, 16);
  WritePngClass(dir / "test", "x", 1, 16, 16);
  const UserData data = LoadImageFolder(dir.path(), 16);
  const BatchRequest request{5, true, 3, false};
  const Batch a = data.train->Get(Iota(6), request);
  EXPECT_TRUE(torch::equal(data.train->Get(Iota(6), request).inputs, a.inputs));
  EXPECT_TRUE(torch::equal(data.train->Get({3}, request).inputs[0], a.inputs[3]));
  EXPECT_FALSE(torch::equal(data.train->Get(Iota(6), {6, true, 3, false}).inputs, a.inputs));
  const Batch last = data.train->Get(Iota(6), {5, true, 3, true});
  EXPECT_TRUE(last.inputs.is_contiguous(torch::MemoryFormat::ChannelsLast));
  const torch::Tensor expected = a.inputs.contiguous(torch::MemoryFormat::ChannelsLast);
  EXPECT_TRUE(std::equal(last.inputs.data_ptr<float>(),
                         last.inputs.data_ptr<float>() + last.inputs.numel(),
                         expected.data_ptr<float>()));
  // Through the loader with several threads: the same batches.
  Loader loader(data.train, LoaderOptions{4, true, 3, 2, 3, false, false});
  loader.Start(Iota(6), 5);
  torch::Tensor first = loader.Next()->inputs;
  EXPECT_TRUE(torch::equal(first, a.inputs.narrow(0, 0, 4)));
}

TEST(ImageFolder, TestClassesMayBeASubsetAndKeepTheirTrainingIndex) {
  ScratchDir dir;
  for (const std::string cls : {"ant", "bee", "cat"}) WritePngClass(dir / "train", cls, 1, 8, 8);
  WritePngClass(dir / "test", "cat", 2, 8, 8);
  const UserData data = LoadImageFolder(dir.path(), 8);
  EXPECT_EQ(data.class_names.size(), 3u);
  EXPECT_TRUE(torch::equal(data.test->Get({0, 1}, {}).targets, torch::tensor({2, 2})));
}

TEST(ImageFolder, UnreadableFilesAreSkippedWithAWarningThatNamesThem) {
  ScratchDir dir;
  WritePngClass(dir / "train", "a", 3, 16, 16);
  WritePngClass(dir / "test", "a", 1, 16, 16);
  WriteText(dir / "train/a/text.png", "not an image");
  testing::WriteFile(dir / "train/a/empty.jpg", {});
  WriteText(dir / "train/a/notes.txt", "ignored");
  ::testing::internal::CaptureStderr();
  const UserData data = LoadImageFolder(dir.path(), 16);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(data.train->size(), 3);
  EXPECT_CONTAINS(err, "skipped 2 of 6 files that are not readable JPEG/PNG images");
  EXPECT_CONTAINS(err, "train/a/empty.jpg (empty file)");
  EXPECT_CONTAINS(err, "train/a/text.png (not a JPEG or PNG image");
  EXPECT_CONTAINS(err,
                  "ignored 1 files without a .jpg, .jpeg or .png extension: train/a/notes.txt");
}

// A file whose header is fine but whose data is not: the sample is zeros,
// the failure counted, the rest of the batch intact.
TEST(ImageFolder, CorruptDataFoundInAFullDecodeGivesZerosAndIsCounted) {
  ScratchDir dir;
  fs::create_directories(dir / "train/a");
  fs::create_directories(dir / "test/a");
  for (int i = 0; i < 3; ++i) {
    const std::vector<uint8_t> rgb = testing::SmoothRgbImage(64, 64, i);
    testing::WriteJpeg(dir / ("train/a/" + std::to_string(i) + ".jpg"), rgb.data(), 64, 64);
  }
  testing::WriteJpeg(dir / "test/a/0.jpg", testing::SmoothRgbImage(64, 64, 9).data(), 64, 64);
  // Cut halfway through the entropy-coded data after the start-of-scan marker.
  const std::vector<uint8_t> bytes = testing::ReadFile(dir / "train/a/1.jpg");
  size_t scan = 0;
  while (scan + 1 < bytes.size() && !(bytes[scan] == 0xFF && bytes[scan + 1] == 0xDA)) ++scan;
  ASSERT_LT(scan + 1, bytes.size());
  testing::WriteFile(
      dir / "train/a/1.jpg",
      std::vector<uint8_t>(bytes.begin(), bytes.begin() + (scan + bytes.size()) / 2));
  const UserData data = LoadImageFolder(dir.path(), 32);
  const auto& train = dynamic_cast<const ImageFolderExamples&>(*data.train);
  ASSERT_EQ(train.size(), 3);  // the probe only reads the header
  const int64_t failed_while_measuring = train.failed_decodes();
  EXPECT_EQ(failed_while_measuring, 0);  // measuring leaves it out without counting
  ::testing::internal::CaptureStderr();
  const Batch batch = train.Get({0, 1, 2}, BatchRequest{0, true, 1, false});
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(train.failed_decodes(), 1);
  EXPECT_TRUE(torch::equal(batch.inputs[1], torch::zeros({3, 32, 32})));
  EXPECT_GT(batch.inputs[0].abs().sum().item<float>(), 0);
  EXPECT_GT(batch.inputs[2].abs().sum().item<float>(), 0);
  EXPECT_CONTAINS(err, "sample 1 is all zeros");
  EXPECT_CONTAINS(err, "1.jpg");
  train.Get({1}, {});
  EXPECT_EQ(train.failed_decodes(), 2);
}

TEST(ImageFolder, LayoutErrorsNameTheFolder) {
  struct Case {
    const char* name;
    std::function<void(const std::string&)> make;
    std::string problem;
  };
  const std::vector<Case> cases = {
      {"no train", [](const std::string& d) { WritePngClass(d + "/test", "a", 1, 8, 8); },
       "has no train/ folder"},
      {"no test", [](const std::string& d) { WritePngClass(d + "/train", "a", 1, 8, 8); },
       "has neither test/ nor val/"},
      {"empty class",
       [](const std::string& d) {
         WritePngClass(d + "/train", "a", 1, 8, 8);
         fs::create_directories(d + "/train/b");
         WritePngClass(d + "/test", "a", 1, 8, 8);
       },
       "class folder " + std::string("%/train/b has no .jpg, .jpeg or .png file")},
      {"class of unreadable files",
       [](const std::string& d) {
         WritePngClass(d + "/train", "a", 1, 8, 8);
         fs::create_directories(d + "/train/b");
         WriteText(d + "/train/b/x.jpg", "text");
         WritePngClass(d + "/test", "a", 1, 8, 8);
       },
       "%/train/b has no readable image (1 files are not readable JPEG/PNG images)"},
      {"no classes",
       [](const std::string& d) {
         WritePngClass(d + "/train", "a", 1, 8, 8);
         fs::create_directories(d + "/test");
         WriteText(d + "/test/loose.png", "x");
       },
       "%/test has no class folders"},
      {"unknown test class",
       [](const std::string& d) {
         WritePngClass(d + "/train", "a", 1, 8, 8);
         WritePngClass(d + "/test", "zebra", 1, 8, 8);
       },
       "class %/test/zebra has no folder in %/train"},
  };
  for (const Case& c : cases) {
    ScratchDir dir;
    c.make(dir.path());
    std::string problem = c.problem;
    for (size_t at; (at = problem.find('%')) != std::string::npos;)
      problem.replace(at, 1, dir.path());
    const std::string error = ErrorOf([&] { LoadImageFolder(dir.path(), 8); });
    EXPECT_CONTAINS(error, problem) << c.name;
  }
  EXPECT_CONTAINS(ErrorOf([] { LoadImageFolder("/nonexistent/images", 8); }),
                  "/nonexistent/images is not a directory");
}

}  // namespace
}  // namespace elastic::trainer
