#include "trainer/data/npy.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "trainer/data/dataset.h"
#include "trainer/data/image_tensor_examples.h"
#include "trainer/data/loader.h"
#include "trainer/data/test_files.h"
#include "trainer/data/user_data.h"

namespace elastic::trainer {
namespace {

using testing::ScratchDir;
using testing::WriteFile;

// A .npy file as np.save writes it: magic, version, header length, the dict
// padded with spaces to a multiple of 64 bytes and ending in '\n', the data.
// `misalign` more spaces move the data off that alignment (a hand-made file).
std::vector<uint8_t> NpyBytes(const std::string& descr, const std::vector<int64_t>& shape,
                              const void* data, size_t bytes, int major = 1,
                              const std::string& fortran = "False", int misalign = 0) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': " + fortran +
                       ", 'shape': " + NpyShapeString(shape) + ", }";
  const size_t preamble = major == 1 ? 10 : 12;
  header += std::string(63 - (preamble + header.size()) % 64 + misalign, ' ') + "\n";
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), 0};
  const size_t n = header.size();
  out.push_back(n & 0xff);
  out.push_back((n >> 8) & 0xff);
  if (major > 1) {
    out.push_back((n >> 16) & 0xff);
    out.push_back((n >> 24) & 0xff);
  }
  out.insert(out.end(), header.begin(), header.end());
  const auto* p = static_cast<const uint8_t*>(data);
  out.insert(out.end(), p, p + bytes);
  return out;
}

std::string DescrOf(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kUInt8:
      return "|u1";
    case torch::kInt8:
      return "|i1";
    case torch::kInt16:
      return "<i2";
    case torch::kInt32:
      return "<i4";
    case torch::kInt64:
      return "<i8";
    case torch::kFloat32:
      return "<f4";
    case torch::kFloat64:
      return "<f8";
    default:
      throw std::logic_error("no descr");
  }
}

void WriteNpy(const std::string& path, const torch::Tensor& t, int major = 1, int misalign = 0) {
  const torch::Tensor c = t.contiguous();
  WriteFile(path, NpyBytes(DescrOf(c), std::vector<int64_t>(c.sizes().begin(), c.sizes().end()),
                           c.data_ptr(), c.nbytes(), major, "False", misalign));
}

// The message of the std::runtime_error that `f` throws, or "" when it throws none.
std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "'" << (text) << "'"

TEST(ReadNpy, RoundTripsEveryNumericDtype) {
  ScratchDir dir;
  for (const torch::Tensor& t :
       {torch::randint(0, 256, {2, 3}, torch::kUInt8), torch::randint(-128, 128, {5}, torch::kInt8),
        torch::randint(-30000, 30000, {4, 1}, torch::kInt16),
        torch::randint(-100000, 100000, {2, 2, 2}, torch::kInt32),
        torch::randint(-100000, 100000, {3}, torch::kInt64), torch::randn({2, 5}),
        torch::randn({7}, torch::kFloat64)}) {
    WriteNpy(dir / "a.npy", t);
    const NpyArray a = ReadNpy(dir / "a.npy");
    EXPECT_EQ(a.descr, DescrOf(t));
    EXPECT_EQ(a.shape, std::vector<int64_t>(t.sizes().begin(), t.sizes().end()));
    EXPECT_TRUE(torch::equal(a.data, t)) << a.descr;
  }
}

TEST(ReadNpy, WidensUnsignedTypes) {
  ScratchDir dir;
  const uint16_t u2[] = {0, 65535};
  WriteFile(dir / "u2.npy", NpyBytes("<u2", {2}, u2, sizeof(u2)));
  const NpyArray a = ReadNpy(dir / "u2.npy");
  EXPECT_EQ(a.data.scalar_type(), torch::kInt32);
  EXPECT_EQ(a.data[1].item<int32_t>(), 65535);

  const uint32_t u4[] = {4000000000u};
  WriteFile(dir / "u4.npy", NpyBytes("<u4", {1}, u4, sizeof(u4)));
  EXPECT_EQ(ReadNpy(dir / "u4.npy").data[0].item<int64_t>(), 4000000000LL);

  const uint64_t u8[] = {7, 1ULL << 63};
  WriteFile(dir / "u8.npy", NpyBytes("<u8", {2}, u8, sizeof(u8)));
  const std::string error = ErrorOf([&] { ReadNpy(dir / "u8.npy"); });
  EXPECT_CONTAINS(error, "u8.npy");
  EXPECT_CONTAINS(error, "does not fit in int64");
}

