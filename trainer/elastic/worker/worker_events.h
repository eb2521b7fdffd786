// A worker's own record of the generations it joined and left, as typed
// Cap'n Proto messages (control.capnp's WorkerEvent) appended to a file, so
// that a test or a post-mortem reads values (how long the worker stayed in a
// superseded generation) rather than parsing log lines.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace elastic::trainer {

struct GenerationJoinedEvent {
  uint64_t generation = 0;
  int rank = 0;
  int world = 0;
  int pid = 0;  // the worker's process
};

struct GenerationLeftEvent {
  uint64_t generation = 0;
  std::string outcome;
  int64_t superseded_for_ms = -1;  // -1: no newer generation existed
};

// One event as read back; exactly one of `joined` / `left` is meaningful,
// as `is_left` says.
struct WorkerEventRecord {
  int64_t unix_ms = 0;
  uint64_t member_id = 0;
  bool is_left = false;
  GenerationJoinedEvent joined;
  GenerationLeftEvent left;
};

// Appends events to one file, each flushed to the kernel as it is written: a
// worker killed with -9 loses at most the message it was writing.
class WorkerEventLog {
 public:
  // Opens (creating) `path` for appending; throws std::runtime_error naming it.
  explicit WorkerEventLog(const std::string& path);
  ~WorkerEventLog();
  WorkerEventLog(const WorkerEventLog&) = delete;
  WorkerEventLog& operator=(const WorkerEventLog&) = delete;

  void Joined(uint64_t member_id, const GenerationJoinedEvent& event);
  void Left(uint64_t member_id, const GenerationLeftEvent& event);

 private:
  int fd_ = -1;
  std::string path_;
};

// The events of a file WorkerEventLog wrote, in order. A truncated last
// message (the worker was killed while writing it) ends the list; any other
// malformed content throws std::runtime_error naming the file.
std::vector<WorkerEventRecord> ReadWorkerEvents(const std::string& path);

// The file a worker of `member_id` writes under `dir`.
std::string WorkerEventsPath(const std::string& dir, uint64_t member_id);

}  // namespace elastic::trainer
