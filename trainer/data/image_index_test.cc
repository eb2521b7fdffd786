// The image folder's index without images: keys, differences, reuse of an
// older index's verdicts, the file format and its damage, where it is kept.
#include "trainer/data/image_index.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/data/image_index_store.h"
#include "trainer/data/test_files.h"

namespace elastic::trainer {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "'" << (text) << "'"

// Two classes of training images, one of test images, one ignored file.
FolderListing SmallListing() {
  FolderListing listing;
  ListedSplit train;
  train.name = "train";
  train.class_names = {"cat", "dog"};
  train.images = {{"train/cat/1.jpg", 100, 0},
                  {"train/cat/2.jpg", 200, 0},
                  {"train/dog/1.png", 300, 1},
                  {"train/dog/bad.png", 4, 1}};
  train.ignored = {"train/cat/notes.txt"};
  ListedSplit test;
  test.name = "test";
  test.class_names = {"dog"};
  test.images = {{"test/dog/9.jpg", 900, 0}};
  listing.splits = {train, test};
  return listing;
}

// A probe that says "bad.png" is unreadable and records every path it reads.
struct RecordingProbe {
  std::vector<std::string> probed;
  HeaderProbe Fn() {
    return [this](const std::string& path) {
      probed.push_back(path);
      return path.find("bad") != std::string::npos ? std::string("not a PNG") : std::string();
    };
  }
};

ImageIndex SmallIndex() {
  RecordingProbe probe;
  ImageIndex index = IndexListing(SmallListing(), nullptr, probe.Fn());
  index.SetStatistics({32, {0.5f, 0.4f, 0.3f}, {0.25f, 0.2f, 0.15f}});
  return index;
}

TEST(ImageIndex, KeyChangesWithAnyFileAndOnlyThen) {
  const std::string key = ListingKey(SmallListing());
  EXPECT_EQ(key.size(), 32u);
  EXPECT_EQ(ListingKey(SmallListing()), key);
  std::set<std::string> keys = {key};
  FolderListing resized = SmallListing();
  resized.splits[0].images[1].size = 201;
  keys.insert(ListingKey(resized));
  FolderListing renamed = SmallListing();
  renamed.splits[0].images[1].path = "train/cat/3.jpg";
  keys.insert(ListingKey(renamed));
  FolderListing added = SmallListing();
  added.splits[1].images.push_back({"test/dog/10.jpg", 5, 0});
  keys.insert(ListingKey(added));
  FolderListing ignored = SmallListing();
  ignored.splits[0].ignored.push_back("train/README");
  keys.insert(ListingKey(ignored));
  FolderListing val = SmallListing();
  val.splits[1].name = "val";
  keys.insert(ListingKey(val));
  // A path moved across the boundary of two strings is another listing.
  FolderListing classes = SmallListing();
  classes.splits[0].class_names = {"catdog", ""};
  keys.insert(ListingKey(classes));
  EXPECT_EQ(keys.size(), 7u);
}

TEST(ImageIndex, DiffCountsAddedRemovedAndResizedFiles) {
  FolderListing after = SmallListing();
  after.splits[0].images.erase(after.splits[0].images.begin());   // removed
  after.splits[0].images.push_back({"train/dog/new.png", 7, 1});  // added
  after.splits[1].images.push_back({"test/dog/new.jpg", 7, 0});   // added
  after.splits[1].images[0].size = 901;                           // resized
  after.splits[0].ignored.clear();                                // removed
  const ListingChange change = DiffListings(SmallListing(), after);
  EXPECT_EQ(change.added, 2);
  EXPECT_EQ(change.removed, 2);
  EXPECT_EQ(change.resized, 1);
  EXPECT_EQ(Describe(change), "2 files added, 2 removed, 1 changed in size");
  EXPECT_EQ(Describe(ListingChange{1, 0, 0}), "1 file added, 0 removed, 0 changed in size");
  EXPECT_TRUE(DiffListings(SmallListing(), SmallListing()).empty());
}

TEST(ImageIndex, EveryImageIsProbedOnceAndVerdictsAreKept) {
  RecordingProbe probe;
  const ImageIndex index = IndexListing(SmallListing(), nullptr, probe.Fn());
  EXPECT_EQ(probe.probed.size(), 5u);
  EXPECT_EQ(index.key, ListingKey(SmallListing()));
  ASSERT_EQ(index.unreadable.size(), 2u);
  EXPECT_EQ(index.unreadable[0], (std::vector<std::string>{"", "", "", "not a PNG"}));
  EXPECT_EQ(index.unreadable[1], (std::vector<std::string>{""}));
  EXPECT_TRUE(index.statistics.empty());
}

TEST(ImageIndex, ReindexingProbesOnlyNewOrResizedImages) {
  const ImageIndex before = SmallIndex();
  FolderListing after = SmallListing();
  after.splits[1].images.push_back({"test/dog/new.jpg", 7, 0});
  after.splits[0].images[2].size = 301;  // train/dog/1.png rewritten
  RecordingProbe probe;
  const ImageIndex index = IndexListing(after, &before, probe.Fn());
  EXPECT_EQ(probe.probed, (std::vector<std::string>{"train/dog/1.png", "test/dog/new.jpg"}));
  EXPECT_EQ(index.unreadable[0][3], "not a PNG");  // kept, not probed again
  EXPECT_EQ(index.key, ListingKey(after));
  // A training image was rewritten: the statistics are measured again.
  EXPECT_EQ(index.StatisticsFor(32), nullptr);
}

TEST(ImageIndex, StatisticsCarryOverWhileTheTrainingImagesAreTheSame) {
  const ImageIndex before = SmallIndex();
  FolderListing test_changed = SmallListing();
  test_changed.splits[1].images.push_back({"test/dog/new.jpg", 7, 0});
  RecordingProbe probe;
  const ImageIndex index = IndexListing(test_changed, &before, probe.Fn());
  ASSERT_NE(index.StatisticsFor(32), nullptr);
  EXPECT_EQ(index.StatisticsFor(32)->mean, before.StatisticsFor(32)->mean);
  // An unreadable training file added changes no measured image.
  FolderListing unreadable_added = SmallListing();
  unreadable_added.splits[0].images.push_back({"train/dog/bad2.png", 3, 1});
  EXPECT_NE(IndexListing(unreadable_added, &before, probe.Fn()).StatisticsFor(32), nullptr);
  FolderListing train_added = SmallListing();
  train_added.splits[0].images.push_back({"train/dog/3.png", 3, 1});
  EXPECT_EQ(IndexListing(train_added, &before, probe.Fn()).StatisticsFor(32), nullptr);
}

TEST(ImageIndex, ProbesOnSeveralThreadsGiveTheSameIndexProbingEachImageOnce) {
  FolderListing listing = SmallListing();
  for (int i = 0; i < 2000; ++i) {
    listing.splits[0].images.push_back(
        {"train/dog/many" + std::to_string(i) + (i % 7 == 0 ? "bad.png" : ".png"), 10, 1});
  }
  std::mutex mutex;
  std::multiset<std::string> probed;
  const HeaderProbe probe = [&](const std::string& path) {
    std::lock_guard<std::mutex> lock(mutex);
    probed.insert(path);
    return path.find("bad") != std::string::npos ? std::string("not a PNG") : std::string();
  };
  const ImageIndex threaded = IndexListing(listing, nullptr, probe, 8);
  EXPECT_EQ(probed.size(), 2005u);
  for (const std::string& path : probed) EXPECT_EQ(probed.count(path), 1u) << path;
  RecordingProbe one;
  EXPECT_EQ(threaded.unreadable, IndexListing(listing, nullptr, one.Fn(), 1).unreadable);
  // A probe that fails (not a verdict: an error) fails the whole index.
  const HeaderProbe failing = [](const std::string& path) -> std::string {
    if (path == "train/dog/many1234.png") throw std::runtime_error("out of memory");
    return "";
  };
  EXPECT_THROW(IndexListing(listing, nullptr, failing, 8), std::runtime_error);
}

TEST(ImageIndex, StatisticsAreKeptPerImageSize) {
  ImageIndex index = SmallIndex();
  index.SetStatistics({64, {0.1f, 0.1f, 0.1f}, {1, 1, 1}});
  index.SetStatistics({32, {0.2f, 0.2f, 0.2f}, {1, 1, 1}});
  EXPECT_EQ(index.statistics.size(), 2u);
  EXPECT_EQ(index.StatisticsFor(32)->mean[0], 0.2f);
  EXPECT_EQ(index.StatisticsFor(64)->mean[0], 0.1f);
  EXPECT_EQ(index.StatisticsFor(16), nullptr);
}

void ExpectSame(const ImageIndex& a, const ImageIndex& b) {
  EXPECT_EQ(a.key, b.key);
  ASSERT_EQ(a.listing.splits.size(), b.listing.splits.size());
  for (size_t s = 0; s < a.listing.splits.size(); ++s) {
    const ListedSplit& x = a.listing.splits[s];
    const ListedSplit& y = b.listing.splits[s];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.class_names, y.class_names);
    EXPECT_EQ(x.ignored, y.ignored);
    ASSERT_EQ(x.images.size(), y.images.size());
    for (size_t i = 0; i < x.images.size(); ++i) {
      EXPECT_EQ(x.images[i].path, y.images[i].path);
      EXPECT_EQ(x.images[i].size, y.images[i].size);
      EXPECT_EQ(x.images[i].label, y.images[i].label);
    }
  }
  EXPECT_EQ(a.unreadable, b.unreadable);
  ASSERT_EQ(a.statistics.size(), b.statistics.size());
  for (size_t k = 0; k < a.statistics.size(); ++k) {
    EXPECT_EQ(a.statistics[k].image_size, b.statistics[k].image_size);
    EXPECT_EQ(a.statistics[k].mean, b.statistics[k].mean);  // bit for bit: floats stored as is
    EXPECT_EQ(a.statistics[k].std, b.statistics[k].std);
  }
}

