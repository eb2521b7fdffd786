// How a process gets an image folder's index, on real folders of small PNGs:
// built once, then found; pinned and read without listing; a changed folder
// noticed and re-indexed probing only what changed; a damaged index rebuilt;
// a read-only folder's index kept in the cache; builders that start together
// probe every file once between them. Counted, not timed.
#include "trainer/data/image_folder_index.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "trainer/data/image_folder.h"
#include "trainer/data/image_index_store.h"
#include "trainer/data/image_test_files.h"
#include "trainer/data/test_files.h"
#include "trainer/data/user_data.h"

namespace elastic::trainer {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "'" << (text) << "'"

void WritePng(const std::string& path, int seed) {
  fs::create_directories(fs::path(path).parent_path());
  const std::vector<uint8_t> rgb = testing::SmoothRgbImage(8, 8, seed);
  testing::WriteRgbPng(path, rgb.data(), 8, 8);
}

// `classes` classes of `per_class` training and 2 test PNGs each: the number of files.
int WriteFolder(const std::string& dir, int classes, int per_class) {
  for (int k = 0; k < classes; ++k) {
    const std::string cls = "c" + std::to_string(k);
    for (int i = 0; i < per_class; ++i) {
      WritePng(dir + "/train/" + cls + "/" + std::to_string(i) + ".png", k * 100 + i);
    }
    for (int i = 0; i < 2; ++i)
      WritePng(dir + "/test/" + cls + "/" + std::to_string(i) + ".png", i);
  }
  return classes * (per_class + 2);
}

// Counters since the object was made: the tests of this binary run one after another.
class CounterDelta {
 public:
  CounterDelta() : start_(ImageFolderCountersNow()) {}
  ImageFolderCounters Get() const {
    const ImageFolderCounters now = ImageFolderCountersNow();
    return {now.folders_listed - start_.folders_listed, now.headers_probed - start_.headers_probed,
            now.statistics_decodes - start_.statistics_decodes,
            now.indexes_built - start_.indexes_built};
  }

 private:
  ImageFolderCounters start_;
};

// A cache of this test's own, so that nothing lands in the home directory.
class ImageFolderIndexTest : public ::testing::Test {
 protected:
  void SetUp() override { ::setenv("ELASTIC_CACHE", cache_.path().c_str(), 1); }
  void TearDown() override { ::unsetenv("ELASTIC_CACHE"); }

  ObtainedIndex Obtain(const std::string& dir, int64_t size = 8,
                       const ImageIndexOptions& options = {}) {
    log_.str("");
    return ObtainImageIndex(dir, size, options, log_);
  }
  std::string Log() const { return log_.str(); }

