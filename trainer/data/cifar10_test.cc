#include "trainer/data/cifar10.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "testing/required_input.h"
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

  // Samples 0..4 are data_batch_1's records, 5..7 data_batch_3's.
  const std::vector<int64_t> expected_labels = {0, 1, 2, 3, 4, 9, 8, 7};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(train->label(i), expected_labels[i]);

  // Pixel p of a record is plane p / 1024, row (p % 1024) / 32, column p % 32.
  for (int i = 0; i < 8; ++i) {
    const int record = i < 5 ? i : i - 5;
    const int first = i < 5 ? 0 : 100;
    const uint8_t* pixels = train->image(i);
    for (int p = 0; p < 3072; ++p) {
      ASSERT_EQ(pixels[p], CifarPixel(record, p, first)) << "sample " << i;
    }
  }
  // Channel 2 (blue), row 5, column 7 of sample 6.
  EXPECT_EQ(train->image(6)[2 * 1024 + 5 * 32 + 7], CifarPixel(1, 2048 + 5 * 32 + 7, 100));

  const auto test = LoadCifar10(dir.path(), Split::kTest);
  EXPECT_EQ(test->size(), 2);
  EXPECT_EQ(test->label(1), 4);
  EXPECT_FLOAT_EQ(test->normalization().mean[0], 0.4914f);
  EXPECT_FLOAT_EQ(test->normalization().std[2], 0.2616f);
}

// The path and the offset in it of the file mapping that holds `address`,
// from /proc/self/maps; "" when no file mapping holds it.
std::pair<std::string, int64_t> MappedAt(const void* address) {
  const auto a = reinterpret_cast<uintptr_t>(address);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    // start-end perms offset dev inode path
    std::istringstream fields(line);
    std::string range, perms, offset, dev, inode, path;
    fields >> range >> perms >> offset >> dev >> inode >> path;
    const uintptr_t start = std::stoull(range.substr(0, range.find('-')), nullptr, 16);
    const uintptr_t end = std::stoull(range.substr(range.find('-') + 1), nullptr, 16);
    if (a >= start && a < end) {
      return {path, static_cast<int64_t>(a - start + std::stoull(offset, nullptr, 16))};
    }
  }
  return {"", -1};
}

// Samples are read in place from the mapped files: no copy of the data in the process.
TEST(Cifar10, SamplesAreReadFromTheMappedFiles) {
  ScratchDir dir;
  WriteFile(dir / "data_batch_1.bin", CifarRecords(3, {1}));
  WriteFile(dir / "data_batch_2.bin", CifarRecords(4, {2}));
  const auto train = LoadCifar10(dir.path(), Split::kTrain);
  ASSERT_EQ(train->size(), 7);
  EXPECT_EQ(MappedAt(train->image(0)), std::make_pair(dir / "data_batch_1.bin", int64_t{1}));
  EXPECT_EQ(MappedAt(train->image(2)),
            std::make_pair(dir / "data_batch_1.bin", 2 * kCifar10RecordBytes + 1));
  EXPECT_EQ(MappedAt(train->image(3)), std::make_pair(dir / "data_batch_2.bin", int64_t{1}));
  EXPECT_EQ(MappedAt(train->image(6)),
            std::make_pair(dir / "data_batch_2.bin", 3 * kCifar10RecordBytes + 1));

  // A byte written to the file (same size, so the mapping stays valid) is
  // what the data set serves next: it holds no copy of its own.
  {
    std::fstream file(dir / "data_batch_2.bin", std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(kCifar10RecordBytes + 1 + 100);
    file.put(static_cast<char>(CifarPixel(1, 100) ^ 0xff));
    file.seekp(2 * kCifar10RecordBytes);
    file.put(7);
  }
  EXPECT_EQ(train->image(4)[100], CifarPixel(1, 100) ^ 0xff);
  EXPECT_EQ(train->label(5), 7);
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
  ELASTIC_REQUIRE_INPUT(!dir.empty(),
                        "the real CIFAR-10 subset is absent: set ELASTIC_CIFAR10_SUBSET to a "
                        "directory holding data_batch_1..4.bin and test_batch.bin");
  const auto train = LoadCifar10(dir, Split::kTrain);
  const auto test = LoadCifar10(dir, Split::kTest);
  EXPECT_EQ(train->size(), 4 * 1017);
  EXPECT_EQ(test->size(), 1017);

  for (const auto& ds : {train, test}) {
    std::set<int64_t> classes;
    for (int64_t i = 0; i < ds->size(); ++i) classes.insert(ds->label(i));
    // ~100 images per class: every class is there, and nothing else.
    EXPECT_EQ(classes, (std::set<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  }

  // Sample 0 is the first record of data_batch_1.bin, byte for byte, and
  // sample 1017 the first of data_batch_2.bin.
  const std::vector<uint8_t> raw = testing::ReadFile(dir + "/data_batch_1.bin");
  EXPECT_EQ(train->label(0), raw[0]);
  EXPECT_TRUE(std::equal(train->image(0), train->image(0) + 3072, raw.begin() + 1));
  const std::vector<uint8_t> raw2 = testing::ReadFile(dir + "/data_batch_2.bin");
  EXPECT_EQ(train->label(1017), raw2[0]);
  EXPECT_TRUE(std::equal(train->image(1017), train->image(1017) + 3072, raw2.begin() + 1));

  // A tenth of the training set has nearly the full set's statistics, which
  // checks the channel order (R, G, B) and the constants together.
  const Normalization measured = MeasureNormalization(*train);
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(measured.mean[c], kCifar10Normalization.mean[c], 0.02) << "channel " << c;
    EXPECT_NEAR(measured.std[c], kCifar10Normalization.std[c], 0.02) << "channel " << c;
  }
}

}  // namespace
}  // namespace elastic::trainer
