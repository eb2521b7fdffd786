#include "trainer/elastic/worker/worker_events.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "trainer/elastic/protocol/control.capnp.h"

namespace elastic::trainer {
namespace {

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Writes the message with one write(2) of its flat bytes, so that a kill
// leaves at most that one message incomplete.
void WriteWhole(int fd, capnp::MessageBuilder& message, const std::string& path) {
  const kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  const auto bytes = words.asBytes();
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.begin() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error(path + ": write failed: " + std::strerror(errno));
    written += static_cast<size_t>(n);
  }
}

}  // namespace

WorkerEventLog::WorkerEventLog(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
}

WorkerEventLog::~WorkerEventLog() {
  if (fd_ >= 0) ::close(fd_);
}

void WorkerEventLog::Joined(uint64_t member_id, const GenerationJoinedEvent& event) {
  capnp::MallocMessageBuilder message;
  auto root = message.initRoot<proto::WorkerEvent>();
  root.setUnixMs(UnixMs());
  root.setMemberId(member_id);
  auto joined = root.initGenerationJoined();
  joined.setGeneration(event.generation);
  joined.setRank(event.rank);
  joined.setWorld(event.world);
  joined.setPid(event.pid);
  WriteWhole(fd_, message, path_);
}

void WorkerEventLog::Left(uint64_t member_id, const GenerationLeftEvent& event) {
  capnp::MallocMessageBuilder message;
  auto root = message.initRoot<proto::WorkerEvent>();
  root.setUnixMs(UnixMs());
  root.setMemberId(member_id);
  auto left = root.initGenerationLeft();
  left.setGeneration(event.generation);
  left.setOutcome(event.outcome);
  left.setSupersededForMs(event.superseded_for_ms);
  WriteWhole(fd_, message, path_);
}

std::vector<WorkerEventRecord> ReadWorkerEvents(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  std::string bytes;
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      throw std::runtime_error(path + ": read failed: " + std::strerror(error));
    }
    if (n == 0) break;
    bytes.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  if (bytes.size() % sizeof(capnp::word) != 0) bytes.resize(bytes.size() / sizeof(capnp::word) * 8);
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), bytes.data(), bytes.size());

  std::vector<WorkerEventRecord> events;
  kj::ArrayPtr<const capnp::word> rest = words;
  while (rest.size() > 0) {
    // A message whose segment table or segments run past the end is the
    // one a kill cut short: what came before it stands.
    if (capnp::expectedSizeInWordsFromPrefix(rest) > rest.size()) break;
    try {
      capnp::FlatArrayMessageReader reader(rest);
      const auto event = reader.getRoot<proto::WorkerEvent>();
      WorkerEventRecord record;
      record.unix_ms = event.getUnixMs();
      record.member_id = event.getMemberId();
      switch (event.which()) {
        case proto::WorkerEvent::GENERATION_JOINED: {
          const auto joined = event.getGenerationJoined();
          record.joined = {joined.getGeneration(), joined.getRank(), joined.getWorld(),
                           joined.getPid()};
          break;
        }
        case proto::WorkerEvent::GENERATION_LEFT: {
          const auto left = event.getGenerationLeft();
          record.is_left = true;
          record.left = {left.getGeneration(), left.getOutcome().cStr(), left.getSupersededForMs()};
          break;
        }
      }
      events.push_back(std::move(record));
      rest = kj::ArrayPtr<const capnp::word>(reader.getEnd(), rest.end());
    } catch (const kj::Exception& e) {
      throw std::runtime_error(path + ": malformed worker event " + std::to_string(events.size()) +
                               ": " + e.getDescription().cStr());
    }
  }
  return events;
}

std::string WorkerEventsPath(const std::string& dir, uint64_t member_id) {
  return dir + "/events-" + std::to_string(member_id) + ".bin";
}

}  // namespace elastic::trainer