TEST(ReadNpy, ReadsVersionsTwoAndThree) {
  ScratchDir dir;
  const torch::Tensor t = torch::randn({3, 4});
  for (int major : {2, 3}) {
    WriteNpy(dir / "a.npy", t, major);
    EXPECT_TRUE(torch::equal(ReadNpy(dir / "a.npy").data, t)) << major;
  }
}

TEST(ReadNpy, ReadsScalarsAndEmptyArrays) {
  ScratchDir dir;
  const float one = 1.5f;
  WriteFile(dir / "s.npy", NpyBytes("<f4", {}, &one, 4));
  const NpyArray s = ReadNpy(dir / "s.npy");
  EXPECT_TRUE(s.shape.empty());
  EXPECT_EQ(s.data.item<float>(), 1.5f);
  WriteFile(dir / "e.npy", NpyBytes("<f4", {0, 3}, nullptr, 0));
  EXPECT_EQ(ReadNpy(dir / "e.npy").data.numel(), 0);
}

// Each malformed file: the error names the file and the problem.
TEST(ReadNpy, RejectsWhatItCannotReadFaithfully) {
  ScratchDir dir;
  const float data[6] = {};
  struct Case {
    std::string name;
    std::vector<uint8_t> bytes;
    std::string problem;
  };
  std::vector<Case> cases = {
      {"fortran.npy", NpyBytes("<f4", {2, 3}, data, 24, 1, "True"), "fortran_order"},
      {"big.npy", NpyBytes(">f4", {2, 3}, data, 24), "big-endian"},
      {"object.npy", NpyBytes("|O", {2}, data, 16), "Python objects"},
      {"unicode.npy", NpyBytes("<U3", {2}, data, 24), "unsupported dtype '<U3'"},
      {"complex.npy", NpyBytes("<c8", {1}, data, 8), "unsupported dtype '<c8'"},
      {"truncated.npy", NpyBytes("<f4", {2, 3}, data, 20), "truncated"},
      {"huge.npy", NpyBytes("<f4", {1LL << 40, 1LL << 40}, data, 24), "truncated"},
      {"trailing.npy", NpyBytes("<f4", {2, 2}, data, 24), "8 bytes after the data"},
      {"magic.npy", {'P', 'K', 3, 4, 0, 0, 0, 0, 0, 0, 0, 0}, "not a .npy file"},
      {"short.npy", {0x93, 'N', 'U'}, "not a .npy file"},
      {"version.npy", NpyBytes("<f4", {2, 3}, data, 24, 4), "version 4.0"},
  };
  std::vector<uint8_t> cut_header = NpyBytes("<f4", {2, 3}, data, 24);
  cut_header.resize(40);
  cases.push_back({"cut_header.npy", cut_header, "truncated in the header"});
  const std::string structured_header =
      "{'descr': [('a', '<f4')], 'fortran_order': False, "
      "'shape': (1,), }";
  std::vector<uint8_t> structured = NpyBytes("<f4", {1}, data, 4);
  {
    // Same length as the header it replaces is not needed: rebuild by hand.
    std::string h = structured_header + std::string(63 - (10 + structured_header.size()) % 64, ' ');
    h += "\n";
    structured = {0x93,
                  'N',
                  'U',
                  'M',
                  'P',
                  'Y',
                  1,
                  0,
                  static_cast<uint8_t>(h.size() & 0xff),
                  static_cast<uint8_t>(h.size() >> 8)};
    structured.insert(structured.end(), h.begin(), h.end());
    structured.insert(structured.end(), 4, 0);
  }
  cases.push_back({"structured.npy", structured, "structured dtypes"});
  std::vector<uint8_t> no_shape = NpyBytes("<f4", {1}, data, 4);
  const std::string bad = "{'descr': '<f4', 'fortran_order': False, 'shapE': (1,), }";
  std::copy(bad.begin(), bad.end(), no_shape.begin() + 10);
  cases.push_back({"no_shape.npy", no_shape, "no 'shape'"});
  std::vector<uint8_t> garbage = NpyBytes("<f4", {1}, data, 4);
  garbage[10] = '@';  // the dict's '{'
  cases.push_back({"garbage.npy", garbage, "malformed .npy header"});

  for (const Case& c : cases) {
    WriteFile(dir / c.name, c.bytes);
    const std::string error = ErrorOf([&] { ReadNpy(dir / c.name); });
    EXPECT_CONTAINS(error, dir / c.name);
    EXPECT_CONTAINS(error, c.problem);
  }
  const std::string missing = ErrorOf([&] { ReadNpy(dir / "absent.npy"); });
  EXPECT_CONTAINS(missing, "absent.npy: no such file");
}

