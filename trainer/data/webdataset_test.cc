// `--dataset webdataset` on real shard files of small PNGs: the batches of an
// image folder of the same images, bit for bit; shards mapped only when a
// sample of theirs is read; the index built once, pinned, and re-built
// scanning only a changed shard; shards written by GNU tar in its three
// formats; a sample that fails to decode; the errors, each naming the data
// set and the shard. Counted, not timed.
#include "trainer/data/webdataset.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "trainer/data/image_test_files.h"
#include "trainer/data/tar_test_files.h"
#include "trainer/data/test_files.h"
#include "trainer/data/user_data.h"

namespace elastic::trainer {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;
using testing::TarWriter;

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "'" << (text) << "'"

constexpr int kSide = 12;  // pixels of the generated images

struct Sample {
  std::string key;
  std::string png;
  int label = 0;
};

std::string PngBytes(const std::string& scratch, int seed) {
  const std::string path = scratch + "/encode.png";
  const std::vector<uint8_t> rgb = testing::SmoothRgbImage(kSide, kSide, seed);
  testing::WriteRgbPng(path, rgb.data(), kSide, kSide);
  const std::vector<uint8_t> bytes = testing::ReadFile(path);
  fs::remove(path);
  return std::string(bytes.begin(), bytes.end());
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  testing::WriteFile(path, std::vector<uint8_t>(bytes.begin(), bytes.end()));
}

void WriteShard(const std::string& path, const std::vector<Sample>& samples) {
  TarWriter tar;
  for (const Sample& s : samples) {
    tar.Add(s.key + ".png", s.png);
    tar.Add(s.key + ".cls", std::to_string(s.label) + "\n");
  }
  WriteBytes(path, tar.Finish());
}

// `classes` classes of `per_class` samples, class by class (an image
// folder's order), keys "c<k>_<i>".
std::vector<Sample> MakeSamples(const std::string& scratch, int classes, int per_class, int seed) {
  std::vector<Sample> out;
  for (int k = 0; k < classes; ++k) {
    for (int i = 0; i < per_class; ++i) {
      char key[32];
      std::snprintf(key, sizeof(key), "c%d_%03d", k, i);
      out.push_back(Sample{key, PngBytes(scratch, seed + k * 100 + i), k});
    }
  }
  return out;
}

// DIR/SPLIT/shard-NNNNNN.tar of `per_shard` samples each.
void WriteShards(const std::string& dir, const std::string& split,
                 const std::vector<Sample>& samples, size_t per_shard) {
  for (size_t first = 0, n = 0; first < samples.size(); first += per_shard, ++n) {
    char name[32];
    std::snprintf(name, sizeof(name), "shard-%06zu.tar", n);
    const size_t last = std::min(samples.size(), first + per_shard);
    WriteShard(dir + "/" + split + "/" + name, {samples.begin() + first, samples.begin() + last});
  }
}

// The same samples as an image folder: train/c<k>/<i>.png.
void WriteFolder(const std::string& dir, const std::string& split,
                 const std::vector<Sample>& samples) {
  for (const Sample& s : samples) {
    WriteBytes(dir + "/" + split + "/c" + std::to_string(s.label) + "/" + s.key + ".png", s.png);
  }
}

std::vector<int64_t> AllIndices(const Examples& examples) {
  std::vector<int64_t> out(examples.size());
  for (int64_t i = 0; i < examples.size(); ++i) out[i] = i;
  return out;
}

// Counters since the object was made: the tests of this binary run one after another.
class CounterDelta {
 public:
  CounterDelta() : start_(WebDatasetCountersNow()) {}
  WebDatasetCounters Get() const {
    WebDatasetCounters now = WebDatasetCountersNow();
    now.listings -= start_.listings;
    now.shards_scanned -= start_.shards_scanned;
    now.headers_read -= start_.headers_read;
    now.statistics_decodes -= start_.statistics_decodes;
    now.indexes_built -= start_.indexes_built;
    now.shard_opens -= start_.shard_opens;
    now.opened.erase(now.opened.begin(), now.opened.begin() + start_.opened.size());
    return now;
  }

 private:
  WebDatasetCounters start_;
};

// A cache of this test's own, so that nothing lands in the home directory.
class WebDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override { ::setenv("ELASTIC_CACHE", cache_.path().c_str(), 1); }
  void TearDown() override { ::unsetenv("ELASTIC_CACHE"); }

