#include "trainer/elastic/controller/journal.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/elastic/protocol/control.capnp.h"

namespace elastic::trainer {
namespace {

namespace fs = std::filesystem;

class JournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = std::getenv("TEST_TMPDIR");
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = (fs::path(base != nullptr ? base : "/tmp") /
            ("journal_test_" + std::string(info->name()) + "_" + std::to_string(::getpid())))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add, ignored);
    fs::remove_all(dir_, ignored);
  }

  std::string ReadBytes() const {
    std::ifstream in(JournalPath(dir_), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  void WriteBytes(const std::string& bytes) const {
    std::ofstream out(JournalPath(dir_), std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(out.good());
  }
  std::set<std::string> Files(const std::string& dir) const {
    std::set<std::string> names;
    for (const fs::directory_entry& entry : fs::directory_iterator(dir))
      names.insert(entry.path().filename().string());
    return names;
  }
  // ReadJournal throws a runtime_error naming the journal and containing `what`.
  void ExpectReadFails(const std::string& what) const {
    try {
      ReadJournal(dir_);
      ADD_FAILURE() << "ReadJournal did not throw (expected \"" << what << "\")";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(JournalPath(dir_)), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  }

  std::string dir_;
};

JournalRecord FullRecord() {
  JournalRecord record;
  record.job_id = "0123456789abcdef";
  record.job.train.epochs = 12;
  record.job.train.model = "resnet \"x\" ünïcode";
  record.job.train.lr = 0.05;
  record.job.elastic.min_workers = 2;
  record.job.elastic.admit_at = "epoch";
  record.generation = 41;
  record.next_member_id = 17;
  record.next_node_id = 5;
  record.started = true;
  record.finished = true;
  record.exit_code = 3;
  record.newest = StatePoint{4, 1280, 977};
  record.world_of_newest = 3;
  record.checkpoint = StatePoint{3, 0, 800};
  record.printed_epoch = 4;
  record.run_dir = "/runs/20261128-101500";
  record.copy =
      StoredCopy{StatePoint{4, 1024, 970}, "copy-step970-0123456789abcdef", std::string(64, 'a')};
  return record;
}

void ExpectSame(const JournalRecord& a, const JournalRecord& b) {
  EXPECT_EQ(a.job_id, b.job_id);
  EXPECT_EQ(a.job.train.epochs, b.job.train.epochs);
  EXPECT_EQ(a.job.train.model, b.job.train.model);
  EXPECT_EQ(a.job.train.lr, b.job.train.lr);
  EXPECT_EQ(a.job.elastic.min_workers, b.job.elastic.min_workers);
  EXPECT_EQ(a.job.elastic.admit_at, b.job.elastic.admit_at);
  EXPECT_EQ(a.job_read_from_flags, b.job_read_from_flags);
  EXPECT_EQ(a.generation, b.generation);
  EXPECT_EQ(a.next_member_id, b.next_member_id);
  EXPECT_EQ(a.next_node_id, b.next_node_id);
  EXPECT_EQ(a.started, b.started);
  EXPECT_EQ(a.finished, b.finished);
  EXPECT_EQ(a.exit_code, b.exit_code);
  EXPECT_EQ(a.newest.has_value(), b.newest.has_value());
  if (a.newest && b.newest) {
    EXPECT_EQ(*a.newest, *b.newest) << ToString(*a.newest) << " vs " << ToString(*b.newest);
  }
  EXPECT_EQ(a.world_of_newest, b.world_of_newest);
  EXPECT_EQ(a.checkpoint.has_value(), b.checkpoint.has_value());
  if (a.checkpoint && b.checkpoint) {
    EXPECT_EQ(*a.checkpoint, *b.checkpoint)
        << ToString(*a.checkpoint) << " vs " << ToString(*b.checkpoint);
  }
  EXPECT_EQ(a.printed_epoch, b.printed_epoch);
  EXPECT_EQ(a.run_dir, b.run_dir);
  EXPECT_EQ(a.copy.has_value(), b.copy.has_value());
  if (a.copy && b.copy) {
    EXPECT_TRUE(*a.copy == *b.copy) << a.copy->file << " " << ToString(a.copy->point) << " vs "
                                    << b.copy->file << " " << ToString(b.copy->point);
  }
}

TEST_F(JournalTest, PathIsJournalInTheDirectory) {
  EXPECT_EQ(JournalPath("/var/lib/job"), "/var/lib/job/journal");
  EXPECT_EQ(JournalPath("/var/lib/job/"), "/var/lib/job/journal");
}

TEST_F(JournalTest, RoundTripsAFullRecord) {
  const JournalRecord record = FullRecord();
  WriteJournal(dir_, record);
  const std::optional<JournalRecord> read = ReadJournal(dir_);
  ASSERT_TRUE(read.has_value());
  ExpectSame(*read, record);
  EXPECT_EQ(ReadBytes().substr(0, 8), "ELJRNL01");
}

TEST_F(JournalTest, RoundTripsADefaultRecord) {
  WriteJournal(dir_, JournalRecord{});
  const std::optional<JournalRecord> read = ReadJournal(dir_);
  ASSERT_TRUE(read.has_value());
  ExpectSame(*read, JournalRecord{});
  EXPECT_FALSE(read->newest.has_value());
  EXPECT_FALSE(read->checkpoint.has_value());
  EXPECT_EQ(read->next_member_id, 1u);
  EXPECT_EQ(read->next_node_id, 1u);
}

TEST_F(JournalTest, KeepsAZeroStatePointApartFromNone) {
  JournalRecord record;
  record.newest = StatePoint{};
  WriteJournal(dir_, record);
  const std::optional<JournalRecord> read = ReadJournal(dir_);
  ASSERT_TRUE(read.has_value());
  ASSERT_TRUE(read->newest.has_value());
  EXPECT_EQ(*read->newest, StatePoint{});
  EXPECT_FALSE(read->checkpoint.has_value());
}

TEST_F(JournalTest, MissingFileIsNullopt) {
  EXPECT_FALSE(ReadJournal(dir_).has_value());
  EXPECT_FALSE(ReadJournal(dir_ + "/not/there").has_value());
}

TEST_F(JournalTest, TruncatedFileThrows) {
  WriteJournal(dir_, FullRecord());
  const std::string bytes = ReadBytes();
  ASSERT_GT(bytes.size(), 32u);
  WriteBytes(bytes.substr(0, bytes.size() - 8));
  ExpectReadFails("truncated");
  WriteBytes(bytes.substr(0, 30));
  ExpectReadFails("truncated");
  WriteBytes(bytes.substr(0, 10));  // inside the header
  ExpectReadFails("truncated");
  WriteBytes("");
  ExpectReadFails("truncated");
}

TEST_F(JournalTest, FlippedPayloadByteFailsTheChecksum) {
  WriteJournal(dir_, FullRecord());
  std::string bytes = ReadBytes();
  bytes[bytes.size() - 5] ^= 0x01;
  WriteBytes(bytes);
  ExpectReadFails("checksum mismatch");
}

TEST_F(JournalTest, FlippedChecksumByteFailsTheChecksum) {
  WriteJournal(dir_, FullRecord());
  std::string bytes = ReadBytes();
  bytes[9] ^= 0x40;
  WriteBytes(bytes);
  ExpectReadFails("checksum mismatch");
}

TEST_F(JournalTest, WrongMagicThrows) {
  WriteJournal(dir_, FullRecord());
  std::string bytes = ReadBytes();
  bytes.replace(0, 8, "NOTJRNL!");
  WriteBytes(bytes);
  ExpectReadFails("bad magic");
}

TEST_F(JournalTest, OtherVersionThrows) {
  WriteJournal(dir_, FullRecord());
  std::string bytes = ReadBytes();
  bytes.replace(0, 8, "ELJRNL02");
  WriteBytes(bytes);
  ExpectReadFails("version");
}

TEST_F(JournalTest, BytesAfterThePayloadThrow) {
  WriteJournal(dir_, FullRecord());
  WriteBytes(ReadBytes() + std::string(8, '\0'));
  ExpectReadFails("after the");
}

TEST_F(JournalTest, RandomGarbageThrows) {
  std::mt19937_64 random(12345);
  for (size_t size : {1u, 7u, 24u, 100u, 4096u}) {
    std::string bytes(size, '\0');
    for (char& c : bytes) c = static_cast<char>(random());
    WriteBytes(bytes);
    ExpectReadFails("");
  }
}

// A header that checks out over a payload Cap'n Proto cannot decode.
std::string WithHeader(const std::string& payload) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : payload) hash = (hash ^ c) * 0x100000001b3ull;
  std::string bytes = "ELJRNL01";
  for (uint64_t value : {hash, static_cast<uint64_t>(payload.size())})
    for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  return bytes + payload;
}

// A journal as versions before the typed spec wrote it: the job's flags as
// text in field 1 (now retiredFlags), no train/elastic.
std::string OldJournal(const std::vector<std::string>& flags) {
  capnp::MallocMessageBuilder message;
  proto::Journal::Builder journal = message.initRoot<proto::Journal>();
  journal.setJobId("00000000000000aa");
  journal.setGeneration(7);
  auto list = journal.getRetiredFlags().initAs<capnp::List<capnp::Text>>(
      static_cast<unsigned>(flags.size()));
  for (size_t i = 0; i < flags.size(); ++i) list.set(static_cast<unsigned>(i), flags[i]);
  const kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  const kj::ArrayPtr<const kj::byte> bytes = words.asBytes();
  return WithHeader(std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size()));
}