TEST(ImageIndex, EncodeDecodeRoundTrip) {
  const ImageIndex index = SmallIndex();
  ExpectSame(DecodeIndex(EncodeIndex(index)), index);
  ImageIndex empty;
  ExpectSame(DecodeIndex(EncodeIndex(empty)), empty);
}

TEST(ImageIndex, AViewReadsTheReadableImagesInPlace) {
  ImageIndex index = SmallIndex();
  index.listing.splits[0].ignored = {"train/a.txt", "train/b.txt", "train/c.txt"};
  const std::string bytes = EncodeIndex(index);
  const IndexView view = ViewIndex(bytes, 2);
  EXPECT_EQ(view.key, index.key);
  ASSERT_EQ(view.splits.size(), 2u);
  const IndexView::Split& train = view.splits[0];
  EXPECT_EQ(train.name, "train");
  EXPECT_EQ(train.class_names, index.listing.splits[0].class_names);
  EXPECT_EQ(train.images, 4);
  std::vector<std::string> paths;
  std::vector<int32_t> labels;
  for (const ImageRef& ref : train.readable) {
    paths.emplace_back(bytes.data() + ref.path_offset, ref.path_size);
    labels.push_back(ref.label);
  }
  EXPECT_EQ(paths,
            (std::vector<std::string>{"train/cat/1.jpg", "train/cat/2.jpg", "train/dog/1.png"}));
  EXPECT_EQ(labels, (std::vector<int32_t>{0, 0, 1}));
  EXPECT_EQ(train.unreadable_count, 1);
  ASSERT_EQ(train.unreadable.size(), 1u);
  EXPECT_EQ(train.unreadable[0],
            std::make_pair(std::string("train/dog/bad.png"), std::string("not a PNG")));
  EXPECT_EQ(train.ignored_count, 3);
  EXPECT_EQ(train.ignored,
            (std::vector<std::string>{"train/a.txt", "train/b.txt"}));  // the first 2
  EXPECT_EQ(view.splits[1].readable.size(), 1u);
  ASSERT_NE(view.StatisticsFor(32), nullptr);
  EXPECT_EQ(view.StatisticsFor(32)->std, index.StatisticsFor(32)->std);
  EXPECT_EQ(view.StatisticsFor(64), nullptr);
}

