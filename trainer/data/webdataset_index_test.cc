// The tar walk (tar.h) and the WebDataset index (webdataset_index.h) on
// archives built in memory by the test's own ustar writer: members, offsets,
// grouping by key, every error with its shard and byte offset, re-indexing
// only changed shards, and the index's bytes.
#include "trainer/data/webdataset_index.h"

#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/data/tar.h"
#include "trainer/data/tar_test_files.h"

namespace elastic::trainer {
namespace {

using testing::TarWriter;

const uint8_t* Bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

// The message of the std::runtime_error that `f` throws, or "".
template <typename F>
std::string ErrorOf(F f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

ShardContents Group(const std::string& name, const std::string& archive) {
  TarScanner scanner(name, Bytes(archive), archive.size());
  return GroupShardMembers(scanner);
}

std::string GroupError(const std::string& archive) {
  return ErrorOf([&] { Group("train/shard-000001.tar", archive); });
}

// Samples KEY.png (bytes "png<i>") + KEY.cls (label) for keys first..first+n-1.
void AddSamples(TarWriter& tar, int first, int n, int classes = 10) {
  for (int i = first; i < first + n; ++i) {
    char key[16];
    std::snprintf(key, sizeof(key), "%06d", i);
    tar.Add(std::string(key) + ".png", "png" + std::to_string(i));
    tar.Add(std::string(key) + ".cls", std::to_string(i % classes) + "\n");
  }
}

TEST(TarScanner, GivesEveryMembersNameAndWhereItsDataIs) {
  TarWriter tar;
  tar.Add("dir", "", '5');
  tar.Add("a.txt", "hello");
  const size_t b_header = tar.size();
  tar.Add("sub/b.bin", std::string(700, 'x'));
  const std::string long_name = std::string(120, 'n') + ".jpg";
  tar.Add(long_name, "jpeg!");
  tar.Add("link", "", '2');
  const std::string archive = tar.Finish();

  TarScanner scanner("t.tar", Bytes(archive), archive.size());
  std::vector<TarMember> members;
  while (auto m = scanner.Next()) members.push_back(*m);
  ASSERT_EQ(members.size(), 4u);  // the directory is skipped
  EXPECT_EQ(members[0].name, "a.txt");
  EXPECT_EQ(scanner.Data(members[0]), "hello");
  EXPECT_EQ(members[1].name, "sub/b.bin");
  EXPECT_EQ(members[1].header_offset, b_header);
  EXPECT_EQ(members[1].data_offset, b_header + 512);
  EXPECT_EQ(members[1].size, 700u);
  EXPECT_EQ(members[2].name, long_name);  // from the pax header
  EXPECT_EQ(scanner.Data(members[2]), "jpeg!");
  EXPECT_TRUE(members[2].regular);
  EXPECT_EQ(members[3].name, "link");
  EXPECT_FALSE(members[3].regular);
  EXPECT_FALSE(scanner.Next().has_value());  // stays at the end
}

TEST(TarScanner, OneEndBlockIsEnoughAndWhatFollowsItIsNotRead) {
  TarWriter tar;
  tar.Add("a.txt", "a");
  const std::string archive = tar.Finish(1) + "garbage that is not a header";
  TarScanner scanner("t.tar", Bytes(archive), archive.size());
  ASSERT_TRUE(scanner.Next().has_value());
  EXPECT_FALSE(scanner.Next().has_value());
}

TEST(TarScanner, TruncationIsTypedWithWhereItHappened) {
  TarWriter tar;
  tar.Add("a.txt", "aaaa");
  const size_t b_header = tar.size();
  tar.Add("b.png", std::string(2000, 'b'));
  const std::string whole = tar.Finish();

  struct Case {
    size_t cut;
    std::string expect;
    std::string member;
  };
  for (const Case& c : {Case{b_header + 512 + 100,
                             "inside member 'b.png', whose header at byte "
                             "offset 1024 says 2000 bytes",
                             "b.png"},
                        Case{b_header + 200, "inside the tar header at byte offset 1024", ""},
                        Case{b_header, "without the end-of-archive block", ""}}) {
    const std::string cut = whole.substr(0, c.cut);
    TarScanner scanner("t.tar", Bytes(cut), cut.size());
    try {
      while (scanner.Next()) {
      }
      ADD_FAILURE() << "no error for a cut at " << c.cut;
    } catch (const TarError& e) {
      EXPECT_EQ(e.kind(), TarError::Kind::kTruncated);
      EXPECT_NE(std::string(e.what()).find("t.tar: ends at byte " + std::to_string(c.cut)),
                std::string::npos)
          << e.what();
      EXPECT_NE(e.reason().find(c.expect), std::string::npos) << e.what();
      EXPECT_EQ(e.member(), c.member);
    }
  }
}

TEST(TarScanner, ACorruptHeaderIsTypedWithItsOffset) {
  TarWriter tar;
  tar.Add("a.txt", "aaaa");
  const size_t b_header = tar.size();
  tar.Add("b.txt", "bbbb");
  std::string archive = tar.Finish();

  std::string flipped = archive;
  flipped[b_header + 10] ^= 0x20;  // a byte of the name: the checksum no longer matches
  std::string not_octal = archive;
  not_octal[b_header + 124] = 'z';  // the size field
  for (const auto& [bytes, why] : {std::pair{flipped, "(checksum mismatch)"},
                                   std::pair{not_octal, "is not an octal number"}}) {
    TarScanner scanner("t.tar", Bytes(bytes), bytes.size());
    ASSERT_TRUE(scanner.Next().has_value());
    try {
      scanner.Next();
      ADD_FAILURE() << "no error";
    } catch (const TarError& e) {
      EXPECT_EQ(e.kind(), TarError::Kind::kCorrupt);
      EXPECT_EQ(e.offset(), b_header);
      EXPECT_NE(std::string(e.what()).find("t.tar: corrupt tar header at byte offset 1024"),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  }
}

TEST(WebDatasetIndex, MemberNamesSplitAsWebDatasetSplitsThem) {
  std::string key, ext;
  ASSERT_TRUE(SplitMemberName("000123.png", &key, &ext));
  EXPECT_EQ(key, "000123");
  EXPECT_EQ(ext, "png");
  ASSERT_TRUE(SplitMemberName("n01440764/img.seg.JPG", &key, &ext));
  EXPECT_EQ(key, "n01440764/img");
  EXPECT_EQ(ext, "seg.jpg");
  ASSERT_TRUE(SplitMemberName("a.b/c.cls", &key, &ext));  // a dot in a folder is not the base's
  EXPECT_EQ(key, "a.b/c");
  EXPECT_EQ(ext, "cls");
  EXPECT_FALSE(SplitMemberName("README", &key, &ext));
  EXPECT_FALSE(SplitMemberName("dir/.hidden", &key, &ext));
}

TEST(WebDatasetIndex, ClassIndicesAreDecimalIntegersBelowTheLimit) {
  uint32_t label = 99;
  EXPECT_EQ(ParseClassIndex("3", &label), "");
  EXPECT_EQ(label, 3u);
  EXPECT_EQ(ParseClassIndex(" 17\n", &label), "");
  EXPECT_EQ(label, 17u);
  EXPECT_EQ(ParseClassIndex("999999", &label), "");
  EXPECT_EQ(label, 999999u);
  for (const char* bad : {"cat", "", "\n", "-1", "1.5", "+2", "0x10", "3 4"}) {
    EXPECT_EQ(ParseClassIndex(bad, &label), "is not a decimal integer") << bad;
  }
  for (const char* big : {"1000000", "4294967295", "99999999999999999999999"}) {
    EXPECT_EQ(ParseClassIndex(big, &label), "is out of range 0..999999") << big;
  }
}

TEST(WebDatasetIndex, MembersOfOneKeyMakeASampleAtTheImagesOffset) {
  TarWriter tar;
  tar.Add("000000.cls", "4");  // the label may come first
  const size_t image0 = tar.size();
  tar.Add("000000.jpg", "jpeg bytes");
  tar.Add("000000.json", "{}");  // ignored, the sample stands
  const size_t image1 = tar.size();
  tar.Add("sub/000001.PNG", "png bytes!");
  tar.Add("sub/000001.cls", "7\n");
  tar.Add("000002.txt", "a caption without an image: metadata, ignored");
  tar.Add("README", "no extension: skipped as WebDataset skips it");
  const size_t image3 = tar.size();
  tar.Add("000003.jpeg", "j");
  tar.Add("000003.cls", "0");
  const ShardContents contents = Group("train/shard-000000.tar", tar.Finish());
  ASSERT_EQ(contents.samples.size(), 3u);
  EXPECT_EQ(contents.samples[0], (ShardSample{0, image0 + 512, 10, 4}));
  EXPECT_EQ(contents.samples[1], (ShardSample{0, image1 + 512, 10, 7}));
  EXPECT_EQ(contents.samples[2], (ShardSample{0, image3 + 512, 1, 0}));
  EXPECT_EQ(contents.ignored, 3u);
  EXPECT_EQ(contents.headers_read, 10);  // nine members and the end block
}

TEST(WebDatasetIndex, AnImageWithoutALabelIsAnErrorNamingTheShardAndTheSample) {
  TarWriter tar;
  AddSamples(tar, 0, 2);
  const size_t at = tar.size();
  tar.Add("000002.jpg", "j");
  AddSamples(tar, 3, 1);
  const std::string error = GroupError(tar.Finish());
  EXPECT_NE(error.find("train/shard-000001.tar: sample '000002' (000002.jpg at byte offset " +
                       std::to_string(at) + ") has no label: every image needs 000002.cls"),
            std::string::npos)
      << error;
}

TEST(WebDatasetIndex, ALabelWithoutAnImageTwoImagesOrTwoLabelsAreErrors) {
  TarWriter no_image;
  no_image.Add("000000.cls", "1");
  no_image.Add("000000.webp", "an image of a kind we do not decode");
  EXPECT_NE(GroupError(no_image.Finish())
                .find("train/shard-000001.tar: sample '000000' (000000.cls at byte offset 0) "
                      "has a label but no .jpg, .jpeg or .png image"),
            std::string::npos);
  TarWriter two_images;
  two_images.Add("000000.jpg", "j");
  two_images.Add("000000.png", "p");
  two_images.Add("000000.cls", "1");
  EXPECT_NE(GroupError(two_images.Finish())
                .find("sample '000000' at byte offset 1024 has two images, 000000.jpg and "
                      "000000.png"),
            std::string::npos);
  TarWriter two_labels;
  two_labels.Add("000000.jpg", "j");
  two_labels.Add("000000.cls", "1");
  two_labels.Add("000000.CLS", "2");
  EXPECT_NE(GroupError(two_labels.Finish()).find("has two labels"), std::string::npos);
}

TEST(WebDatasetIndex, ALabelThatIsNotANumberOrOutOfRangeIsAnError) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"cat\n", "'cat?', which is not a decimal integer"},
      {"1000000", "'1000000', which is out of range 0..999999"},
      {"-3", "'-3', which is not a decimal integer"}};
  for (const auto& [text, why] : cases) {
    TarWriter tar;
    AddSamples(tar, 0, 1);
    tar.Add("000001.png", "p");
    const size_t at = tar.size();
    tar.Add("000001.cls", text);
    const std::string error = GroupError(tar.Finish());
    EXPECT_NE(error.find("train/shard-000001.tar: 000001.cls at byte offset " + std::to_string(at) +
                         " holds " + why),
              std::string::npos)
        << error;
  }
}

TEST(WebDatasetIndex, ATruncatedShardSaysHowManySamplesAreWholeAndWhatIsLost) {
  TarWriter tar;
  AddSamples(tar, 0, 3);
  tar.Add("000003.png", std::string(3000, 'p'));
  const size_t label3 = tar.size();
  tar.Add("000003.cls", "3");
  AddSamples(tar, 4, 2);
  const std::string whole = tar.Finish();

  // Inside the image of sample 3.
  std::string error = GroupError(whole.substr(0, label3 - 1000));
  EXPECT_NE(error.find("train/shard-000001.tar is truncated: it ends at byte " +
                       std::to_string(label3 - 1000) + " inside member '000003.png'"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("3 samples before the cut are whole; the sample of '000003.png' at the "
                       "cut is lost, and whatever followed it (copy the shard again)"),
            std::string::npos)
      << error;
  // Inside its label's header: the image was read, the sample is not whole.
  error = GroupError(whole.substr(0, label3 + 100));
  EXPECT_NE(error.find("3 samples before the cut are whole; sample '000003' at the cut is lost"),
            std::string::npos)
      << error;
  // At a member boundary, where only the missing end block tells.
  error = GroupError(whole.substr(0, label3 + 1024));
  EXPECT_NE(error.find("without the end-of-archive block"), std::string::npos) << error;
  EXPECT_NE(error.find("4 samples before the cut are whole; whatever followed them is lost"),
            std::string::npos)
      << error;
}

TEST(WebDatasetIndex, ACorruptHeaderIsAnErrorNamingItsOffset) {
  TarWriter tar;
  AddSamples(tar, 0, 2);
  const size_t at = tar.size();
  AddSamples(tar, 2, 2);
  std::string archive = tar.Finish();
  archive[at + 3] ^= 1;
  const std::string error = GroupError(archive);
  EXPECT_NE(
      error.find("train/shard-000001.tar: corrupt tar header at byte offset " + std::to_string(at) +
                 " (checksum mismatch); 2 samples before the cut are "
                 "readable, the rest of the shard is not"),
      std::string::npos)
      << error;
}

// Shards in memory, scanned by IndexShards through a counting scan.
struct FakeShards {
  std::map<std::string, std::string> archives;
  std::map<std::string, int> scans;

  ShardScan Scan() {
    return [this](const std::string& path) {
      ++scans[path];
      return Group(path, archives.at(path));
    };
  }
  void Put(const std::string& path, int first, int n, int classes = 10) {
    TarWriter tar;
    AddSamples(tar, first, n, classes);
    archives[path] = tar.Finish();
  }
  std::vector<ShardSplit> Listing() const {
    std::vector<ShardSplit> splits = {{"train", {}, {}}, {"test", {}, {}}};
    for (const auto& [path, bytes] : archives) {
      splits[path.rfind("test/", 0) == 0 ? 1 : 0].shards.push_back(Shard{path, bytes.size()});
    }
    return splits;
  }
};

TEST(WebDatasetIndex, SamplesAreNumberedShardByShard) {
  FakeShards shards;
  shards.Put("train/shard-000000.tar", 0, 3);
  shards.Put("train/shard-000001.tar", 3, 4);
  shards.Put("test/shard-000000.tar", 100, 2);
  const WebDatasetIndex index = IndexShards(shards.Listing(), nullptr, shards.Scan());
  ASSERT_EQ(index.splits.size(), 2u);
  const ShardSplit& train = index.splits[0];
  ASSERT_EQ(train.samples.size(), 7u);
  EXPECT_EQ(train.shards[0].samples, 3u);
  EXPECT_EQ(train.shards[1].samples, 4u);
  for (size_t i = 0; i < 7; ++i) {
    EXPECT_EQ(train.samples[i].shard, i < 3 ? 0u : 1u);
    EXPECT_EQ(train.samples[i].label, i);  // keys 0..6, label key % 10
  }
  EXPECT_EQ(index.num_classes(), 7);
  EXPECT_EQ(index.splits[1].samples.size(), 2u);
  EXPECT_EQ(index.key, ShardListingKey(shards.Listing()));
}

TEST(WebDatasetIndex, ATestLabelThatNoTrainingSampleHasIsAnError) {
  FakeShards shards;
  shards.Put("train/shard-000000.tar", 0, 3);  // labels 0..2
  shards.Put("test/shard-000000.tar", 5, 1);   // label 5
  const std::string error = ErrorOf([&] { IndexShards(shards.Listing(), nullptr, shards.Scan()); });
  EXPECT_NE(error.find("test/shard-000000.tar: the sample whose image is at byte offset 512 has "
                       "label 5, not a class of the training split (its labels are 0..2)"),
            std::string::npos)
      << error;
}

TEST(WebDatasetIndex, ASplitWithoutSamplesIsAnError) {
  FakeShards shards;
  shards.Put("train/shard-000000.tar", 0, 3);
  TarWriter metadata_only;
  metadata_only.Add("000000.json", "{}");
  shards.archives["test/shard-000000.tar"] = metadata_only.Finish();
  const std::string error = ErrorOf([&] { IndexShards(shards.Listing(), nullptr, shards.Scan()); });
  EXPECT_NE(error.find("test/ holds no sample"), std::string::npos) << error;
}

TEST(WebDatasetIndex, OnlyShardsThatChangedAreScannedAgain) {
  FakeShards shards;
  shards.Put("train/shard-000000.tar", 0, 3);
  shards.Put("train/shard-000001.tar", 3, 3);
  shards.Put("test/shard-000000.tar", 0, 2);
  WebDatasetIndex first = IndexShards(shards.Listing(), nullptr, shards.Scan());
  first.SetStatistics(ChannelStatistics{32, {0.5f, 0.5f, 0.5f}, {0.2f, 0.2f, 0.2f}});

  // The test split changes: the training shards' samples and statistics stay.
  shards.scans.clear();
  shards.Put("test/shard-000001.tar", 2, 2);
  WebDatasetIndex second = IndexShards(shards.Listing(), &first, shards.Scan());
  EXPECT_EQ(shards.scans, (std::map<std::string, int>{{"test/shard-000001.tar", 1}}));
  EXPECT_EQ(second.splits[0].samples, first.splits[0].samples);
  EXPECT_EQ(second.splits[1].samples.size(), 4u);
  EXPECT_EQ(second.splits[1].samples[3].shard, 1u);
  EXPECT_NE(second.StatisticsFor(32), nullptr);
  EXPECT_EQ(DescribeShardChange(first.splits, second.splits),
            "1 shard added, 0 removed, 0 changed in size");

  // A training shard grows: it alone is scanned, the statistics are gone.
  shards.scans.clear();
  shards.Put("train/shard-000001.tar", 3, 5);
  const WebDatasetIndex third = IndexShards(shards.Listing(), &second, shards.Scan());
  EXPECT_EQ(shards.scans, (std::map<std::string, int>{{"train/shard-000001.tar", 1}}));
  EXPECT_EQ(third.splits[0].samples.size(), 8u);
  EXPECT_EQ(third.StatisticsFor(32), nullptr);
  EXPECT_EQ(DescribeShardChange(second.splits, third.splits),
            "0 shards added, 0 removed, 1 changed in size");
}

TEST(WebDatasetIndex, TheKeyChangesWithAShardAddedRemovedRenamedOrResizedOnly) {
  std::vector<ShardSplit> base = {{"train", {{"train/a.tar", 10240}, {"train/b.tar", 20480}}, {}},
                                  {"test", {{"test/a.tar", 10240}}, {}}};
  const std::string key = ShardListingKey(base);
  EXPECT_EQ(key.size(), 32u);
  std::vector<ShardSplit> same = base;
  same[0].shards[0].samples = 99;  // what indexing learns is not part of the listing
  EXPECT_EQ(ShardListingKey(same), key);
  auto changed = [&](auto edit) {
    std::vector<ShardSplit> other = base;
    edit(other);
    return ShardListingKey(other) != key;
  };
  EXPECT_TRUE(changed([](auto& s) { s[0].shards.push_back({"train/c.tar", 512}); }));
  EXPECT_TRUE(changed([](auto& s) { s[0].shards.pop_back(); }));
  EXPECT_TRUE(changed([](auto& s) { s[0].shards[1].path = "train/c.tar"; }));
  EXPECT_TRUE(changed([](auto& s) { s[0].shards[1].size += 512; }));
  EXPECT_TRUE(changed([](auto& s) { s[1].name = "val"; }));
}

WebDatasetIndex SmallIndex() {
  FakeShards shards;
  shards.Put("train/shard-000000.tar", 0, 5);
  shards.Put("train/shard-000001.tar", 5, 5);
  shards.Put("test/shard-000000.tar", 0, 3);
  WebDatasetIndex index = IndexShards(shards.Listing(), nullptr, shards.Scan());
  index.SetStatistics(ChannelStatistics{32, {0.49f, 0.48f, 0.44f}, {0.24f, 0.25f, 0.26f}});
  index.SetStatistics(ChannelStatistics{64, {0.5f, 0.5f, 0.5f}, {0.2f, 0.2f, 0.2f}});
  return index;
}

TEST(WebDatasetIndex, EncodesAndDecodesEveryField) {
  const WebDatasetIndex index = SmallIndex();
  const WebDatasetIndex back = DecodeWebDatasetIndex(EncodeWebDatasetIndex(index));
  EXPECT_EQ(back.key, index.key);
  ASSERT_EQ(back.splits.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(back.splits[k].name, index.splits[k].name);
    EXPECT_EQ(back.splits[k].samples, index.splits[k].samples);
    ASSERT_EQ(back.splits[k].shards.size(), index.splits[k].shards.size());
    for (size_t s = 0; s < back.splits[k].shards.size(); ++s) {
      EXPECT_EQ(back.splits[k].shards[s].path, index.splits[k].shards[s].path);
      EXPECT_EQ(back.splits[k].shards[s].size, index.splits[k].shards[s].size);
      EXPECT_EQ(back.splits[k].shards[s].samples, index.splits[k].shards[s].samples);
    }
  }
  ASSERT_NE(back.StatisticsFor(64), nullptr);
  EXPECT_EQ(back.StatisticsFor(32)->mean, index.StatisticsFor(32)->mean);
  EXPECT_EQ(back.StatisticsFor(32)->std, index.StatisticsFor(32)->std);
}

TEST(WebDatasetIndex, ADamagedOrForeignFileIsRefusedWithTheReason) {
  const std::string bytes = EncodeWebDatasetIndex(SmallIndex());
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THROW(DecodeWebDatasetIndex(bytes.substr(0, n)), IndexFormatError) << n;
  }
  for (size_t i = 0; i < bytes.size(); i += 7) {
    std::string flipped = bytes;
    flipped[i] ^= 0x10;
    EXPECT_THROW(DecodeWebDatasetIndex(flipped), IndexFormatError) << i;
  }
  const std::string error = ErrorOf([] { DecodeWebDatasetIndex(EncodeIndex(ImageIndex{})); });
  EXPECT_EQ(error, "not a webdataset index (no ELWDSIDX magic at its start)");
  EXPECT_NE(ErrorOf([&] {
              DecodeWebDatasetIndex(bytes + "x");
            }).find("bytes after the header, which says"),
            std::string::npos);
}

}  // namespace
}  // namespace elastic::trainer