TEST_F(JournalTest, AJournalFromBeforeTheTypedSpecIsReadFromItsFlags) {
  WriteBytes(OldJournal({"--workers=2", "--model", "resnet8", "--epochs=12", "--min-workers=2"}));
  const std::optional<JournalRecord> read = ReadJournal(dir_);
  ASSERT_TRUE(read.has_value());
  EXPECT_TRUE(read->job_read_from_flags);
  EXPECT_EQ(read->generation, 7u);
  EXPECT_EQ(read->job.train.model, "resnet8");
  EXPECT_EQ(read->job.train.epochs, 12);
  EXPECT_EQ(read->job.elastic.min_workers, 2);
}

TEST_F(JournalTest, AJournalFromBeforeTheTypedSpecWithFlagsThisVersionLacksIsRefused) {
  WriteBytes(OldJournal({"--model=resnet8", "--no-such-flag=1"}));
  ExpectReadFails(
      "holds the flags of a job from an older version that this version cannot read "
      "(unknown flag --no-such-flag");
}

TEST_F(JournalTest, AJournalWithoutSettingsIsRefused) {
  capnp::MallocMessageBuilder message;
  message.initRoot<proto::Journal>().setJobId("00000000000000bb");
  const kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  const kj::ArrayPtr<const kj::byte> bytes = words.asBytes();
  WriteBytes(WithHeader(std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size())));
  ExpectReadFails("holds no job settings");
}