std::string ViewError(const std::string& bytes) {
  try {
    ViewIndex(bytes);
  } catch (const IndexFormatError& e) {
    return e.what();
  }
  return "";
}

std::string DecodeError(const std::string& bytes) {
  try {
    DecodeIndex(bytes);
  } catch (const IndexFormatError& e) {
    return e.what();
  }
  return "";
}

TEST(ImageIndex, DamagedFilesAreRefusedSayingWhy) {
  const std::string bytes = EncodeIndex(SmallIndex());
  EXPECT_CONTAINS(DecodeError(""), "not an image-folder index");
  EXPECT_CONTAINS(DecodeError("PK\x03\x04 a zip file"), "not an image-folder index");
  EXPECT_CONTAINS(DecodeError(bytes.substr(0, 20)), "truncated: 20 bytes, shorter than");
  EXPECT_CONTAINS(DecodeError(bytes.substr(0, bytes.size() - 10)), "truncated: ");
  EXPECT_CONTAINS(DecodeError(bytes + "x"), "damaged: ");
  std::string flipped = bytes;
  flipped[flipped.size() / 2] ^= 0x20;
  EXPECT_CONTAINS(DecodeError(flipped), "SHA-256 does not match");
  std::string version = bytes;
  version[8] = 7;
  EXPECT_CONTAINS(DecodeError(version), "version 7, this program reads version 1");
  // Every prefix, cut anywhere: refused, never a crash or a partial index;
  // by the view as by the decoder.
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_NE(DecodeError(bytes.substr(0, n)), "") << n;
    EXPECT_EQ(ViewError(bytes.substr(0, n)), DecodeError(bytes.substr(0, n))) << n;
  }
  EXPECT_CONTAINS(ViewError(flipped), "SHA-256 does not match");
}

