#include "trainer/elastic/controller/journal.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <errno.h>
#include <fcntl.h>
#include <kj/array.h>
#include <kj/exception.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <system_error>

#include "runtime/atomic_file.h"
#include "trainer/elastic/protocol/control.capnp.h"
#include "trainer/elastic/protocol/control_messages.h"

namespace elastic::trainer {
namespace {

constexpr char kMagic[] = "ELJRNL01";  // the last two characters are the version
constexpr size_t kMagicSize = 8;
constexpr size_t kVersionOffset = 6;  // "ELJRNL" then the version
constexpr size_t kHeaderSize = 24;    // magic, checksum, payload length
// Far above any journal (a few flags and numbers); bounds what garbage can allocate.
constexpr uint64_t kMaxPayload = 64ull << 20;

std::runtime_error Error(const std::string& path, const std::string& what) {
  return std::runtime_error("journal " + path + ": " + what);
}

std::runtime_error ErrnoError(const std::string& path, const std::string& what, int error) {
  return Error(path, what + ": " + std::strerror(error));
}

uint64_t Fnv1a64(const unsigned char* data, size_t size) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < size; ++i) {
    hash ^= data[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

void PutLittleEndian(uint64_t value, std::string& out) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t GetLittleEndian(const std::string& bytes, size_t offset) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i)
    value = (value << 8) | static_cast<unsigned char>(bytes[offset + static_cast<size_t>(i)]);
  return value;
}

std::string Hex(uint64_t value) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i) {
    out[static_cast<size_t>(i)] = kDigits[value & 0xf];
    value >>= 4;
  }
  return out;
}

// The payload: the record as a flat-array Cap'n Proto message.
kj::Array<capnp::word> Encode(const JournalRecord& record) {
  capnp::MallocMessageBuilder message;
  proto::Journal::Builder journal = message.initRoot<proto::Journal>();
  journal.setJobId(record.job_id);
  WriteTrainSpec(record.job.train, journal.initTrain());
  WriteElasticSpec(record.job.elastic, journal.initElastic());
  journal.setGeneration(record.generation);
  journal.setNextMemberId(record.next_member_id);
  journal.setNextNodeId(record.next_node_id);
  journal.setStarted(record.started);
  journal.setFinished(record.finished);
  journal.setExitCode(record.exit_code);
  journal.setHasNewest(record.newest.has_value());
  if (record.newest) ToProto(*record.newest, journal.initNewest());
  journal.setWorldOfNewest(record.world_of_newest);
  journal.setHasCheckpoint(record.checkpoint.has_value());
  if (record.checkpoint) ToProto(*record.checkpoint, journal.initCheckpoint());
  journal.setPrintedEpoch(record.printed_epoch);
  journal.setRunDir(record.run_dir);
  journal.setHasCopy(record.copy.has_value());
  if (record.copy) {
    proto::StoredCopy::Builder copy = journal.initCopy();
    ToProto(record.copy->point, copy.initPoint());
    copy.setFile(record.copy->file);
    copy.setSha256(record.copy->sha256);
  }
  return capnp::messageToFlatArray(message);
}

JournalRecord Decode(const std::string& path, const std::string& payload) {
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(payload.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), payload.data(), payload.size());
  capnp::ReaderOptions options;
  // Enough to read every field a few times; garbage cannot make it loop.
  options.traversalLimitInWords = 8 * words.size() + 1024;
  try {
    capnp::FlatArrayMessageReader message(words, options);
    if (message.getEnd() != words.end())
      throw Error(path, "does not decode: bytes after the message");
    proto::Journal::Reader journal = message.getRoot<proto::Journal>();
    JournalRecord record;
    record.job_id = journal.getJobId();
    if (journal.hasTrain()) {
      record.job.train = ReadTrainSpec(journal.getTrain());
      ReadElasticSpec(journal.getElastic(), &record.job.elastic);
    } else if (!journal.getRetiredFlags().isNull()) {
      // Written before the typed spec: the flags as the driver was given them.
      std::vector<std::string> flags;
      for (capnp::Text::Reader flag : journal.getRetiredFlags().getAs<capnp::List<capnp::Text>>())
        flags.emplace_back(flag);
      try {
        record.job = SettingsFromFlags(flags);
      } catch (const std::exception& e) {
        throw Error(path, std::string("holds the flags of a job from an older version that this "
                                      "version cannot read (") +
                              e.what() + ")");
      }
      record.job_read_from_flags = true;
    } else {
      throw Error(path, "holds no job settings");
    }
    record.generation = journal.getGeneration();
    record.next_member_id = journal.getNextMemberId();
    record.next_node_id = journal.getNextNodeId();
    record.started = journal.getStarted();
    record.finished = journal.getFinished();
    record.exit_code = journal.getExitCode();
    if (journal.getHasNewest()) record.newest = FromProto(journal.getNewest());
    record.world_of_newest = journal.getWorldOfNewest();
    if (journal.getHasCheckpoint()) record.checkpoint = FromProto(journal.getCheckpoint());
    record.printed_epoch = journal.getPrintedEpoch();
    record.run_dir = journal.getRunDir().cStr();
    if (journal.getHasCopy()) {
      const proto::StoredCopy::Reader copy = journal.getCopy();
      record.copy = StoredCopy{FromProto(copy.getPoint()), copy.getFile(), copy.getSha256()};
    }
    return record;
  } catch (const kj::Exception& e) {
    throw Error(path, std::string("does not decode: ") + e.getDescription().cStr());
  }
}

}  // namespace

