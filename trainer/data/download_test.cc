// The download path without a network: archives made here with GNU tar are
// served from file:// URLs, with the URL and the MD5 injected.
#include "trainer/data/download.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "trainer/data/cifar10.h"
#include "trainer/data/dataset.h"
#include "trainer/data/tar_gz.h"
#include "trainer/data/test_files.h"

namespace elastic::trainer {
namespace {

namespace fs = std::filesystem;
using testing::CifarRecords;
using testing::ScratchDir;
using testing::WriteFile;

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
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

std::vector<std::string> Listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Makes <root>/<archive name> from generated batch files under `member_dir`
// (a path inside the archive), with GNU tar in the given --format.
std::string MakeArchive(const std::string& root, const std::string& member_dir,
                        const std::string& format = "gnu", bool with_test_batch = true) {
  const std::string tree = root + "/tree";
  fs::create_directories(tree + "/" + member_dir);
  for (int i = 1; i <= 5; ++i) {
    WriteFile(tree + "/" + member_dir + "/data_batch_" + std::to_string(i) + ".bin",
              CifarRecords(i, {static_cast<uint8_t>(i)}));
  }
  if (with_test_batch) WriteFile(tree + "/" + member_dir + "/test_batch.bin", CifarRecords(2, {7}));
  WriteFile(tree + "/" + member_dir + "/readme.html", {'h', 'i'});
  const std::string archive = root + "/cifar-10-binary.tar.gz";
  const std::string command =
      "tar --format=" + format + " -czf '" + archive + "' -C '" + tree + "' '" + member_dir + "'";
  if (std::system(command.c_str()) != 0) throw std::runtime_error("failed: " + command);
  return archive;
}

bool HaveTar() { return std::system("tar --version > /dev/null 2>&1") == 0; }

TEST(Download, Md5OfFile) {
  ScratchDir dir;
  WriteFile(dir / "abc", {'a', 'b', 'c'});
  EXPECT_EQ(Md5OfFile(dir / "abc"), "900150983cd24fb0d6963f7d28e17f72");  // RFC 1321's test suite
  WriteFile(dir / "empty", {});
  EXPECT_EQ(Md5OfFile(dir / "empty"), "d41d8cd98f00b204e9800998ecf8427e");
}

TEST(Download, DownloadFileCopiesAndFailsCleanly) {
  ScratchDir dir;
  std::vector<uint8_t> bytes(3 << 20);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7);
  WriteFile(dir / "source", bytes);
  DownloadFile("file://" + (dir / "source"), dir / "copy", /*show_progress=*/true);
  EXPECT_EQ(testing::ReadFile(dir / "copy"), bytes);

