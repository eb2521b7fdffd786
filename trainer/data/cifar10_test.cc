#include "trainer/data/cifar10.h"

#include <gtest/gtest.h>

#include <set>
#include <stdexcept>

#include "trainer/data/dataset.h"
#include "trainer/data/test_files.h"

namespace elastic::trainer {
namespace {

using testing::CifarPixel;
using testing::CifarRecords;
using testing::ScratchDir;
using testing::WriteFile;

// Runs f, which must throw std::runtime_error, and returns its message.
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

TEST(Cifar10, GeneratedFilesRoundTrip) {
  ScratchDir dir;
  WriteFile(dir / "data_batch_1.bin", CifarRecords(5, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  // data_batch_2 is missing: present batches are read in order, gaps allowed.
  WriteFile(dir / "data_batch_3.bin", CifarRecords(3, {9, 8, 7}, /*first=*/100));
  WriteFile(dir / "test_batch.bin", CifarRecords(2, {4}));

  const auto train = LoadCifar10(dir.path(), Split::kTrain);
  EXPECT_EQ(train->name(), "cifar10");
  ASSERT_EQ(train->size(), 8);
  EXPECT_EQ(train->num_classes(), 10);
  EXPECT_EQ(train->class_names().front(), "airplane");
  EXPECT_EQ(train->images().sizes(), (std::vector<int64_t>{8, 3, 32, 32}));
  EXPECT_EQ(train->images().scalar_type(), torch::kUInt8);
  EXPECT_EQ(train->labels().scalar_type(), torch::kInt64);

  const std::vector<int64_t> expected_labels = {0, 1, 2, 3, 4, 9, 8, 7};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(train->labels()[i].item<int64_t>(), expected_labels[i]);

  // Pixel p of a record is plane p / 1024, row (p % 1024) / 32, column p % 32.
  const auto* pixels = train->images().data_ptr<uint8_t>();
  for (int i = 0; i < 8; ++i) {
    const int record = i < 5 ? i : i - 5;
    const int first = i < 5 ? 0 : 100;
    for (int p = 0; p < 3072; ++p) {
      ASSERT_EQ(pixels[i * 3072 + p], CifarPixel(record, p, first)) << "sample " << i;
    }
  }
  // One spot check through tensor indexing: channel 2 (blue), row 5, column 7.
  EXPECT_EQ(train->images()[6][2][5][7].item<uint8_t>(), CifarPixel(1, 2048 + 5 * 32 + 7, 100));

  const auto test = LoadCifar10(dir.path(), Split::kTest);
  EXPECT_EQ(test->size(), 2);
  EXPECT_EQ(test->labels()[1].item<int64_t>(), 4);
  EXPECT_FLOAT_EQ(test->normalization().mean[0], 0.4914f);
  EXPECT_FLOAT_EQ(test->normalization().std[2], 0.2616f);
}

TEST(Cifar10, TruncatedFileNamesFileAndOffset) {
  ScratchDir dir;
  std::vector<uint8_t> bytes = CifarRecords(3, {1});
  bytes.resize(bytes.size() - 1000);  // the third record loses its last 1000 bytes
  WriteFile(dir / "data_batch_1.bin", bytes);
  const std::string error = ErrorOf([&] { LoadCifar10(dir.path(), Split::kTrain); });
  EXPECT_NE(error.find(dir / "data_batch_1.bin"), std::string::npos) << error;
  EXPECT_NE(error.find("truncated"), std::string::npos) << error;
  EXPECT_NE(error.find("byte offset 6146"), std::string::npos) << error;  // 2 * 3073
}

TEST(Cifar10, BadLabelNamesRecordAndOffset) {
  ScratchDir dir;
  WriteFile(dir / "data_batch_1.bin", CifarRecords(2, {3}));
  std::vector<uint8_t> bytes = CifarRecords(4, {5});
  bytes[2 * 3073] = 10;  // record 2's label byte
  WriteFile(dir / "data_batch_2.bin", bytes);
  const std::string error = ErrorOf([&] { LoadCifar10(dir.path(), Split::kTrain); });
  EXPECT_NE(error.find(dir / "data_batch_2.bin"), std::string::npos) << error;
  EXPECT_NE(error.find("record 2 at byte offset 6146"), std::string::npos) << error;
  EXPECT_NE(error.find("label 10"), std::string::npos) << error;
}

TEST(Cifar10, WrongSizeIsAnError) {
  ScratchDir dir;
  WriteFile(dir / "test_batch.bin", {});
  std::string error = ErrorOf([&] { LoadCifar10(dir.path(), Split::kTest); });
  EXPECT_NE(error.find(dir / "test_batch.bin"), std::string::npos) << error;
  EXPECT_NE(error.find("empty"), std::string::npos) << error;

  std::vector<uint8_t> bytes = CifarRecords(2, {0});
  bytes.insert(bytes.end(), 5, 0);  // five stray bytes after two whole records
  WriteFile(dir / "test_batch.bin", bytes);
  error = ErrorOf([&] { LoadCifar10(dir.path(), Split::kTest); });
  EXPECT_NE(error.find("6151 bytes is not a multiple of the 3073-byte record"), std::string::npos)
      << error;
  EXPECT_NE(error.find("byte offset 6146"), std::string::npos) << error;
}

TEST(Cifar10, MissingFilesAreAnError) {
  ScratchDir dir;
  WriteFile(dir / "test_batch.bin", CifarRecords(1, {0}));
  const std::string error = ErrorOf([&] { LoadCifar10(dir.path(), Split::kTrain); });
  EXPECT_NE(error.find("data_batch_1.bin"), std::string::npos) << error;
  EXPECT_NE(error.find(dir.path()), std::string::npos) << error;
}

TEST(Cifar10, LoadDatasetByName) {
  ScratchDir dir;
  WriteFile(dir / "test_batch.bin", CifarRecords(3, {2}));
  EXPECT_EQ(LoadDataset("cifar10", dir.path(), Split::kTest)->size(), 3);
  try {
    LoadDataset("imagenet", dir.path(), Split::kTest);
    FAIL() << "unknown data set accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("cifar10, fashion-mnist"), std::string::npos) << e.what();
  }
}

// The real images: the same reader, byte-identical to the official files.
TEST(Cifar10, RealSubset) {
  const std::string dir = testing::Cifar10SubsetDir();
  if (dir.empty()) {
    GTEST_SKIP() << "the real CIFAR-10 subset is absent: set ELASTIC_CIFAR10_SUBSET to a "
                    "directory holding data_batch_1..4.bin and test_batch.bin";
  }
  const auto train = LoadCifar10(dir, Split::kTrain);
  const auto test = LoadCifar10(dir, Split::kTest);
  EXPECT_EQ(train->size(), 4 * 1017);
  EXPECT_EQ(test->size(), 1017);

  for (const auto& ds : {train, test}) {
    EXPECT_GE(ds->labels().min().item<int64_t>(), 0);
    EXPECT_LE(ds->labels().max().item<int64_t>(), 9);
    // ~100 images per class: every class is there.
    EXPECT_EQ(std::get<0>(at::_unique(ds->labels())).numel(), 10);
  }

  // Sample 0 is the first record of data_batch_1.bin, byte for byte.
  const std::vector<uint8_t> raw = testing::ReadFile(dir + "/data_batch_1.bin");
  EXPECT_EQ(train->labels()[0].item<int64_t>(), raw[0]);
  const auto* pixels = train->images().data_ptr<uint8_t>();
  EXPECT_TRUE(std::equal(pixels, pixels + 3072, raw.begin() + 1));

  // A tenth of the training set has nearly the full set's statistics, which
  // checks the channel order (R, G, B) and the constants together.
  const Normalization measured = MeasureNormalization(train->images());
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(measured.mean[c], kCifar10Normalization.mean[c], 0.02) << "channel " << c;
    EXPECT_NEAR(measured.std[c], kCifar10Normalization.std[c], 0.02) << "channel " << c;
  }
}

}  // namespace
}  // namespace elastic::trainer