std::string JournalPath(const std::string& dir) {
  return (std::filesystem::path(dir) / "journal").string();
}

void WriteJournal(const std::string& dir, const JournalRecord& record) {
  const std::string path = JournalPath(dir);
  std::error_code error;
  std::filesystem::create_directories(dir.empty() ? "." : dir, error);
  if (error) throw Error(path, "cannot create the directory " + dir + ": " + error.message());

  const kj::Array<capnp::word> words = Encode(record);
  const kj::ArrayPtr<const kj::byte> payload = words.asBytes();
  std::string bytes(kMagic, kMagicSize);
  PutLittleEndian(Fnv1a64(payload.begin(), payload.size()), bytes);
  PutLittleEndian(payload.size(), bytes);
  bytes.append(reinterpret_cast<const char*>(payload.begin()), payload.size());

  try {
    // Temporary file, fsync, rename, fsync of the directory; 0600 (the job's flags).
    runtime::WriteFileAtomically(path, bytes, 0600);
  } catch (const runtime::FileWriteError& e) {
    throw Error(path, e.what());
  }
}

std::optional<JournalRecord> ReadJournal(const std::string& dir) {
  const std::string path = JournalPath(dir);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw ErrnoError(path, "cannot open", errno);
  }
  std::string bytes;
  try {
    struct stat st;
    if (::fstat(fd, &st) != 0) throw ErrnoError(path, "cannot stat", errno);
    if (!S_ISREG(st.st_mode)) throw Error(path, "not a regular file");
    if (static_cast<uint64_t>(st.st_size) > kHeaderSize + kMaxPayload)
      throw Error(path, "too large (" + std::to_string(st.st_size) + " bytes)");
    char buffer[65536];
    for (;;) {
      const ssize_t n = ::read(fd, buffer, sizeof(buffer));
      if (n < 0) {
        if (errno == EINTR) continue;
        throw ErrnoError(path, "cannot read", errno);
      }
      if (n == 0) break;
      bytes.append(buffer, static_cast<size_t>(n));
      if (bytes.size() > kHeaderSize + kMaxPayload)
        throw Error(path, "too large (over " + std::to_string(bytes.size()) + " bytes)");
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);

  if (bytes.size() < kHeaderSize)
    throw Error(path, "truncated: " + std::to_string(bytes.size()) +
                          " bytes, the header alone is " + std::to_string(kHeaderSize));
  if (bytes.compare(0, kVersionOffset, kMagic, kVersionOffset) != 0)
    throw Error(path, "not a journal (bad magic)");
  if (bytes.compare(0, kMagicSize, kMagic, kMagicSize) != 0)
    throw Error(path, "unsupported journal version \"" + bytes.substr(kVersionOffset, 2) +
                          "\" (this program reads \"" + std::string(kMagic + kVersionOffset) +
                          "\")");
  const uint64_t checksum = GetLittleEndian(bytes, kMagicSize);
  const uint64_t length = GetLittleEndian(bytes, kMagicSize + 8);
  const uint64_t present = bytes.size() - kHeaderSize;
  if (length > present)
    throw Error(path, "truncated: the payload has " + std::to_string(present) + " of " +
                          std::to_string(length) + " bytes");
  if (length < present)
    throw Error(path, std::to_string(present - length) + " bytes after the " +
                          std::to_string(length) + "-byte payload");
  if (length == 0 || length % sizeof(capnp::word) != 0)
    throw Error(path, "malformed: a payload of " + std::to_string(length) + " bytes");
  const std::string payload = bytes.substr(kHeaderSize);
  const uint64_t computed =
      Fnv1a64(reinterpret_cast<const unsigned char*>(payload.data()), payload.size());
  if (computed != checksum)
    throw Error(path, "checksum mismatch (stored " + Hex(checksum) + ", computed " + Hex(computed) +
                          "): the file is corrupt");
  return Decode(path, payload);
}

std::string RefusalToReuse(const std::string& dir, const JournalRecord& finished, bool resume) {
  if (resume) return "";
  const std::string how = finished.exit_code == 0 ? "finished" : "stopped";
  return "the job in --state-dir " + dir + " (" + finished.job_id + ") " + how + " with exit " +
         std::to_string(finished.exit_code) +
         "; a new job here would start from a fresh model: continue it with --resume (from "
         "its checkpoint), or start a new job with another --state-dir (or remove " +
         JournalPath(dir) + ")";
}

std::string NewJobId() {
  std::random_device random;
  const uint64_t value = (static_cast<uint64_t>(random()) << 32) ^ random();
  return Hex(value);
}

}  // namespace elastic::trainer