  const std::string error =
      ErrorOf([&] { DownloadFile("file://" + (dir / "no-such-file"), dir / "copy2", false); });
  EXPECT_TRUE(Contains(error, "no-such-file")) << error;
  EXPECT_EQ(Listing(dir.path()), (std::vector<std::string>{"copy", "source"}));  // no temp left
}

TEST(Download, WrongMd5IsRejectedAndNothingIsKept) {
  if (!HaveTar()) GTEST_SKIP() << "GNU tar is needed to make the test archive";
  ScratchDir src, cache;
  const std::string archive = MakeArchive(src.path(), "cifar-10-batches-bin");
  const std::string error = ErrorOf([&] {
    EnsureCifar10(cache.path(), {"file://" + archive, "0123456789abcdef0123456789abcdef"}, false);
  });
  EXPECT_TRUE(Contains(error, "MD5 mismatch") && Contains(error, Md5OfFile(archive)) &&
              Contains(error, "0123456789abcdef0123456789abcdef"))
      << error;
  // Only the lock file: no archive, no batches, no temporaries to be mistaken for data.
  EXPECT_EQ(Listing(cache.path()), (std::vector<std::string>{".lock"}));
}

TEST(Download, RightMd5IsUnpackedAndReused) {
  if (!HaveTar()) GTEST_SKIP() << "GNU tar is needed to make the test archive";
  ScratchDir src, cache;
  const std::string archive = MakeArchive(src.path(), "cifar-10-batches-bin");
  const DownloadSource source{"file://" + archive, Md5OfFile(archive)};
  // What a process killed mid-download and mid-unpack leaves behind is cleaned up.
  WriteFile(cache / "cifar-10-binary.tar.gz.part.99999", {1, 2, 3});
  fs::create_directories(cache / ".unpack.99999");
  WriteFile(cache / ".unpack.99999/data_batch_1.bin", {1});

  const std::string data_dir = EnsureCifar10(cache.path(), source, /*show_progress=*/true);
  EXPECT_EQ(data_dir, cache / "cifar-10-batches-bin");
  EXPECT_EQ(Listing(data_dir),
            (std::vector<std::string>{"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                      "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"}));
  EXPECT_EQ(LoadCifar10(data_dir, Split::kTrain)->size(), 1 + 2 + 3 + 4 + 5);
  EXPECT_EQ(LoadCifar10(data_dir, Split::kTest)->label(1), 7);
  EXPECT_EQ(Listing(cache.path()),
            (std::vector<std::string>{".lock", "cifar-10-batches-bin", "cifar-10-binary.tar.gz"}));

  // Next time nothing is fetched: the source is gone and it still works.
  fs::remove(archive);
  EXPECT_EQ(EnsureCifar10(cache.path(), source, false), data_dir);

  // And through LoadDataset with an empty --data-dir, from $ELASTIC_CACHE/cifar10.
  ScratchDir root;
  fs::rename(cache.path(), root / "cifar10");
  fs::create_directories(cache.path());  // for ScratchDir's cleanup
  ASSERT_EQ(setenv("ELASTIC_CACHE", root.path().c_str(), 1), 0);
  EXPECT_EQ(CifarCacheDir(), root / "cifar10");
  EXPECT_EQ(LoadDataset("cifar10", "", Split::kTrain)->size(), 15);
  unsetenv("ELASTIC_CACHE");
}

TEST(Download, NoNetworkNamesTheWaysOut) {
  ScratchDir cache;
  for (const std::string url : {"file:///nonexistent/cifar-10-binary.tar.gz",
                                "http://127.0.0.1:1/cifar-10-binary.tar.gz"}) {
    const std::string error = ErrorOf([&] {
      EnsureCifar10(cache.path(), {url, kCifar10Md5}, false);
    });
    EXPECT_TRUE(Contains(error, url)) << error;
    EXPECT_TRUE(Contains(error, "--data-dir")) << error;
    EXPECT_TRUE(Contains(error, "--dataset fashion-mnist")) << error;
    EXPECT_EQ(Listing(cache.path()), (std::vector<std::string>{".lock"}));
  }
}

TEST(Download, ArchiveWithoutTestBatchIsRejected) {
  if (!HaveTar()) GTEST_SKIP() << "GNU tar is needed to make the test archive";
  ScratchDir src, cache;
  const std::string archive =
      MakeArchive(src.path(), "cifar-10-batches-bin", "gnu", /*with_test_batch=*/false);
  const std::string error = ErrorOf([&] {
    EnsureCifar10(cache.path(), {"file://" + archive, Md5OfFile(archive)}, false);
  });
  EXPECT_TRUE(Contains(error, "holds no test_batch.bin")) << error;
  EXPECT_FALSE(fs::exists(cache / "cifar-10-batches-bin"));
}

TEST(TarGz, LongNamesInGnuAndPaxFormats) {
  if (!HaveTar()) GTEST_SKIP() << "GNU tar is needed to make the test archive";
  // Over 100 characters: GNU tar writes an 'L' entry, pax an 'x' header.
  const std::string deep = std::string(60, 'a') + "/" + std::string(60, 'b');
  for (const std::string format : {"gnu", "pax", "ustar"}) {
    ScratchDir src, out;
    const std::string archive = MakeArchive(src.path(), deep, format);
    const std::vector<std::string> written = ExtractTarGz(
        archive, out.path(), [](const std::string& name) { return name != "readme.html"; });
    EXPECT_EQ(written.size(), 6u) << format;
    EXPECT_EQ(testing::ReadFile(out / "data_batch_3.bin"), CifarRecords(3, {3})) << format;
    EXPECT_FALSE(fs::exists(out / "readme.html")) << format;
  }
}

TEST(TarGz, TruncatedArchiveNamesTheOffset) {
  if (!HaveTar()) GTEST_SKIP() << "GNU tar is needed to make the test archive";
  ScratchDir src, out;
  const std::string archive = MakeArchive(src.path(), "cifar-10-batches-bin");
  // Re-compress the first 10,000 bytes of the tar stream as a complete gzip file.
  const std::string tar = src / "plain.tar";
  ASSERT_EQ(std::system(("gzip -dc '" + archive + "' | head -c 10000 > '" + tar + "'").c_str()), 0);
  testing::WriteGzip(src / "cut.tar.gz", testing::ReadFile(tar));
  const std::string error =
      ErrorOf([&] { ExtractTarGz(src / "cut.tar.gz", out.path(), [](auto&) { return true; }); });
  EXPECT_TRUE(Contains(error, "cut.tar.gz") && Contains(error, "truncated") &&
              Contains(error, "byte offset 10000"))
      << error;

  // A flipped byte in a header is caught by the header checksum.
  std::vector<uint8_t> bytes = testing::ReadFile(tar);
  bytes[10] ^= 0x20;
  testing::WriteGzip(src / "flipped.tar.gz", bytes);
  const std::string flipped = ErrorOf(
      [&] { ExtractTarGz(src / "flipped.tar.gz", out.path(), [](auto&) { return true; }); });
  EXPECT_TRUE(Contains(flipped, "checksum mismatch at byte offset 0")) << flipped;
}

}  // namespace
}  // namespace elastic::trainer