TEST(ImageIndexStore, PlacesAreBesideTheDataOrInTheCacheOrWhereTheFlagSays) {
  const IndexPlaces writable = PlacesFor("/data/imagenet", true, "", "/home/u/.cache/elastic");
  ASSERT_EQ(writable.read.size(), 2u);
  EXPECT_EQ(writable.read[0], "/data/imagenet/.elastic-image-index");
  EXPECT_EQ(writable.write, writable.read[0]);
  EXPECT_EQ(writable.read[1].rfind("/home/u/.cache/elastic/image-index/imagenet-", 0), 0u)
      << writable.read[1];
  const IndexPlaces read_only = PlacesFor("/data/imagenet", false, "", "/home/u/.cache/elastic");
  EXPECT_EQ(read_only.read, writable.read);
  EXPECT_EQ(read_only.write, writable.read[1]);
  // Another folder of the same name elsewhere has its own cached index.
  EXPECT_NE(PlacesFor("/mnt/imagenet", false, "", "/c").write,
            PlacesFor("/data/imagenet", false, "", "/c").write);
  const IndexPlaces flagged = PlacesFor("/data/imagenet", true, "/shared/indexes", "/c");
  ASSERT_EQ(flagged.read.size(), 1u);
  EXPECT_EQ(flagged.read[0].rfind("/shared/indexes/imagenet-", 0), 0u) << flagged.read[0];
  EXPECT_EQ(flagged.write, flagged.read[0]);
}

TEST(ImageIndexStore, ADirectoryWithoutWriteBitsIsReadOnlyEvenForRoot) {
  ScratchDir dir;
  fs::create_directories(dir / "ro");
  fs::create_directories(dir / "rw");
  ASSERT_EQ(::chmod((dir / "ro").c_str(), 0555), 0);
  EXPECT_FALSE(DirectoryWritable(dir / "ro"));
  EXPECT_TRUE(DirectoryWritable(dir / "rw"));
  EXPECT_FALSE(DirectoryWritable(dir / "missing"));
  ::chmod((dir / "ro").c_str(), 0755);
}

TEST(ImageIndexStore, WrittenAtomicallyAndReadBack) {
  ScratchDir dir;
  const std::string path = dir / "cache/image-index/x.index";  // its folder is created
  const ImageIndex index = SmallIndex();
  WriteIndexFile(path, index);
  testing::WriteFile(dir / "broken.index", {'E', 'L', 'I', 'M', 'G', 'I', 'D', 'X', 1});
  const std::vector<StoredIndex> read =
      ReadIndexFiles({dir / "missing.index", path, dir / "broken.index"});
  ASSERT_EQ(read.size(), 2u);  // the missing one is left out
  EXPECT_EQ(read[0].path, path);
  ASSERT_TRUE(read[0].index.has_value()) << read[0].problem;
  ExpectSame(*read[0].index, index);
  EXPECT_EQ(read[1].path, dir / "broken.index");
  EXPECT_FALSE(read[1].index.has_value());
  EXPECT_CONTAINS(read[1].problem, "truncated");
  // Nothing but the index is left in its folder (no temporary).
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir / "cache/image-index")) {
    names.push_back(entry.path().filename().string());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"x.index"}));
  // Written again over the old one.
  ImageIndex other = index;
  other.SetStatistics({8, {0, 0, 0}, {1, 1, 1}});
  WriteIndexFile(path, other);
  ExpectSame(*ReadIndexFiles({path})[0].index, other);
}

TEST(ImageIndexStore, TheLockExcludesEveryOtherHolder) {
  ScratchDir dir;
  const std::string path = dir / "sub/x.index";
  auto try_lock = [&] {
    const int fd = ::open((path + ".lock").c_str(), O_RDWR | O_CLOEXEC);
    const bool got = fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) == 0;
    const int error = errno;
    if (fd >= 0) ::close(fd);
    return got ? 0 : error;
  };
  {
    IndexLock lock(path);
    EXPECT_EQ(try_lock(), EWOULDBLOCK);
  }
  EXPECT_EQ(try_lock(), 0);
}

}  // namespace
}  // namespace elastic::trainer