  ScratchDir cache_;
  std::ostringstream log_;
};

TEST_F(ImageFolderIndexTest, BuiltOnceThenFoundWithoutProbing) {
  ScratchDir dir;
  const int files = WriteFolder(dir.path(), 3, 5);
  CounterDelta first;
  const ObtainedIndex built = Obtain(dir.path());
  EXPECT_EQ(built.source, IndexSource::kBuilt);
  EXPECT_EQ(built.path, dir / kIndexFileName);
  EXPECT_TRUE(fs::exists(dir / kIndexFileName));
  EXPECT_EQ(first.Get().headers_probed, files);
  EXPECT_EQ(first.Get().statistics_decodes, 15);  // every training image, fewer than 1000
  EXPECT_EQ(first.Get().indexes_built, 1);
  EXPECT_CONTAINS(
      Log(), "indexing 21 files, once: later processes read the index " + (dir / kIndexFileName));

  CounterDelta second;
  const ObtainedIndex found = Obtain(dir.path());
  EXPECT_EQ(found.source, IndexSource::kCurrent);
  EXPECT_EQ(found.index.key, built.index.key);
  EXPECT_EQ(second.Get().folders_listed, 1);
  EXPECT_EQ(second.Get().headers_probed, 0);
  EXPECT_EQ(second.Get().statistics_decodes, 0);
  EXPECT_EQ(Log(), "");
}

TEST_F(ImageFolderIndexTest, APinnedIndexIsReadWithoutListingAnything) {
  ScratchDir dir;
  WriteFolder(dir.path(), 2, 4);
  const std::string key = Obtain(dir.path()).index.key;
  // Even a file added since is not seen: the job reads what its driver indexed.
  WritePng(dir / "train/c0/new.png", 99);
  CounterDelta pinned;
  const ObtainedIndex obtained = Obtain(dir.path(), 8, {"", key});
  EXPECT_EQ(obtained.source, IndexSource::kPinned);
  EXPECT_EQ(obtained.index.key, key);
  EXPECT_EQ(pinned.Get().folders_listed, 0);
  EXPECT_EQ(pinned.Get().headers_probed, 0);
  EXPECT_EQ(pinned.Get().statistics_decodes, 0);
  EXPECT_EQ(Log(), "");
  // The examples the pinned index gives are the driver's.
  const UserData data = LoadImageFolder(dir.path(), 8, {"", key});
  EXPECT_EQ(data.train->size(), 8);
  EXPECT_EQ(data.index_key, key);
}

// A worker that reads its job's index in place gets the driver's examples:
// the same files, labels (a test split of a subset of the classes), skipped
// files and normalisation, so the same batches bit for bit.
TEST_F(ImageFolderIndexTest, APinnedLoadGivesTheBuildersBatches) {
  ScratchDir dir;
  WriteFolder(dir.path(), 3, 5);
  fs::remove_all(dir / "test/c0");
  testing::WriteFile(dir / "train/c1/broken.png", {'n', 'o'});
  ::testing::internal::CaptureStderr();
  const UserData built = LoadImageFolder(dir.path(), 8);
  const std::string built_warnings = ::testing::internal::GetCapturedStderr();
  CounterDelta delta;
  ::testing::internal::CaptureStderr();
  const UserData pinned = LoadImageFolder(dir.path(), 8, {"", built.index_key});
  const std::string pinned_warnings = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(delta.Get().folders_listed, 0);
  EXPECT_EQ(delta.Get().headers_probed, 0);
  EXPECT_EQ(delta.Get().statistics_decodes, 0);
  // The same warning (the builder also said it indexed the folder).
  EXPECT_CONTAINS(built_warnings, pinned_warnings);
  EXPECT_CONTAINS(pinned_warnings, "skipped 1 of 20 files");
  EXPECT_EQ(pinned.class_names, built.class_names);
  EXPECT_EQ(pinned.mean, built.mean);
  EXPECT_EQ(pinned.std, built.std);
  ASSERT_EQ(pinned.train->size(), 15);
  ASSERT_EQ(pinned.test->size(), 4);
  for (const auto& [a, b] :
       {std::make_pair(built.train, pinned.train), std::make_pair(built.test, pinned.test)}) {
    std::vector<int64_t> all(a->size());
    for (int64_t i = 0; i < a->size(); ++i) all[i] = i;
    const BatchRequest request{3, true, 1, false};
    const Batch x = a->Get(all, request);
    const Batch y = b->Get(all, request);
    EXPECT_TRUE(torch::equal(x.inputs, y.inputs));
    EXPECT_TRUE(torch::equal(x.targets, y.targets));
  }
  EXPECT_TRUE(torch::equal(pinned.test->Get({0, 1, 2, 3}, {}).targets,
                           torch::tensor({1, 1, 2, 2})));  // c1 and c2: training indices
}

TEST_F(ImageFolderIndexTest, APinnedIndexThatIsMissingIsRebuiltOnlyForTheSameFiles) {
  ScratchDir dir;
  WriteFolder(dir.path(), 2, 4);
  const std::string key = Obtain(dir.path()).index.key;
  fs::remove(dir / kIndexFileName);  // another machine: it has no index yet
  const ObtainedIndex rebuilt = Obtain(dir.path(), 8, {"", key});
  EXPECT_EQ(rebuilt.source, IndexSource::kBuilt);
  EXPECT_EQ(rebuilt.index.key, key);
  EXPECT_CONTAINS(Log(), "the job's index " + key + " is not in " + (dir / kIndexFileName));
  // Another machine whose files differ from the job's: refused, not trained
  // on with other labels.
  fs::remove(dir / kIndexFileName);
  fs::remove(dir / "train/c1/3.png");
  try {
    Obtain(dir.path(), 8, {"", key});
    FAIL() << "a folder that is not the job's was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_CONTAINS(e.what(), "is not the folder the job indexed");
    EXPECT_CONTAINS(e.what(), "the job's index is " + key);
  }
}

TEST_F(ImageFolderIndexTest, AChangedFolderIsReindexedProbingOnlyWhatChangedAndSaysSo) {
  ScratchDir dir;
  WriteFolder(dir.path(), 2, 4);
  const ObtainedIndex before = Obtain(dir.path());
  WritePng(dir / "train/c1/added.png", 7);
  fs::remove(dir / "train/c0/2.png");
  CounterDelta delta;
  const ObtainedIndex after = Obtain(dir.path());
  EXPECT_EQ(after.source, IndexSource::kBuilt);
  EXPECT_NE(after.index.key, before.index.key);
  EXPECT_CONTAINS(Log(), "image-folder " + dir.path() +
                             ": the folder changed since it was indexed (1 file added, 1 removed, "
                             "0 changed in size); re-indexing 12 files");
  EXPECT_EQ(delta.Get().headers_probed, 1);      // the added file alone
  EXPECT_EQ(delta.Get().statistics_decodes, 8);  // the training images changed: measured again
  // Rewritten in place: the next process finds it.
  EXPECT_EQ(Obtain(dir.path()).source, IndexSource::kCurrent);
}

TEST_F(ImageFolderIndexTest, ADamagedIndexIsRebuiltWithAClearMessage) {
  ScratchDir dir;
  WriteFolder(dir.path(), 2, 3);
  const ObtainedIndex good = Obtain(dir.path());
  const std::vector<uint8_t> bytes = testing::ReadFile(dir / kIndexFileName);
  struct Case {
    std::vector<uint8_t> bytes;
    std::string problem;
  };
  std::vector<uint8_t> flipped = bytes;
  flipped[bytes.size() - 3] ^= 1;
  const std::vector<Case> cases = {
      {std::vector<uint8_t>(bytes.begin(), bytes.begin() + bytes.size() / 2), "(truncated: "},
      {flipped, "(damaged: its SHA-256 does not match its contents)"},
      {{'h', 'i'}, "(not an image-folder index"},
  };
  for (const Case& c : cases) {
    testing::WriteFile(dir / kIndexFileName, c.bytes);
    CounterDelta delta;
    const ObtainedIndex rebuilt = Obtain(dir.path());
    EXPECT_EQ(rebuilt.source, IndexSource::kBuilt) << c.problem;
    EXPECT_EQ(rebuilt.index.key, good.index.key);
    EXPECT_CONTAINS(Log(), "the index " + (dir / kIndexFileName) + " cannot be used " + c.problem);
    EXPECT_CONTAINS(Log(), "); re-indexing");
    EXPECT_EQ(delta.Get().headers_probed, 10);
    EXPECT_EQ(Obtain(dir.path()).source, IndexSource::kCurrent) << c.problem;  // whole again
  }
}

TEST_F(ImageFolderIndexTest, AReadOnlyFoldersIndexIsKeptInTheCache) {
  ScratchDir dir;
  WriteFolder(dir.path(), 2, 3);
  ASSERT_EQ(::chmod(dir.path().c_str(), 0555), 0);
  const ObtainedIndex built = Obtain(dir.path());
  EXPECT_EQ(built.source, IndexSource::kBuilt);
  EXPECT_FALSE(fs::exists(dir / kIndexFileName));
  EXPECT_EQ(built.path.rfind(cache_.path() + "/image-index/", 0), 0u) << built.path;
  EXPECT_TRUE(fs::exists(built.path));
  CounterDelta delta;
  const ObtainedIndex pinned = Obtain(dir.path(), 8, {"", built.index.key});
  EXPECT_EQ(pinned.source, IndexSource::kPinned);
  EXPECT_EQ(pinned.path, built.path);
  EXPECT_EQ(delta.Get().headers_probed, 0);
  ::chmod(dir.path().c_str(), 0755);
}

TEST_F(ImageFolderIndexTest, TheFlagPutsTheIndexWhereItSays) {
  ScratchDir dir;
  ScratchDir indexes;
  WriteFolder(dir.path(), 2, 3);
  const ObtainedIndex built = Obtain(dir.path(), 8, {indexes.path(), ""});
  EXPECT_EQ(fs::path(built.path).parent_path(), indexes.path());
  EXPECT_FALSE(fs::exists(dir / kIndexFileName));
  EXPECT_EQ(Obtain(dir.path(), 8, {indexes.path(), built.index.key}).source, IndexSource::kPinned);
}

TEST_F(ImageFolderIndexTest, AnotherImageSizeAddsItsStatisticsWithoutProbing) {
  ScratchDir dir;
  WriteFolder(dir.path(), 2, 3);
  const ObtainedIndex at8 = Obtain(dir.path(), 8);
  CounterDelta delta;
  const ObtainedIndex at16 = Obtain(dir.path(), 16);
  EXPECT_EQ(delta.Get().headers_probed, 0);
  EXPECT_EQ(delta.Get().statistics_decodes, 6);
  ASSERT_NE(at16.index.StatisticsFor(16), nullptr);
  ASSERT_NE(at16.index.StatisticsFor(8), nullptr);
  EXPECT_EQ(at16.index.StatisticsFor(8)->mean, at8.index.StatisticsFor(8)->mean);
  // Both sizes are kept: a job of either reads its statistics from the pinned index.
  EXPECT_EQ(Obtain(dir.path(), 8, {"", at8.index.key}).source, IndexSource::kPinned);
  EXPECT_EQ(Obtain(dir.path(), 16, {"", at8.index.key}).source, IndexSource::kPinned);
}

TEST_F(ImageFolderIndexTest, TheIndexsStatisticsAreTheMeasuredOnesBitForBit) {
  ScratchDir dir;
  WriteFolder(dir.path(), 3, 4);
  Obtain(dir.path());
  const UserData data = LoadImageFolder(dir.path(), 8);  // from the index
  const ImageFolderSplit scan = ScanImageFolder(dir / "train");
  const PixelNormalizer measured = MeasureImageNormalization(scan.files, 8);
  EXPECT_EQ(data.mean, measured.mean());
  EXPECT_EQ(data.std, measured.std());
}

TEST_F(ImageFolderIndexTest, BuildersStartingTogetherProbeEveryFileOnceBetweenThem) {
  ScratchDir dir;
  const int files = WriteFolder(dir.path(), 4, 25);
  CounterDelta delta;
  std::vector<std::string> keys(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < keys.size(); ++t) {
    threads.emplace_back([&, t] {
      std::ostringstream log;
      keys[t] = ObtainImageIndex(dir.path(), 8, {}, log).index.key;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), 1u);
  EXPECT_EQ(delta.Get().headers_probed, files);
  EXPECT_EQ(delta.Get().indexes_built, 1);
  EXPECT_EQ(delta.Get().folders_listed, 4);
}

}  // namespace
}  // namespace elastic::trainer