  // A data set of 3 classes: 6 training samples each in shards of 4, 2 test samples each.
  std::string WriteDataSet(const std::string& dir) {
    WriteShards(dir, "train", MakeSamples(scratch_.path(), 3, 6, 0), 4);
    WriteShards(dir, "test", MakeSamples(scratch_.path(), 3, 2, 50), 4);
    return dir;
  }
  std::string LoadError(const std::string& dir) {
    try {
      LoadWebDataset(dir, kSide);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "";
  }

  ScratchDir cache_;
  ScratchDir scratch_;
};

TEST_F(WebDatasetTest, GivesTheBatchesOfAnImageFolderOfTheSameImagesBitForBit) {
  const std::vector<Sample> train = MakeSamples(scratch_.path(), 3, 7, 0);
  const std::vector<Sample> test = MakeSamples(scratch_.path(), 3, 2, 50);
  WriteShards(scratch_ / "wds", "train", train, 5);
  WriteShards(scratch_ / "wds", "test", test, 5);
  WriteFolder(scratch_ / "folder", "train", train);
  WriteFolder(scratch_ / "folder", "test", test);

  for (const int64_t size : {int64_t{kSide}, int64_t{8}}) {  // as stored, and resized
    const UserData wds = LoadWebDataset(scratch_ / "wds", size);
    const UserData folder = LoadImageFolder(scratch_ / "folder", size);
    ASSERT_EQ(wds.train->size(), 21);
    ASSERT_EQ(wds.test->size(), 6);
    EXPECT_EQ(wds.class_names, (std::vector<std::string>{"0", "1", "2"}));
    EXPECT_EQ(wds.mean, folder.mean);  // measured once per index, on the same images
    EXPECT_EQ(wds.std, folder.std);
    EXPECT_EQ(wds.height, size);
    EXPECT_FALSE(wds.index_key.empty());
    BatchRequest request;
    request.augment = true;
    request.seed = 7;
    request.epoch = 3;
    const Batch a = wds.train->Get(AllIndices(*wds.train), request);
    const Batch b = folder.train->Get(AllIndices(*folder.train), request);
    EXPECT_TRUE(torch::equal(a.inputs, b.inputs)) << "image size " << size;
    EXPECT_TRUE(torch::equal(a.targets, b.targets));
    request.augment = false;
    request.channels_last = true;
    EXPECT_TRUE(torch::equal(wds.test->Get(AllIndices(*wds.test), request).inputs,
                             folder.test->Get(AllIndices(*folder.test), request).inputs));
  }
  EXPECT_TRUE(fs::exists(scratch_ / "wds/.elastic-webdataset-index"));  // beside the data
}

TEST_F(WebDatasetTest, TheIndexIsBuiltOnceThenReadAndAPinnedOneWithoutListing) {
  const std::string dir = WriteDataSet(scratch_ / "data");
  std::ostringstream log;
  CounterDelta first;
  const ObtainedWebDatasetIndex built = ObtainWebDatasetIndex(dir, kSide, {}, log);
  EXPECT_EQ(built.source, IndexSource::kBuilt);
  EXPECT_EQ(built.path, dir + "/.elastic-webdataset-index");
  EXPECT_CONTAINS(log.str(), "webdataset " + dir +
                                 ": indexing 7 shards, once: later processes "
                                 "read the index " +
                                 built.path);
  EXPECT_EQ(first.Get().listings, 1);
  EXPECT_EQ(first.Get().shards_scanned, 7);
  EXPECT_EQ(first.Get().headers_read, 2 * 24 + 7);  // every member, and each shard's end block
  EXPECT_EQ(first.Get().statistics_decodes, 18);
  EXPECT_EQ(first.Get().indexes_built, 1);

  CounterDelta second;
  const ObtainedWebDatasetIndex found = ObtainWebDatasetIndex(dir, kSide, {}, log);
  EXPECT_EQ(found.source, IndexSource::kCurrent);
  EXPECT_EQ(found.index.key, built.index.key);
  EXPECT_EQ(second.Get().listings, 1);
  EXPECT_EQ(second.Get().shards_scanned, 0);
  EXPECT_EQ(second.Get().statistics_decodes, 0);

  CounterDelta pinned;
  const UserData data = LoadWebDataset(dir, kSide, {"", built.index.key});
  EXPECT_EQ(data.index_key, built.index.key);
  const WebDatasetCounters c = pinned.Get();
  EXPECT_EQ(c.listings, 0);
  EXPECT_EQ(c.shards_scanned, 0);
  EXPECT_EQ(c.headers_read, 0);
  EXPECT_EQ(c.statistics_decodes, 0);
  EXPECT_EQ(c.shard_opens, 0);  // nothing is mapped before a sample is read
  EXPECT_EQ(c.indexes_built, 0);
}

TEST_F(WebDatasetTest, AProcessMapsOnlyTheShardsOfTheSamplesItReadsEachOnce) {
  const std::string dir = WriteDataSet(scratch_ / "data");
  const std::string key = LoadWebDataset(dir, kSide).index_key;
  const UserData data = LoadWebDataset(dir, kSide, {"", key});
  CounterDelta reads;
  // Samples 5 and 6 are in shard 1 (samples 4..7), 17 in shard 4 (16..17).
  const Batch batch = data.train->Get({5, 17, 6}, BatchRequest{});
  EXPECT_EQ(batch.targets[1].item<int64_t>(), 2);
  EXPECT_EQ(reads.Get().opened,
            (std::vector<std::string>{"train/shard-000001.tar", "train/shard-000004.tar"}));
  data.train->Get({4, 7, 16}, BatchRequest{});
  data.test->Get({0}, BatchRequest{});
  EXPECT_EQ(reads.Get().opened,
            (std::vector<std::string>{"train/shard-000001.tar", "train/shard-000004.tar",
                                      "test/shard-000000.tar"}));
  EXPECT_EQ(reads.Get().shard_opens, 3);
}

TEST_F(WebDatasetTest, AChangedShardIsScannedAloneAndSaid) {
  const std::string dir = WriteDataSet(scratch_ / "data");
  std::ostringstream log;
  const ObtainedWebDatasetIndex before = ObtainWebDatasetIndex(dir, kSide, {}, log);
  WriteShards(dir + "/more", "test", MakeSamples(scratch_.path(), 2, 1, 70), 4);
  fs::rename(dir + "/more/test/shard-000000.tar", dir + "/test/shard-000009.tar");
  CounterDelta again;
  log.str("");
  const ObtainedWebDatasetIndex after = ObtainWebDatasetIndex(dir, kSide, {}, log);
  EXPECT_EQ(after.source, IndexSource::kBuilt);
  EXPECT_NE(after.index.key, before.index.key);
  EXPECT_CONTAINS(log.str(), "webdataset " + dir +
                                 ": the shards changed since they were indexed "
                                 "(1 shard added, 0 removed, 0 changed in "
                                 "size); re-indexing 8 shards");
  EXPECT_EQ(again.Get().shards_scanned, 1);
  EXPECT_EQ(again.Get().statistics_decodes, 0);  // the training shards are the same
  EXPECT_EQ(after.index.splits[1].samples.size(), 8u);

  // A worker pinned to the old index is told that this is not the job's data.
  ::setenv("ELASTIC_CACHE", (cache_ / "other").c_str(), 1);
  fs::remove(dir + "/.elastic-webdataset-index");
  try {
    ObtainWebDatasetIndex(dir, kSide, {"", before.index.key}, log);
    ADD_FAILURE() << "a pinned index of other shards was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_CONTAINS(e.what(), "here is not the data set the job indexed: its listing's key is " +
                                  after.index.key + ", the job's index is " + before.index.key);
  }
}

