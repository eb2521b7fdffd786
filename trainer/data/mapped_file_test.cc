#include "trainer/data/mapped_file.h"

#include <gtest/gtest.h>

#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "trainer/data/test_files.h"

namespace elastic::trainer {
namespace {

using testing::ScratchDir;
using testing::WriteFile;

// The message of the std::runtime_error that `f` throws, or "" when it throws none.
template <typename F>
std::string ErrorOf(F f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

// The permissions column ("r--s") of this process's mapping of `path`, or ""
// when the file is not mapped.
std::string MappingOf(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.size() >= path.size() &&
        line.compare(line.size() - path.size(), path.size(), path) == 0) {
      const size_t space = line.find(' ');
      return line.substr(space + 1, 4);
    }
  }
  return "";
}

std::vector<uint8_t> Bytes(size_t n) {
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(i * 13 + 5);
  return out;
}

TEST(MappedFile, MapsTheWholeFileReadOnlyAndShared) {
  ScratchDir dir;
  const std::vector<uint8_t> bytes = Bytes(10000);  // more than two pages
  WriteFile(dir / "a.bin", bytes);
  const MappedFile file(dir / "a.bin");
  EXPECT_EQ(file.path(), dir / "a.bin");
  ASSERT_EQ(file.size(), bytes.size());
  EXPECT_EQ(std::vector<uint8_t>(file.data(), file.data() + file.size()), bytes);
  // Read-only and shared: the page cache's pages, one copy for every process.
  EXPECT_EQ(MappingOf(dir / "a.bin"), "r--s");
  file.Advise(MappedFile::Access::kRandom);  // a hint: the bytes stay the same
  EXPECT_EQ(file.data()[9999], bytes[9999]);
}

TEST(MappedFile, AnEmptyFileMapsNothing) {
  ScratchDir dir;
  WriteFile(dir / "empty.bin", {});
  const MappedFile file(dir / "empty.bin");
  EXPECT_EQ(file.size(), 0u);
  EXPECT_EQ(file.data(), nullptr);
  EXPECT_EQ(MappingOf(dir / "empty.bin"), "");
}

TEST(MappedFile, UnmapsWhenItGoesAwayAndMovesTheMapping) {
  ScratchDir dir;
  WriteFile(dir / "a.bin", Bytes(100));
  WriteFile(dir / "b.bin", Bytes(200));
  {
    const MappedFile a(dir / "a.bin");
    EXPECT_NE(MappingOf(dir / "a.bin"), "");
  }
  EXPECT_EQ(MappingOf(dir / "a.bin"), "");

  MappedFile a(dir / "a.bin");
  MappedFile moved(std::move(a));
  EXPECT_EQ(a.size(), 0u);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(moved.size(), 100u);
  EXPECT_EQ(moved.data()[99], Bytes(100)[99]);

  MappedFile b(dir / "b.bin");
  b = std::move(moved);  // b's own mapping is released
  EXPECT_EQ(MappingOf(dir / "b.bin"), "");
  EXPECT_EQ(b.path(), dir / "a.bin");
  EXPECT_EQ(b.size(), 100u);
  EXPECT_NE(MappingOf(dir / "a.bin"), "");
}

TEST(MappedFile, ErrorsNameTheFile) {
  ScratchDir dir;
  EXPECT_EQ(ErrorOf([&] { MappedFile(dir / "absent.bin"); }),
            dir / "absent.bin" + ": no such file");
  EXPECT_EQ(ErrorOf([&] { MappedFile(dir.path()); }), dir.path() + ": not a regular file");
  WriteFile(dir / "a.bin", Bytes(10));
  EXPECT_EQ(ErrorOf([&] { MappedFile(dir / "a.bin/x"); }),
            dir / "a.bin/x" + ": cannot open (Not a directory)");
}

}  // namespace
}  // namespace elastic::trainer