TEST_F(JournalTest, UndecodablePayloadWithAGoodChecksumThrows) {
  // The segment table claims one segment of 1000 words; 2 follow.
  std::string payload(24, '\0');
  payload[4] = static_cast<char>(1000 & 0xff);
  payload[5] = static_cast<char>(1000 >> 8);
  WriteBytes(WithHeader(payload));
  ExpectReadFails("does not decode");
}

TEST_F(JournalTest, RandomPayloadsWithGoodChecksumsNeverCrash) {
  std::mt19937_64 random(777);
  for (int round = 0; round < 300; ++round) {
    std::string payload(8 * (1 + random() % 16), '\0');
    for (char& c : payload) c = static_cast<char>(random());
    if (round % 2 == 0) {  // a plausible segment table, so the reader gets further
      payload.replace(0, 4, std::string(4, '\0'));
      const uint32_t words = static_cast<uint32_t>(payload.size() / 8 - 1);
      for (int i = 0; i < 4; ++i) payload[4 + i] = static_cast<char>((words >> (8 * i)) & 0xff);
    }
    WriteBytes(WithHeader(payload));
    try {
      ReadJournal(dir_);  // a lucky decode is fine; a crash or another exception is not
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(JournalPath(dir_)), std::string::npos) << e.what();
    }
  }
}