// The header and the place of the data, without reading the data.
TEST(MappedNpy, LeavesTheDataInTheMapping) {
  ScratchDir dir;
  const torch::Tensor t = torch::randn({3, 5});
  WriteNpy(dir / "a.npy", t);
  const MappedNpy npy(dir / "a.npy");
  EXPECT_EQ(npy.descr(), "<f4");
  EXPECT_EQ(npy.shape(), (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(npy.stored_type(), torch::kFloat32);
  EXPECT_EQ(npy.data_bytes(), 60u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(npy.data()) % 64, 0u);  // np.save aligns to 64
  EXPECT_EQ(std::memcmp(npy.data(), t.data_ptr<float>(), 60), 0);
  EXPECT_TRUE(torch::equal(npy.Read().data, t));
}

// The four files of a data set; images as given, labels int64.
void WriteDataSet(const std::string& dir, const torch::Tensor& train_x,
                  const torch::Tensor& train_y, const torch::Tensor& test_x,
                  const torch::Tensor& test_y) {
  WriteNpy(dir + "/train_x.npy", train_x);
  WriteNpy(dir + "/train_y.npy", train_y);
  WriteNpy(dir + "/test_x.npy", test_x);
  WriteNpy(dir + "/test_y.npy", test_y);
}

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

// NCHW and NHWC files of the same pixels give the same batches, and those
// are exactly what the CIFAR path gives with the same normalisation.
TEST(LoadNpyData, NchwAndNhwcMatchTheCifarPath) {
  const torch::Tensor train_x = torch::randint(0, 256, {40, 3, 32, 32}, torch::kUInt8);
  const torch::Tensor train_y = torch::arange(40, torch::kInt64).remainder(10);
  const torch::Tensor test_x = torch::randint(0, 256, {8, 3, 32, 32}, torch::kUInt8);
  const torch::Tensor test_y = torch::arange(8, torch::kInt64);
  ScratchDir nchw, nhwc;
  WriteDataSet(nchw.path(), train_x, train_y, test_x, test_y);
  WriteDataSet(nhwc.path(), train_x.permute({0, 2, 3, 1}), train_y, test_x.permute({0, 2, 3, 1}),
               test_y);
  const UserData a = LoadNpyData(nchw.path());
  const UserData b = LoadNpyData(nhwc.path());
  EXPECT_EQ(a.channels, 3);
  EXPECT_EQ(a.height, 32);
  EXPECT_EQ(a.width, 32);
  EXPECT_EQ(a.class_names,
            (std::vector<std::string>{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}));
  EXPECT_EQ(a.train->size(), 40);
  EXPECT_EQ(a.test->size(), 8);

  const auto& examples = dynamic_cast<const ImageTensorExamples&>(*a.train);
  const PixelNormalizer& norm = examples.normalizer();
  const Normalization measured = MeasureNormalization(train_x);
  Normalization same{};
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(norm.mean()[c], measured.mean[c], 1e-6);
    EXPECT_NEAR(norm.std()[c], measured.std[c], 1e-6);
    same.mean[c] = norm.mean()[c];
    same.std[c] = norm.std()[c];
  }
  const ImageExamples cifar(
      std::make_shared<InMemoryDataset>("cifar-like", train_x, train_y, a.class_names, same));
  for (bool augment : {false, true}) {
    for (bool channels_last : {false, true}) {
      const BatchRequest request{3, augment, 17, channels_last};
      const Batch from_nchw = a.train->Get(Iota(40), request);
      const Batch from_nhwc = b.train->Get(Iota(40), request);
      const Batch expected = cifar.Get(Iota(40), request);
      EXPECT_TRUE(torch::equal(from_nchw.inputs, from_nhwc.inputs));
      EXPECT_TRUE(torch::equal(from_nchw.inputs, expected.inputs))
          << "augment " << augment << " channels_last " << channels_last;
      EXPECT_EQ(from_nchw.inputs.is_contiguous(torch::MemoryFormat::ChannelsLast), channels_last);
      EXPECT_TRUE(torch::equal(from_nchw.targets, train_y));
      EXPECT_EQ(from_nchw.indices, Iota(40));
    }
  }
}

TEST(LoadNpyData, GrayscaleNonSquareImages) {
  const torch::Tensor train_x = torch::randint(0, 256, {6, 20, 12}, torch::kUInt8);
  ScratchDir dir;
  WriteDataSet(dir.path(), train_x, torch::tensor({0, 1, 2, 0, 1, 2}),
               torch::randint(0, 256, {2, 20, 12}, torch::kUInt8), torch::tensor({2, 0}));
  const UserData data = LoadNpyData(dir.path());
  EXPECT_EQ(data.channels, 1);
  EXPECT_EQ(data.height, 20);
  EXPECT_EQ(data.width, 12);
  EXPECT_EQ(data.class_names.size(), 3u);
  const Batch batch = data.train->Get({4, 1}, BatchRequest{});
  ASSERT_EQ(batch.inputs.sizes(), (std::vector<int64_t>{2, 1, 20, 12}));
  const torch::Tensor scaled = train_x.to(torch::kFloat32) / 255.0f;
  const float mean = scaled.mean().item<float>();
  const float std = scaled.std(/*unbiased=*/false).item<float>();
  EXPECT_TRUE(torch::allclose(batch.inputs[0][0], (scaled[4] - mean) / std, 1e-4, 1e-4));
  EXPECT_TRUE(torch::equal(batch.targets, torch::tensor({1, 1})));
  // Padding of a 12-pixel side is 1: a window moved by one shows one padded row or column.
  const Batch augmented = data.train->Get(Iota(6), BatchRequest{0, true, 5, false});
  EXPECT_EQ(augmented.inputs.sizes(), (std::vector<int64_t>{6, 1, 20, 12}));
}

TEST(LoadNpyData, Float32ImagesAreNormalisedAsTheyAre) {
  const torch::Tensor train_x = torch::randn({50, 2, 8, 8}) * 3 + 10;
  ScratchDir dir;
  WriteDataSet(dir.path(), train_x.permute({0, 2, 3, 1}), torch::zeros({50}, torch::kInt64),
               torch::randn({3, 8, 8, 2}), torch::zeros({3}, torch::kInt64));
  const UserData data = LoadNpyData(dir.path());
  EXPECT_EQ(data.channels, 2);
  const auto& norm = dynamic_cast<const ImageTensorExamples&>(*data.train).normalizer();
  EXPECT_NEAR(norm.mean()[0], train_x.select(1, 0).mean().item<float>(), 1e-4);
  EXPECT_NEAR(norm.std()[1], train_x.select(1, 1).std(false).item<float>(), 1e-4);
  const Batch all = data.train->Get(Iota(50), BatchRequest{});
  EXPECT_NEAR(all.inputs.mean().item<float>(), 0, 1e-4);
  EXPECT_NEAR(all.inputs.std().item<float>(), 1, 1e-2);
}

TEST(LoadNpyData, EveryIntegerLabelTypeGivesTheSameTargets) {
  const std::vector<int64_t> labels = {2, 0, 1, 2};
  const torch::Tensor images = torch::randint(0, 256, {4, 1, 8, 8}, torch::kUInt8);
  for (const std::string descr : {"|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8"}) {
    ScratchDir dir;
    const int size = descr[2] - '0';
    std::vector<uint8_t> raw;
    for (int64_t l : labels) {
      for (int b = 0; b < size; ++b) raw.push_back(b == 0 ? static_cast<uint8_t>(l) : 0);
    }
    for (const std::vector<int64_t>& shape : {std::vector<int64_t>{4}, {4, 1}}) {
      WriteNpy(dir / "train_x.npy", images);
      WriteNpy(dir / "test_x.npy", images);
      WriteFile(dir / "train_y.npy", NpyBytes(descr, shape, raw.data(), raw.size()));
      WriteFile(dir / "test_y.npy", NpyBytes(descr, shape, raw.data(), raw.size()));
      const UserData data = LoadNpyData(dir.path());
      EXPECT_TRUE(torch::equal(data.test->Get(Iota(4), {}).targets, torch::tensor(labels)))
          << descr;
      EXPECT_EQ(data.class_names.size(), 3u);
    }
  }
}

TEST(LoadNpyData, AugmentationIsAFunctionOfSeedEpochAndIndex) {
  ScratchDir dir;
  WriteDataSet(dir.path(), torch::randint(0, 256, {16, 3, 16, 16}, torch::kUInt8),
               torch::zeros({16}, torch::kInt64),
               torch::randint(0, 256, {2, 3, 16, 16}, torch::kUInt8),
               torch::zeros({2}, torch::kInt64));
  const UserData data = LoadNpyData(dir.path());
  const BatchRequest request{2, true, 9, false};
  const Batch whole = data.train->Get(Iota(16), request);
  // The same sample alone, in another batch, gives the same pixels.
  EXPECT_TRUE(torch::equal(data.train->Get({5}, request).inputs[0], whole.inputs[5]));
  EXPECT_TRUE(torch::equal(data.train->Get(Iota(16), request).inputs, whole.inputs));
  EXPECT_FALSE(torch::equal(data.train->Get(Iota(16), {3, true, 9, false}).inputs, whole.inputs));
  EXPECT_FALSE(torch::equal(data.train->Get(Iota(16), {2, true, 10, false}).inputs, whole.inputs));
  const Batch last = data.train->Get(Iota(16), {2, true, 9, true});
  EXPECT_TRUE(torch::equal(last.inputs, whole.inputs));
  EXPECT_TRUE(last.inputs.is_contiguous(torch::MemoryFormat::ChannelsLast));
}

// Float32 images in every layout, and with data at an address no float may
// be read from, give the same batches: each image is transposed (and, when
// unaligned, copied) on its own while the batch is built.
TEST(LoadNpyData, Float32LayoutsAndAlignmentGiveTheSameBatches) {
  const torch::Tensor train_x = torch::randn({12, 3, 10, 6}) * 40 + 100;
  const torch::Tensor train_y = torch::arange(12, torch::kInt64).remainder(3);
  const torch::Tensor test_x = torch::randn({2, 3, 10, 6});
  const torch::Tensor test_y = torch::tensor({0, 2});
  const torch::Tensor nhwc = train_x.permute({0, 2, 3, 1});
  ScratchDir a, b, c;
  WriteDataSet(a.path(), train_x, train_y, test_x, test_y);
  WriteDataSet(b.path(), nhwc, train_y, test_x.permute({0, 2, 3, 1}), test_y);
  WriteDataSet(c.path(), nhwc, train_y, test_x, test_y);
  WriteNpy(c / "train_x.npy", nhwc, 1, /*misalign=*/1);
  const UserData from_a = LoadNpyData(a.path());
  const UserData from_b = LoadNpyData(b.path());
  const UserData from_c = LoadNpyData(c.path());
  const auto& unaligned = dynamic_cast<const ImageTensorExamples&>(*from_c.train);
  ASSERT_NE(reinterpret_cast<uintptr_t>(unaligned.images().data) % alignof(float), 0u);
  EXPECT_EQ(unaligned.images().layout, PixelLayout::kHWC);
  EXPECT_EQ(from_a.mean, from_b.mean);
  EXPECT_EQ(from_a.mean, from_c.mean);
  EXPECT_EQ(from_a.std, from_c.std);
  for (bool augment : {false, true}) {
    for (bool channels_last : {false, true}) {
      const BatchRequest request{1, augment, 4, channels_last};
      const Batch expected = from_a.train->Get(Iota(12), request);
      EXPECT_TRUE(torch::equal(from_b.train->Get(Iota(12), request).inputs, expected.inputs));
      EXPECT_TRUE(torch::equal(from_c.train->Get(Iota(12), request).inputs, expected.inputs));
    }
  }
  // Without augmentation the batch is the normalised images, in NCHW.
  const torch::Tensor mean = torch::tensor(from_a.mean).view({1, 3, 1, 1});
  const torch::Tensor std = torch::tensor(from_a.std).view({1, 3, 1, 1});
  EXPECT_TRUE(
      torch::allclose(from_c.train->Get(Iota(12), {}).inputs, (train_x - mean) / std, 1e-5, 1e-5));
}

// The path and the offset in it of the file mapping that holds `address`,
// from /proc/self/maps; "" when no file mapping holds it.
std::pair<std::string, int64_t> MappedAt(const void* address) {
  const auto a = reinterpret_cast<uintptr_t>(address);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream fields(line);  // start-end perms offset dev inode path
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

// The images are read in place from the mapped train_x.npy and test_x.npy:
// the process holds no copy of them.
TEST(LoadNpyData, ImagesAreReadFromTheMappedFiles) {
  const torch::Tensor train_x = torch::randint(0, 256, {6, 8, 8, 3}, torch::kUInt8);
  ScratchDir dir;
  WriteDataSet(dir.path(), train_x, torch::tensor({0, 1, 0, 1, 0, 1}),
               torch::randint(0, 256, {2, 3, 8, 8}, torch::kUInt8), torch::tensor({1, 0}));
  const UserData data = LoadNpyData(dir.path());
  const auto& train = dynamic_cast<const ImageTensorExamples&>(*data.train);
  const auto& test = dynamic_cast<const ImageTensorExamples&>(*data.test);
  EXPECT_EQ(MappedAt(train.images().data).first, dir / "train_x.npy");
  EXPECT_EQ(MappedAt(test.images().data).first, dir / "test_x.npy");
  EXPECT_EQ(MappedAt(train.images().image_bytes(5)).second,
            MappedAt(train.images().data).second + 5 * 8 * 8 * 3);

  // A pixel written to the file (same size) is what the next batch shows.
  const Batch before = data.train->Get({4}, {});
  const int64_t pixel_offset = MappedAt(train.images().image_bytes(4)).second + (2 * 8 + 5) * 3 + 1;
  {
    std::fstream file(dir / "train_x.npy", std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(pixel_offset);
    file.put(static_cast<char>(train_x[4][2][5][1].item<uint8_t>() ^ 0x80));
  }
  const Batch after = data.train->Get({4}, {});
  // Channel 1, row 2, column 5 changed, and nothing else.
  const torch::Tensor changed = after.inputs.ne(before.inputs);
  EXPECT_EQ(changed.sum().item<int64_t>(), 1);
  EXPECT_TRUE(changed[0][1][2][5].item<bool>());
}

TEST(LoadNpyData, WarnsAboutClassesWithoutTrainingSamples) {
  ScratchDir dir;
  WriteDataSet(dir.path(), torch::randint(0, 256, {3, 1, 8, 8}, torch::kUInt8),
               torch::tensor({0, 3, 3}), torch::randint(0, 256, {1, 1, 8, 8}, torch::kUInt8),
               torch::tensor({1}));
  ::testing::internal::CaptureStderr();
  const UserData data = LoadNpyData(dir.path());
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(data.class_names.size(), 4u);
  EXPECT_CONTAINS(err, "2 of 4 classes have no training sample: 1, 2");
}

// One broken data set per error: the message names the file and the problem.
struct BadCase {
  const char* name;
  std::function<void(const std::string&)> write;  // writes into a valid data set's directory
  const char* file;
  const char* problem;
};

TEST(LoadNpyData, EachErrorNamesTheFileAndTheProblem) {
  const auto u8 = [](std::vector<int64_t> shape) {
    return torch::randint(0, 256, shape, torch::kUInt8);
  };
  const std::vector<BadCase> cases = {
      {"length mismatch",
       [](const std::string& d) { WriteNpy(d + "/train_y.npy", torch::zeros({5}, torch::kInt64)); },
       "train_y.npy", "holds 5 labels but train_x.npy holds 6 images"},
      {"negative label",
       [](const std::string& d) {
         WriteNpy(d + "/train_y.npy", torch::tensor({0, 1, -1, 0, 0, 1}));
       },
       "train_y.npy", "label -1 at index 2 is negative"},
      {"negative test label",
       [](const std::string& d) {
         WriteNpy(d + "/test_y.npy", torch::tensor({-3, 0}));
       },
       "test_y.npy", "label -3 at index 0 is negative"},
      {"test label beyond the classes",
       [](const std::string& d) {
         WriteNpy(d + "/test_y.npy", torch::tensor({0, 2}));
       },
       "test_y.npy", "label 2 at index 1 is not a class of the training split"},
      {"float64 images",
       [](const std::string& d) {
         WriteNpy(d + "/train_x.npy", torch::rand({6, 3, 8, 8}, torch::kFloat64));
       },
       "train_x.npy", "images must be uint8 or float32, got '<f8'"},
      {"float labels",
       [](const std::string& d) { WriteNpy(d + "/train_y.npy", torch::zeros({6})); }, "train_y.npy",
       "labels must be integers, got '<f4'"},
      {"2-d labels",
       [](const std::string& d) {
         WriteNpy(d + "/train_y.npy", torch::zeros({6, 2}, torch::kInt64));
       },
       "train_y.npy", "labels must have shape (N,) or (N, 1), got (6, 2)"},
      {"2-d images",
       [&](const std::string& d) {
         WriteNpy(d + "/train_x.npy", u8({6, 64}));
       },
       "train_x.npy", "got (6, 64)"},
      {"5-d images",
       [&](const std::string& d) {
         WriteNpy(d + "/train_x.npy", u8({6, 1, 3, 8, 8}));
       },
       "train_x.npy", "got (6, 1, 3, 8, 8)"},
      {"ambiguous channels",
       [&](const std::string& d) {
         WriteNpy(d + "/train_x.npy", u8({6, 3, 4, 3}));
       },
       "train_x.npy", "cannot tell the channel dimension"},
      {"no channels",
       [&](const std::string& d) {
         WriteNpy(d + "/train_x.npy", u8({6, 8, 8, 8}));
       },
       "train_x.npy", "have no channel dimension"},
      {"test images of another size",
       [&](const std::string& d) {
         WriteNpy(d + "/test_x.npy", u8({2, 3, 16, 16}));
       },
       "test_x.npy", "but train_x.npy's are"},
      {"test images of another dtype",
       [&](const std::string& d) {
         WriteNpy(d + "/test_x.npy", torch::rand({2, 3, 8, 8}));
       },
       "test_x.npy", "but train_x.npy's are"},
      {"empty split",
       [&](const std::string& d) {
         WriteNpy(d + "/test_x.npy", u8({0, 3, 8, 8}));
         WriteNpy(d + "/test_y.npy", torch::zeros({0}, torch::kInt64));
       },
       "test_x.npy", "holds no images"},
      {"not a number",
       [&](const std::string& d) {
         torch::Tensor x = torch::rand({6, 3, 8, 8});
         x[1][2][3][4] = NAN;
         WriteNpy(d + "/train_x.npy", x);
         WriteNpy(d + "/test_x.npy", torch::rand({2, 3, 8, 8}));
       },
       "train_x.npy", "non-finite"},
      {"missing file", [](const std::string& d) { std::remove((d + "/test_y.npy").c_str()); },
       "test_y.npy", "missing"},
  };
  for (const BadCase& c : cases) {
    ScratchDir dir;
    WriteDataSet(dir.path(), u8({6, 3, 8, 8}), torch::tensor({0, 1, 0, 1, 0, 1}), u8({2, 3, 8, 8}),
                 torch::tensor({1, 0}));
    ASSERT_NO_THROW(LoadNpyData(dir.path())) << c.name;
    c.write(dir.path());
    const std::string error = ErrorOf([&] { LoadNpyData(dir.path()); });
    EXPECT_CONTAINS(error, dir / c.file) << c.name;
    EXPECT_CONTAINS(error, c.problem) << c.name;
  }
}

}  // namespace
}  // namespace elastic::trainer