TEST_F(WebDatasetTest, ShardsWrittenByGnuTarInEachFormatGiveTheSameSamples) {
  // Members with a name over 100 bytes: a GNU long name, a pax path, a ustar prefix.
  const std::string folder = std::string(60, 'f') + "/" + std::string(60, 'g');
  const std::vector<Sample> samples = MakeSamples(scratch_.path(), 2, 3, 0);
  const std::string members = scratch_ / "members";
  for (const Sample& s : samples) {
    WriteBytes(members + "/" + folder + "/" + s.key + ".png", s.png);
    WriteBytes(members + "/" + folder + "/" + s.key + ".cls", std::to_string(s.label));
  }
  std::vector<torch::Tensor> batches;
  for (const std::string format : {"gnu", "pax", "ustar"}) {
    const std::string dir = scratch_ / format;
    fs::create_directories(dir + "/train");
    fs::create_directories(dir + "/test");
    for (const char* split : {"train", "test"}) {
      // Sorted names: the members go in as the samples were made.
      const std::string command = "cd " + members + " && tar --format=" + format +
                                  " --sort=name -cf " + dir + "/" + split + "/shard-000000.tar " +
                                  std::string(60, 'f');
      ASSERT_EQ(std::system(command.c_str()), 0) << command;
    }
    const UserData data = LoadWebDataset(dir, kSide);
    ASSERT_EQ(data.train->size(), 6) << format;
    batches.push_back(data.train->Get(AllIndices(*data.train), BatchRequest{}).inputs);
    EXPECT_EQ(data.train->Get({0, 3}, BatchRequest{}).targets[1].item<int64_t>(), 1);
  }
  EXPECT_TRUE(torch::equal(batches[0], batches[1]));
  EXPECT_TRUE(torch::equal(batches[0], batches[2]));
}

