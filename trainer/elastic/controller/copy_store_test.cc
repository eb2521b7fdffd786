#include "trainer/elastic/controller/copy_store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "runtime/atomic_file.h"

namespace elastic::trainer {
namespace {

namespace fs = std::filesystem;

class CopyStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = std::getenv("TEST_TMPDIR");
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = (fs::path(base != nullptr ? base : "/tmp") /
            ("copy_store_test_" + std::string(info->name()) + "_" + std::to_string(::getpid())))
               .string();
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::set<std::string> Files() const {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_))
      names.insert(entry.path().filename().string());
    return names;
  }

  std::string dir_;
};

// Bytes with every value, and more than one page.
std::string StateBytes(int seed, size_t size = 100000) {
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>((i * 131 + seed) & 0xff);
  return bytes;
}

TEST(Sha256HexTest, KnownDigests) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_F(CopyStoreTest, WritesAWholeFileThatReadsBack) {
  const CopyStore store(dir_);
  const std::string bytes = StateBytes(1);
  const StoredCopy copy = store.Write({2, 640, 124}, bytes);
  EXPECT_EQ(copy.point, (StatePoint{2, 640, 124}));
  EXPECT_EQ(copy.sha256, Sha256Hex(bytes));
  EXPECT_EQ(copy.file, "copy-step124-" + copy.sha256.substr(0, 16));
  EXPECT_EQ(Files(), (std::set<std::string>{copy.file}));
  struct stat info;
  ASSERT_EQ(::stat((fs::path(dir_) / copy.file).c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u) << "the state is the user's model";
  EXPECT_EQ(store.Read(copy), bytes);
}

TEST_F(CopyStoreTest, TheSameStateTwiceIsTheSameFile) {
  const CopyStore store(dir_);
  const StoredCopy first = store.Write({0, 256, 8}, StateBytes(3));
  const StoredCopy again = store.Write({0, 256, 8}, StateBytes(3));
  EXPECT_TRUE(first == again);
  const StoredCopy other = store.Write({0, 256, 8}, StateBytes(4));
  EXPECT_NE(other.file, first.file) << "another state at the same step never replaces the first";
  EXPECT_EQ(Files().size(), 2u);
}

TEST_F(CopyStoreTest, AFlippedByteIsCorrupt) {
  const CopyStore store(dir_);
  const StoredCopy copy = store.Write({1, 0, 48}, StateBytes(5));
  {
    std::fstream file(fs::path(dir_) / copy.file, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(5000);
    file.put('\x7f' ^ StateBytes(5)[5000]);
  }
  try {
    store.Read(copy);
    FAIL() << "a corrupt copy was read";
  } catch (const StoredCopyError& e) {
    EXPECT_NE(std::string(e.what()).find("is corrupt"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(copy.file), std::string::npos) << e.what();
  }
}

TEST_F(CopyStoreTest, AMissingOrTruncatedCopyIsAnError) {
  const CopyStore store(dir_);
  const StoredCopy copy = store.Write({1, 0, 48}, StateBytes(6));
  fs::resize_file(fs::path(dir_) / copy.file, 4096);
  EXPECT_THROW(store.Read(copy), StoredCopyError);
  fs::remove(fs::path(dir_) / copy.file);
  try {
    store.Read(copy);
    FAIL() << "a missing copy was read";
  } catch (const StoredCopyError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be opened"), std::string::npos) << e.what();
  }
}

TEST_F(CopyStoreTest, AJournalCannotNameAFileOutsideTheDirectory) {
  const CopyStore store(dir_);
  for (const std::string name :
       {"../journal", "/etc/passwd", "journal", "copy-step1/../../x", ""}) {
    StoredCopy copy{{0, 0, 1}, name, Sha256Hex("")};
    try {
      store.Read(copy);
      ADD_FAILURE() << "read \"" << name << "\"";
    } catch (const StoredCopyError& e) {
      EXPECT_NE(std::string(e.what()).find("not a copy file"), std::string::npos) << e.what();
    }
  }
}

TEST_F(CopyStoreTest, RemoveAllButKeepsTheNamedCopyAndWhatIsNotACopy) {
  const CopyStore store(dir_);
  const StoredCopy old = store.Write({0, 0, 8}, StateBytes(7));
  const StoredCopy kept = store.Write({0, 0, 16}, StateBytes(8));
  std::ofstream(fs::path(dir_) / (kept.file + ".tmp-Ab12Cd")) << "a killed writer's leftover";
  std::ofstream(fs::path(dir_) / "journal") << "not a copy";
  EXPECT_EQ(store.RemoveAllBut(kept), 2);
  EXPECT_EQ(Files(), (std::set<std::string>{kept.file, "journal"}));
  EXPECT_EQ(store.Read(kept), StateBytes(8));
  EXPECT_EQ(store.RemoveAllBut(std::nullopt), 1);
  EXPECT_EQ(Files(), (std::set<std::string>{"journal"}));
  (void)old;
}

// The kernel refuses the write part-way, as on a full disk (here through
// RLIMIT_FSIZE, which binds root too: EFBIG where a full disk gives ENOSPC).
// The error names the file, no temporary file stays, and the copy the journal
// names is untouched.
TEST_F(CopyStoreTest, AWriteTheKernelRefusesLeavesTheEarlierCopyWhole) {
  const CopyStore store(dir_);
  const StoredCopy earlier = store.Write({0, 0, 8}, StateBytes(9, 10000));
  ::signal(SIGXFSZ, SIG_IGN);  // else the process is killed instead of write() failing
  struct rlimit saved;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  struct rlimit small = saved;
  small.rlim_cur = 64 * 1024;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string error;
  try {
    store.Write({0, 0, 16}, StateBytes(10, 1 << 20));
  } catch (const runtime::FileWriteError& e) {
    error = e.what();
  }
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &saved), 0);
  ASSERT_FALSE(error.empty()) << "a 1 MiB copy written under a 64 KiB file size limit";
  EXPECT_NE(error.find("copy-step16-"), std::string::npos) << error;
  EXPECT_EQ(Files(), (std::set<std::string>{earlier.file}));
  EXPECT_EQ(store.Read(earlier), StateBytes(9, 10000));
}

TEST_F(CopyStoreTest, ADirectoryThatCannotExistIsAWriteError) {
  fs::create_directories(dir_);
  std::ofstream(fs::path(dir_) / "file") << "x";
  const CopyStore store((fs::path(dir_) / "file" / "state").string());
  EXPECT_THROW(store.Write({0, 0, 8}, "bytes"), runtime::FileWriteError);
}

}  // namespace
}  // namespace elastic::trainer
