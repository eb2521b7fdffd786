#include "trainer/data/pixels.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <set>
#include <stdexcept>
#include <tuple>

#include "trainer/data/augment.h"

namespace elastic::trainer {
namespace {

PixelNormalizer Norm(int64_t channels) {
  const std::vector<float> mean = {0.5f, 0.4f, 0.3f, 0.2f};
  const std::vector<float> std = {0.25f, 0.2f, 0.1f, 0.3f};
  return PixelNormalizer(std::vector<float>(mean.begin(), mean.begin() + channels),
                         std::vector<float>(std.begin(), std.begin() + channels));
}

// The same transform in tensor ops: zero-pad, take the window, flip, scale, normalise.
torch::Tensor Reference(const torch::Tensor& chw, const CropFlip& crop,
                        const PixelNormalizer& norm) {
  const int64_t h = chw.size(1), w = chw.size(2), p = crop.padding;
  torch::Tensor x = chw.to(torch::kFloat32);
  if (chw.scalar_type() == torch::kUInt8) x = x / 255.0f;
  x = torch::constant_pad_nd(x, {p, p, p, p}, 0.0);
  x = x.narrow(1, crop.dy, h).narrow(2, crop.dx, w);
  if (crop.flip) x = x.flip({2});
  const auto mean = torch::tensor(norm.mean()).view({-1, 1, 1});
  const auto std = torch::tensor(norm.std()).view({-1, 1, 1});
  return (x - mean) / std;
}

torch::Tensor Apply(const PixelNormalizer& norm, const torch::Tensor& chw, const CropFlip& crop,
                    PixelLayout dst_layout = PixelLayout::kCHW) {
  const int64_t c = chw.size(0), h = chw.size(1), w = chw.size(2);
  torch::Tensor out =
      dst_layout == PixelLayout::kCHW ? torch::empty({c, h, w}) : torch::empty({h, w, c});
  if (chw.scalar_type() == torch::kUInt8) {
    norm.Apply(chw.contiguous().data_ptr<uint8_t>(), PixelLayout::kCHW, h, w, crop,
               out.data_ptr<float>(), dst_layout);
  } else {
    norm.Apply(chw.contiguous().data_ptr<float>(), PixelLayout::kCHW, h, w, crop,
               out.data_ptr<float>(), dst_layout);
  }
  return dst_layout == PixelLayout::kCHW ? out : out.permute({2, 0, 1});
}

TEST(Pixels, CropPaddingIsAnEighthOfTheShorterSideAtLeastOne) {
  EXPECT_EQ(CropPaddingFor(32, 32), 4);
  EXPECT_EQ(CropPaddingFor(64, 64), 8);
  EXPECT_EQ(CropPaddingFor(28, 28), 3);
  EXPECT_EQ(CropPaddingFor(64, 16), 2);
  EXPECT_EQ(CropPaddingFor(7, 7), 1);
  EXPECT_EQ(CropPaddingFor(1, 1), 1);
}

TEST(Pixels, RandomCropFlipChoosesAsCifarDoesForPaddingFour) {
  for (int64_t i = 0; i < 500; ++i) {
    const Augmentation cifar = AugmentationFor(7, 3, i);
    const CropFlip crop = RandomCropFlip(7, 3, i, 4);
    EXPECT_EQ(crop.padding, 4);
    EXPECT_EQ(crop.dy, cifar.dy) << i;
    EXPECT_EQ(crop.dx, cifar.dx) << i;
    EXPECT_EQ(crop.flip, cifar.flip) << i;
  }
}

TEST(Pixels, RandomCropFlipIsDeterministicAndCoversEveryWindow) {
  std::set<std::tuple<int64_t, int64_t, bool>> seen;
  int changed_with_epoch = 0;
  for (int64_t i = 0; i < 2000; ++i) {
    const CropFlip a = RandomCropFlip(11, 0, i, 2);
    const CropFlip b = RandomCropFlip(11, 0, i, 2);
    EXPECT_EQ(std::make_tuple(a.dy, a.dx, a.flip), std::make_tuple(b.dy, b.dx, b.flip));
    ASSERT_GE(a.dy, 0);
    ASSERT_LE(a.dy, 4);
    ASSERT_GE(a.dx, 0);
    ASSERT_LE(a.dx, 4);
    seen.insert({a.dy, a.dx, a.flip});
    const CropFlip e = RandomCropFlip(11, 1, i, 2);
    if (std::make_tuple(a.dy, a.dx, a.flip) != std::make_tuple(e.dy, e.dx, e.flip)) {
      ++changed_with_epoch;
    }
  }
  EXPECT_EQ(seen.size(), 5u * 5u * 2u);
  EXPECT_GT(changed_with_epoch, 1800);  // 49 of 50 choices differ by chance
}

TEST(Pixels, Uint8ThreeByThirtyTwoIsBitIdenticalToTheCifarPath) {
  const Normalization cifar_norm = {{0.5f, 0.4f, 0.3f}, {0.25f, 0.2f, 0.1f}};
  const PixelNormalizer norm = Norm(3);
  const torch::Tensor image = torch::randint(0, 256, {3, 32, 32}, torch::kUInt8);
  for (int64_t i = 0; i < 50; ++i) {
    for (bool channels_last : {false, true}) {
      const Augmentation aug = AugmentationFor(1, 2, i);
      torch::Tensor expected = torch::empty({3 * 32 * 32});
      AugmentAndNormalize(image.data_ptr<uint8_t>(), aug, cifar_norm, expected.data_ptr<float>(),
                          channels_last);
      torch::Tensor got = torch::empty({3 * 32 * 32});
      norm.Apply(image.data_ptr<uint8_t>(), PixelLayout::kCHW, 32, 32, RandomCropFlip(1, 2, i, 4),
                 got.data_ptr<float>(), channels_last ? PixelLayout::kHWC : PixelLayout::kCHW);
      EXPECT_TRUE(torch::equal(got, expected))
          << "sample " << i << " channels_last " << channels_last;
    }
  }
}

// Every window and flip, every channel count, non-square, both pixel types.
TEST(Pixels, EqualsTheTensorOpReference) {
  for (int64_t channels = 1; channels <= 4; ++channels) {
    const PixelNormalizer norm = Norm(channels);
    const torch::Tensor u8 = torch::randint(0, 256, {channels, 9, 13}, torch::kUInt8);
    const torch::Tensor f32 = torch::randn({channels, 9, 13});
    const int64_t p = CropPaddingFor(9, 13);
    ASSERT_EQ(p, 1);
    for (int64_t dy = 0; dy <= 2 * p; ++dy) {
      for (int64_t dx = 0; dx <= 2 * p; ++dx) {
        for (bool flip : {false, true}) {
          const CropFlip crop{p, dy, dx, flip};
          for (const torch::Tensor& image : {u8, f32}) {
            EXPECT_TRUE(
                torch::allclose(Apply(norm, image, crop), Reference(image, crop, norm), 1e-5, 1e-5))
                << channels << " channels, dy " << dy << " dx " << dx << " flip " << flip << " "
                << image.scalar_type();
          }
        }
      }
    }
  }
}

TEST(Pixels, CropOffsetMovesTheImageAndPadsWithNormalisedZeros) {
  const PixelNormalizer norm = Norm(1);
  const torch::Tensor image = torch::arange(1, 65, torch::kFloat32).view({1, 8, 8});
  // Window at the padded image's top-left corner: the image moves down-right by the padding.
  const torch::Tensor out = Apply(norm, image, CropFlip{1, 0, 0, false});
  const float zero = (0.0f - 0.5f) / 0.25f;
  EXPECT_FLOAT_EQ(out[0][0][0].item<float>(), zero);  // padding
  EXPECT_FLOAT_EQ(out[0][0][5].item<float>(), zero);
  EXPECT_FLOAT_EQ(out[0][5][0].item<float>(), zero);
  EXPECT_FLOAT_EQ(out[0][1][1].item<float>(), (1.0f - 0.5f) / 0.25f);   // source (0, 0)
  EXPECT_FLOAT_EQ(out[0][7][7].item<float>(), (55.0f - 0.5f) / 0.25f);  // source (6, 6)
  // Bottom-right window: the image moves up-left.
  const torch::Tensor up = Apply(norm, image, CropFlip{1, 2, 2, false});
  EXPECT_FLOAT_EQ(up[0][0][0].item<float>(), (10.0f - 0.5f) / 0.25f);  // source (1, 1)
  EXPECT_FLOAT_EQ(up[0][7][7].item<float>(), zero);
  // A uint8 zero pads the same as a float zero after scaling.
  const torch::Tensor u8 = torch::full({1, 8, 8}, 255, torch::kUInt8);
  EXPECT_FLOAT_EQ(Apply(norm, u8, CropFlip{1, 0, 0, false})[0][0][0].item<float>(), zero);
  EXPECT_FLOAT_EQ(Apply(norm, u8, CropFlip{1, 0, 0, false})[0][4][4].item<float>(),
                  (1.0f - 0.5f) / 0.25f);
}

TEST(Pixels, FlipMirrorsEachRow) {
  const PixelNormalizer norm = Norm(2);
  const torch::Tensor image = torch::randint(0, 256, {2, 5, 6}, torch::kUInt8);
  const torch::Tensor plain = Apply(norm, image, CentredCrop(1));
  const torch::Tensor flipped = Apply(norm, image, CropFlip{1, 1, 1, true});
  EXPECT_TRUE(torch::equal(flipped, plain.flip({2})));
  EXPECT_FALSE(torch::equal(flipped, plain));
}

TEST(Pixels, ChannelsLastDestinationIsTheChannelsLastMemoryOfTheChwResult) {
  const PixelNormalizer norm = Norm(3);
  const torch::Tensor images = torch::randint(0, 256, {4, 3, 10, 7}, torch::kUInt8);
  torch::Tensor nchw = torch::empty({4, 3, 10, 7});
  torch::Tensor cl = torch::empty(
      {4, 3, 10, 7}, torch::TensorOptions().memory_format(torch::MemoryFormat::ChannelsLast));
  for (int64_t i = 0; i < 4; ++i) {
    const CropFlip crop = RandomCropFlip(5, 0, i, 1);
    norm.Apply(images[i].data_ptr<uint8_t>(), PixelLayout::kCHW, 10, 7, crop,
               nchw.data_ptr<float>() + i * 210, PixelLayout::kCHW);
    norm.Apply(images[i].data_ptr<uint8_t>(), PixelLayout::kCHW, 10, 7, crop,
               cl.data_ptr<float>() + i * 210, PixelLayout::kHWC);
  }
  const torch::Tensor expected = nchw.contiguous(torch::MemoryFormat::ChannelsLast);
  EXPECT_TRUE(std::equal(cl.data_ptr<float>(), cl.data_ptr<float>() + cl.numel(),
                         expected.data_ptr<float>()));
  EXPECT_TRUE(torch::equal(cl, nchw));
}

TEST(Pixels, InterleavedSourceGivesTheSameResultAsPlanes) {
  const PixelNormalizer norm = Norm(3);
  const torch::Tensor chw = torch::randint(0, 256, {3, 6, 8}, torch::kUInt8);
  const torch::Tensor hwc = chw.permute({1, 2, 0}).contiguous();
  const CropFlip crop{1, 2, 0, true};
  torch::Tensor from_hwc = torch::empty({3, 6, 8});
  norm.Apply(hwc.data_ptr<uint8_t>(), PixelLayout::kHWC, 6, 8, crop, from_hwc.data_ptr<float>(),
             PixelLayout::kCHW);
  EXPECT_TRUE(torch::equal(from_hwc, Apply(norm, chw, crop)));
}

TEST(Pixels, NormalizerRejectsBadConstants) {
  EXPECT_THROW(PixelNormalizer({}, {}), std::invalid_argument);
  EXPECT_THROW(PixelNormalizer({0, 0, 0, 0, 0}, {1, 1, 1, 1, 1}), std::invalid_argument);
  EXPECT_THROW(PixelNormalizer({0, 0}, {1}), std::invalid_argument);
  EXPECT_THROW(PixelNormalizer({0}, {0}), std::invalid_argument);
  EXPECT_THROW(PixelNormalizer({NAN}, {1}), std::invalid_argument);
  EXPECT_NO_THROW(PixelNormalizer({0}, {1}));
}

TEST(Pixels, ChannelMomentsMeasureScaledMeanAndStd) {
  ChannelMoments moments(2);
  // Channel 0: values 0 and 255 (scaled 0 and 1): mean 0.5, std 0.5. Channel 1: all 51 (0.2).
  const uint8_t hwc[] = {0, 51, 255, 51, 0, 51, 255, 51};
  moments.Add(hwc, PixelLayout::kHWC, 2, 2);
  const PixelNormalizer norm = moments.Normalizer();
  EXPECT_NEAR(norm.mean()[0], 0.5, 1e-6);
  EXPECT_NEAR(norm.std()[0], 0.5, 1e-6);
  EXPECT_NEAR(norm.mean()[1], 0.2, 1e-6);
  EXPECT_EQ(norm.std()[1], 1.0f);  // constant: centred only
  EXPECT_EQ(moments.images(), 1);

  ChannelMoments floats(1);
  const float chw[] = {1, 2, 3, 4, 5, 6};
  floats.Add(chw, PixelLayout::kCHW, 2, 3);
  EXPECT_NEAR(floats.Normalizer().mean()[0], 3.5, 1e-6);
  EXPECT_NEAR(floats.Normalizer().std()[0], std::sqrt(35.0 / 12.0), 1e-6);  // population std

  EXPECT_THROW(ChannelMoments(1).Normalizer(), std::logic_error);
  EXPECT_THROW(ChannelMoments(5), std::invalid_argument);
  ChannelMoments bad(1);
  const float nan[] = {NAN};
  bad.Add(nan, PixelLayout::kCHW, 1, 1);
  EXPECT_THROW(bad.Normalizer(), std::invalid_argument);
}

}  // namespace
}  // namespace elastic::trainer
