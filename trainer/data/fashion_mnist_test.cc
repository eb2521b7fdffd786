#include "trainer/data/fashion_mnist.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <stdexcept>

#include "trainer/data/dataset.h"
#include "trainer/data/test_files.h"

namespace elastic::trainer {
namespace {

using testing::ScratchDir;
using testing::WriteGzip;

std::vector<uint8_t> BigEndian(uint32_t v) {
  return {static_cast<uint8_t>(v >> 24), static_cast<uint8_t>(v >> 16),
          static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v)};
}

std::vector<uint8_t> IdxImages(uint32_t n, uint32_t rows = 28, uint32_t cols = 28,
                               uint32_t magic = kIdxImagesMagic) {
  std::vector<uint8_t> bytes;
  for (uint32_t v : {magic, n, rows, cols}) {
    const auto b = BigEndian(v);
    bytes.insert(bytes.end(), b.begin(), b.end());
  }
  for (uint32_t i = 0; i < n * rows * cols; ++i) bytes.push_back(static_cast<uint8_t>(i * 13 + 1));
  return bytes;
}

std::vector<uint8_t> IdxLabels(const std::vector<uint8_t>& labels) {
  std::vector<uint8_t> bytes;
  for (uint32_t v : {kIdxLabelsMagic, static_cast<uint32_t>(labels.size())}) {
    const auto b = BigEndian(v);
    bytes.insert(bytes.end(), b.begin(), b.end());
  }
  bytes.insert(bytes.end(), labels.begin(), labels.end());
  return bytes;
}

template <typename F>
std::string ErrorOf(F f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(FashionMnist, GeneratedFilesArePaddedAndReplicated) {
  ScratchDir dir;
  WriteGzip(dir / "t10k-images-idx3-ubyte.gz", IdxImages(3));
  WriteGzip(dir / "t10k-labels-idx1-ubyte.gz", IdxLabels({9, 0, 4}));
  const auto ds = LoadFashionMnist(dir.path(), Split::kTest);
  EXPECT_EQ(ds->name(), "fashion-mnist");
  ASSERT_EQ(ds->size(), 3);
  EXPECT_EQ(ds->class_names()[9], "Ankle boot");
  EXPECT_EQ(ds->label(0), 9);
  EXPECT_EQ(ds->label(2), 4);
  // Padded from 28x28, Fashion-MNIST is held in memory: the whole tensors are there.
  const auto in_memory = std::dynamic_pointer_cast<const InMemoryDataset>(ds);
  ASSERT_NE(in_memory, nullptr);
  const torch::Tensor& images = in_memory->images();
  EXPECT_EQ(ds->image(1), images[1].data_ptr<uint8_t>());
  for (int i = 0; i < 3; ++i) {
    for (int y = 0; y < 32; ++y) {
      for (int x = 0; x < 32; ++x) {
        const bool inside = y >= 2 && y < 30 && x >= 2 && x < 30;
        const uint8_t expected =
            inside ? static_cast<uint8_t>((i * 784 + (y - 2) * 28 + (x - 2)) * 13 + 1) : 0;
        for (int c = 0; c < 3; ++c) {
          ASSERT_EQ(images[i][c][y][x].item<uint8_t>(), expected)
              << "image " << i << " channel " << c << " y " << y << " x " << x;
        }
      }
    }
  }
}

TEST(FashionMnist, BadFilesAreClearErrors) {
  ScratchDir dir;
  const std::string images = dir / "train-images-idx3-ubyte.gz";
  const std::string labels = dir / "train-labels-idx1-ubyte.gz";
  WriteGzip(labels, IdxLabels({1, 2}));

  WriteGzip(images, IdxImages(2, 28, 28, /*magic=*/0x00000801));
  std::string error = ErrorOf([&] { LoadFashionMnist(dir.path(), Split::kTrain); });
  EXPECT_TRUE(Contains(error, images) && Contains(error, "bad IDX magic number 0x00000801") &&
              Contains(error, "byte offset 0"))
      << error;

  WriteGzip(images, IdxImages(2, 32, 32));
  error = ErrorOf([&] { LoadFashionMnist(dir.path(), Split::kTrain); });
  EXPECT_TRUE(Contains(error, "32x32") && Contains(error, "expected 28x28")) << error;

  std::vector<uint8_t> truncated = IdxImages(2);
  truncated.resize(truncated.size() - 100);
  WriteGzip(images, truncated);
  error = ErrorOf([&] { LoadFashionMnist(dir.path(), Split::kTrain); });
  EXPECT_TRUE(Contains(error, images) && Contains(error, "truncated") &&
              Contains(error, "byte offset 1484"))  // 16 + 2 * 784 - 100
      << error;

  std::vector<uint8_t> trailing = IdxImages(2);
  trailing.push_back(7);
  WriteGzip(images, trailing);
  error = ErrorOf([&] { LoadFashionMnist(dir.path(), Split::kTrain); });
  EXPECT_TRUE(Contains(error, "trailing bytes") && Contains(error, "byte offset 1584")) << error;

  WriteGzip(images, IdxImages(3));
  error = ErrorOf([&] { LoadFashionMnist(dir.path(), Split::kTrain); });
  EXPECT_TRUE(Contains(error, "holds 2 labels but") && Contains(error, "holds 3 images")) << error;

  WriteGzip(images, IdxImages(2));
  WriteGzip(labels, IdxLabels({3, 10}));
  error = ErrorOf([&] { LoadFashionMnist(dir.path(), Split::kTrain); });
  EXPECT_TRUE(Contains(error, labels) && Contains(error, "label 10 at byte offset 9")) << error;

  // A gzip stream cut short is a decompression error, not a short file.
  WriteGzip(labels, IdxLabels({3, 4}));
  std::vector<uint8_t> gz = testing::ReadFile(images);
  gz.resize(gz.size() / 2);
  testing::WriteFile(images, gz);
  error = ErrorOf([&] { LoadFashionMnist(dir.path(), Split::kTrain); });
  EXPECT_TRUE(Contains(error, images) && Contains(error, "gzip error")) << error;

  std::filesystem::remove(images);
  error = ErrorOf([&] { LoadFashionMnist(dir.path(), Split::kTrain); });
  EXPECT_TRUE(Contains(error, images) && Contains(error, "cannot open")) << error;
}

// The Debian package's files (tools/setup.sh installs dataset-fashion-mnist).
TEST(FashionMnist, RealFilesLoad) {
  const auto train = LoadDataset("fashion-mnist", "", Split::kTrain);
  const auto test = LoadDataset("fashion-mnist", kFashionMnistDefaultDir, Split::kTest);
  ASSERT_EQ(train->size(), 60000);
  ASSERT_EQ(test->size(), 10000);
  EXPECT_EQ(train->num_classes(), 10);
  for (const auto& ds : {train, test}) {
    const auto in_memory = std::dynamic_pointer_cast<const InMemoryDataset>(ds);
    ASSERT_NE(in_memory, nullptr);
    EXPECT_EQ(in_memory->images().sizes(), (std::vector<int64_t>{ds->size(), 3, 32, 32}));
    // Fashion-MNIST is balanced: every class holds a tenth of each split.
    const torch::Tensor counts = torch::bincount(in_memory->labels());
    ASSERT_EQ(counts.numel(), 10);
    EXPECT_TRUE(counts.eq(ds->size() / 10).all().item<bool>()) << counts;
  }
  // The two-pixel frame is padding, and the three channels are one gray image.
  const torch::Tensor& images = std::dynamic_pointer_cast<const InMemoryDataset>(test)->images();
  EXPECT_EQ(images.narrow(2, 0, 2).max().item<uint8_t>(), 0);
  EXPECT_EQ(images.narrow(3, 30, 2).max().item<uint8_t>(), 0);
  EXPECT_TRUE(images.select(1, 0).equal(images.select(1, 2)));
  EXPECT_GT(images.narrow(2, 2, 28).narrow(3, 2, 28).max().item<uint8_t>(), 200);

  // The normalisation constants are the training split's statistics.
  const Normalization measured = MeasureNormalization(*train);
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(measured.mean[c], kFashionMnistNormalization.mean[c], 1e-3);
    EXPECT_NEAR(measured.std[c], kFashionMnistNormalization.std[c], 1e-3);
  }
}

}  // namespace
}  // namespace elastic::trainer