TEST_F(WebDatasetTest, ASampleThatFailsToDecodeIsZerosAndCounted) {
  const std::string dir = scratch_ / "data";
  std::vector<Sample> train = MakeSamples(scratch_.path(), 2, 3, 0);
  train[1].png = train[1].png.substr(0, 60);  // the header survives, the image data do not
  WriteShards(dir, "train", train, 3);
  WriteShards(dir, "test", MakeSamples(scratch_.path(), 2, 1, 9), 3);
  const UserData data = LoadWebDataset(dir, kSide);
  auto* examples = dynamic_cast<const WebDatasetExamples*>(data.train.get());
  ASSERT_NE(examples, nullptr);
  const Batch batch = examples->Get({0, 1, 2}, BatchRequest{});
  EXPECT_EQ(examples->failed_decodes(), 1);
  EXPECT_EQ(batch.inputs[1].abs().sum().item<float>(), 0.0f);
  EXPECT_GT(batch.inputs[0].abs().sum().item<float>(), 0.0f);
  EXPECT_EQ(batch.targets[1].item<int64_t>(), 0);
}

TEST_F(WebDatasetTest, ErrorsNameTheDataSetAndTheShard) {
  const std::string dir = WriteDataSet(scratch_ / "data");
  // A label missing in the second training shard.
  TarWriter tar;
  tar.Add("x.png", PngBytes(scratch_.path(), 1));
  WriteBytes(dir + "/train/shard-000001.tar", tar.Finish());
  EXPECT_CONTAINS(LoadError(dir), "webdataset " + dir +
                                      ": train/shard-000001.tar: sample 'x' (x.png at byte offset "
                                      "0) has no label");

  // A shard cut short.
  WriteDataSet(dir);
  const std::string shard = dir + "/test/shard-000001.tar";
  fs::resize_file(shard, fs::file_size(shard) - 1500);
  EXPECT_CONTAINS(LoadError(dir), "webdataset " + dir + ": test/shard-000001.tar is truncated: ");

  // Layout.
  EXPECT_CONTAINS(LoadError(scratch_ / "none"),
                  "webdataset: " + scratch_ / "none" + " is not a directory");
  fs::create_directories(scratch_ / "empty");
  EXPECT_CONTAINS(LoadError(scratch_ / "empty"), "has no train/ folder (expected train/*.tar");
  fs::create_directories(scratch_ / "empty/train");
  EXPECT_CONTAINS(LoadError(scratch_ / "empty"), "has neither test/ nor val/");
  fs::create_directories(scratch_ / "empty/val");
  WriteBytes(scratch_ / "empty/train/shard-000000.tar.gz", "x");
  EXPECT_CONTAINS(LoadError(scratch_ / "empty"),
                  scratch_ /
                      "empty/train has no .tar shard (1 other entries; compressed shards "
                      "such as .tar.gz are not read");
}

TEST_F(WebDatasetTest, ValStandsForTestAndOtherFilesAreNotShards) {
  const std::string dir = scratch_ / "data";
  WriteShards(dir, "train", MakeSamples(scratch_.path(), 2, 2, 0), 4);
  WriteShards(dir, "val", MakeSamples(scratch_.path(), 2, 1, 5), 4);
  WriteBytes(dir + "/train/README.txt", "not a shard");
  const UserData data = LoadWebDataset(dir, kSide);
  EXPECT_EQ(data.train->size(), 4);
  EXPECT_EQ(data.test->size(), 2);
}

TEST_F(WebDatasetTest, AShardThatChangesUnderAJobIsAnErrorNamingIt) {
  const std::string dir = WriteDataSet(scratch_ / "data");
  const UserData data = LoadWebDataset(dir, kSide);
  std::ofstream(dir + "/train/shard-000003.tar", std::ios::app) << std::string(512, '\0');
  try {
    data.train->Get({13}, BatchRequest{});
    ADD_FAILURE() << "a shard that grew was read";
  } catch (const std::runtime_error& e) {
    EXPECT_CONTAINS(e.what(), "train/shard-000003.tar is ");
    EXPECT_CONTAINS(e.what(), "but the job's index was built when it was");
  }
}

}  // namespace
}  // namespace elastic::trainer
