// Checkpoint files: round trip, every kind of corruption named, and a failed
// write that leaves the previous checkpoint intact.
#include "trainer/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

namespace elastic::trainer {
namespace {

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string pattern = std::string(tmp ? tmp : "/tmp") + "/ckptXXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    path_ = CheckpointPath(dir_);
  }

  std::string FileBytes() {
    std::ifstream in(path_, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  void SetFileBytes(const std::string& bytes) {
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << bytes;
  }
  std::string ReadError() {
    try {
      ReadCheckpointFile(path_);
    } catch (const CheckpointError& e) {
      return e.what();
    }
    return "";
  }

  std::string dir_, path_;
  const std::string payload_ =
      std::string("model and optimizer \0 bytes", 27) + std::string(1000, 'x');
};

TEST_F(CheckpointTest, RoundTripLeavesNoTemporaryFile) {
  WriteCheckpointFile(path_, payload_);
  EXPECT_EQ(ReadCheckpointFile(path_), payload_);
  EXPECT_NE(::access((path_ + ".tmp").c_str(), F_OK), 0);
  WriteCheckpointFile(path_, "second");
  EXPECT_EQ(ReadCheckpointFile(path_), "second");
}

TEST_F(CheckpointTest, FlippedPayloadByteIsAChecksumError) {
  WriteCheckpointFile(path_, payload_);
  std::string bytes = FileBytes();
  bytes[bytes.size() - 10] ^= 0x01;
  SetFileBytes(bytes);
  const std::string error = ReadError();
  EXPECT_NE(error.find("checksum mismatch"), std::string::npos) << error;
  EXPECT_NE(error.find(path_), std::string::npos) << error;
}

TEST_F(CheckpointTest, TruncatedFileNamesTheSizes) {
  WriteCheckpointFile(path_, payload_);
  SetFileBytes(FileBytes().substr(0, FileBytes().size() - 100));
  const std::string error = ReadError();
  EXPECT_NE(error.find("truncated or corrupt"), std::string::npos) << error;
  SetFileBytes(FileBytes().substr(0, 20));
  EXPECT_NE(ReadError().find("shorter than the header"), std::string::npos);
}

TEST_F(CheckpointTest, ForeignFileAndOtherVersionAreRejected) {
  SetFileBytes(std::string(200, 'z'));
  EXPECT_NE(ReadError().find("not a checkpoint of this trainer"), std::string::npos);
  WriteCheckpointFile(path_, payload_);
  std::string bytes = FileBytes();
  bytes[8] = 7;  // the version field follows the 8-byte magic
  SetFileBytes(bytes);
  EXPECT_NE(ReadError().find("format version 7"), std::string::npos) << ReadError();
}

TEST_F(CheckpointTest, MissingFileIsAClearError) {
  EXPECT_NE(ReadError().find("cannot open"), std::string::npos);
}

TEST_F(CheckpointTest, FailedWriteKeepsTheGoodCheckpoint) {
  WriteCheckpointFile(path_, payload_);
  // A directory where the temporary file must go makes the write fail.
  ASSERT_EQ(::mkdir((path_ + ".tmp").c_str(), 0755), 0);
  EXPECT_THROW(WriteCheckpointFile(path_, "new state"), CheckpointError);
  EXPECT_EQ(ReadCheckpointFile(path_), payload_);
  ASSERT_EQ(::rmdir((path_ + ".tmp").c_str()), 0);
  // A write into a directory that does not exist fails and touches nothing.
  EXPECT_THROW(WriteCheckpointFile(dir_ + "/missing/checkpoint.ckpt", "x"), CheckpointError);
  EXPECT_EQ(ReadCheckpointFile(path_), payload_);
}

}  // namespace
}  // namespace elastic::trainer
