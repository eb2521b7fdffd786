// Checkpoint files: round trip, every kind of corruption named, a failed
// write that leaves the previous checkpoint intact, and concurrent writers
// that never publish a torn file.
#include "trainer/checkpoint.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

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

  // The names in the checkpoint directory: stray temporary files show here.
  std::vector<std::string> DirectoryEntries() {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir_))
      names.push_back(entry.path().filename().string());
    return names;
  }

  std::string dir_, path_;
  const std::string payload_ =
      std::string("model and optimizer \0 bytes", 27) + std::string(1000, 'x');
};

TEST_F(CheckpointTest, RoundTripLeavesNoTemporaryFile) {
  WriteCheckpointFile(path_, payload_);
  EXPECT_EQ(ReadCheckpointFile(path_), payload_);
  WriteCheckpointFile(path_, "second");
  EXPECT_EQ(ReadCheckpointFile(path_), "second");
  EXPECT_EQ(DirectoryEntries(), std::vector<std::string>{"checkpoint.ckpt"});
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
  // A file size limit makes the write of a larger state fail half way
  // (EFBIG; SIGXFSZ ignored so that it is an error, not a kill).
  struct rlimit saved;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  struct rlimit small = saved;
  small.rlim_cur = 4096;
  const auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string error;
  try {
    WriteCheckpointFile(path_, std::string(64 * 1024, 'n'));
  } catch (const CheckpointError& e) {
    error = e.what();
  }
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &saved), 0);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_NE(error.find(path_), std::string::npos) << error;
  EXPECT_EQ(ReadCheckpointFile(path_), payload_);
  EXPECT_EQ(DirectoryEntries(), std::vector<std::string>{"checkpoint.ckpt"});

  // A write into a directory that does not exist fails and touches nothing.
  EXPECT_THROW(WriteCheckpointFile(dir_ + "/missing/checkpoint.ckpt", "x"), CheckpointError);
  EXPECT_EQ(ReadCheckpointFile(path_), payload_);
}

TEST_F(CheckpointTest, FailedRenameNamesThePathAndLeavesNoTemporary) {
  // A directory where the checkpoint should be: the rename over it fails.
  ASSERT_EQ(::mkdir(path_.c_str(), 0755), 0);
  try {
    WriteCheckpointFile(path_, payload_);
    FAIL() << "wrote over a directory";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find(path_), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rename"), std::string::npos) << e.what();
  }
  EXPECT_EQ(DirectoryEntries(), std::vector<std::string>{"checkpoint.ckpt"});
}

// A payload that names its writer and round, large enough that two writers'
// writes interleave.
std::string RoundPayload(int writer, int round) {
  std::string payload =
      "writer " + std::to_string(writer) + " round " + std::to_string(round) + ";";
  payload.resize(size_t{192} << 10, static_cast<char>('a' + writer));
  return payload;
}

bool IsSomeRoundPayload(const std::string& payload) {
  int writer = -1;
  int round = -1;
  if (std::sscanf(payload.c_str(), "writer %d round %d;", &writer, &round) != 2) return false;
  return payload == RoundPayload(writer, round);
}

// Two writers (the controller and rank 0 after a takeover, say) replace the
// same checkpoint at once while a reader loads it: every load finds a whole
// checkpoint of one writer, the file never vanishes, no temporary is left.
TEST_F(CheckpointTest, ConcurrentWritersNeverPublishATornCheckpoint) {
  constexpr int kWriters = 2;
  constexpr int kRounds = 150;
  WriteCheckpointFile(path_, RoundPayload(0, -1));
  std::mutex mutex;
  std::vector<std::string> errors;  // the first few
  int writer_errors = 0;
  int reader_errors = 0;
  auto record = [&](int* count, const std::string& error) {
    std::lock_guard<std::mutex> lock(mutex);
    ++*count;
    if (errors.size() < 3) errors.push_back(error);
  };
  std::atomic<int> writing{kWriters};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      for (int round = 0; round < kRounds; ++round) {
        try {
          WriteCheckpointFile(path_, RoundPayload(w, round));
        } catch (const std::exception& e) {
          record(&writer_errors, std::string("writer: ") + e.what());
        }
      }
      --writing;
    });
  }
  int loads = 0;
  while (writing.load() > 0) {
    try {
      if (!IsSomeRoundPayload(ReadCheckpointFile(path_)))
        record(&reader_errors, "reader: a mixed payload");
    } catch (const std::exception& e) {
      record(&reader_errors, std::string("reader: ") + e.what());
    }
    ++loads;
  }
  for (std::thread& writer : writers) writer.join();
  EXPECT_EQ(writer_errors, 0);
  EXPECT_EQ(reader_errors, 0) << "in " << loads << " loads";
  for (const std::string& error : errors) ADD_FAILURE() << error;
  EXPECT_GT(loads, 0);
  EXPECT_TRUE(IsSomeRoundPayload(ReadCheckpointFile(path_)));
  EXPECT_EQ(DirectoryEntries(), std::vector<std::string>{"checkpoint.ckpt"});
}

}  // namespace
}  // namespace elastic::trainer