TEST_F(JournalTest, AJournalThatIsADirectoryThrows) {
  fs::create_directories(JournalPath(dir_));
  ExpectReadFails("not a regular file");
}

TEST_F(JournalTest, RewritingReplacesTheContentAndLeavesNoOtherFiles) {
  WriteJournal(dir_, FullRecord());
  JournalRecord second;
  second.job_id = "fedcba9876543210";
  second.job.train.epochs = 3;
  second.generation = 2;
  second.checkpoint = StatePoint{1, 64, 9};
  for (int i = 0; i < 5; ++i) {
    second.generation = 2 + static_cast<uint64_t>(i);
    WriteJournal(dir_, second);
  }
  const std::optional<JournalRecord> read = ReadJournal(dir_);
  ASSERT_TRUE(read.has_value());
  ExpectSame(*read, second);
  EXPECT_EQ(Files(dir_), std::set<std::string>{"journal"});
}

TEST_F(JournalTest, CreatesTheDirectoryWhenMissing) {
  const std::string nested = dir_ + "/a/b/state";
  WriteJournal(nested, FullRecord());
  const std::optional<JournalRecord> read = ReadJournal(nested);
  ASSERT_TRUE(read.has_value());
  ExpectSame(*read, FullRecord());
  EXPECT_EQ(Files(nested), std::set<std::string>{"journal"});
}

// A directory under a regular file cannot be created (ENOTDIR), root or not.
TEST_F(JournalTest, DirectoryUnderAFileThrowsNamingThePath) {
  const std::string file = dir_ + "/plain";
  std::ofstream(file) << "x";
  const std::string bad = file + "/sub";
  try {
    WriteJournal(bad, FullRecord());
    ADD_FAILURE() << "WriteJournal did not throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
  }
  EXPECT_EQ(Files(dir_), std::set<std::string>{"plain"});
}

TEST_F(JournalTest, UnwritableDirectoryThrowsNamingThePathAndKeepsTheOldJournal) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into a 0500 directory anyway";
  WriteJournal(dir_, FullRecord());
  ASSERT_EQ(::chmod(dir_.c_str(), 0500), 0);
  try {
    WriteJournal(dir_, JournalRecord{});
    ADD_FAILURE() << "WriteJournal did not throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(JournalPath(dir_)), std::string::npos) << e.what();
  }
  ASSERT_EQ(::chmod(dir_.c_str(), 0700), 0);
  const std::optional<JournalRecord> read = ReadJournal(dir_);
  ASSERT_TRUE(read.has_value());
  ExpectSame(*read, FullRecord());
  EXPECT_EQ(Files(dir_), std::set<std::string>{"journal"});
}

TEST(RefusalToReuseTest, AFinishedOrStoppedJobIsNotReplacedByAFreshOne) {
  JournalRecord done;
  done.job_id = "0123456789abcdef";
  done.finished = true;
  const std::string refusal = RefusalToReuse("/s", done, /*resume=*/false);
  EXPECT_NE(refusal.find("the job in --state-dir /s (0123456789abcdef) finished with exit 0"),
            std::string::npos)
      << refusal;
  EXPECT_NE(refusal.find("--resume"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("another --state-dir"), std::string::npos) << refusal;
  JournalRecord stopped = done;
  stopped.exit_code = 3;
  EXPECT_NE(RefusalToReuse("/s", stopped, false).find("stopped with exit 3"), std::string::npos);
  EXPECT_EQ(RefusalToReuse("/s", done, /*resume=*/true), "");
  EXPECT_EQ(RefusalToReuse("/s", stopped, /*resume=*/true), "");
}

TEST(NewJobIdTest, IsSixteenRandomHexCharacters) {
  const std::string a = NewJobId();
  const std::string b = NewJobId();
  EXPECT_EQ(a.size(), 16u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos) << a;
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace elastic::trainer
