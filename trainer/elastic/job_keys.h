// The keys of the head's key-value store through which the driver and the
// workers of one job talk (docs/elastic.md), and the job's flags as bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/kv_store.h"
#include "trainer/elastic/elastic_options.h"
#include "trainer/train_options.h"

namespace elastic::trainer {

struct JobKey {
  static constexpr const char* kArgs = "job/args";        // driver: the job's flags
  static constexpr const char* kStarted = "job/started";  // rank 0 of the first sync
  // Rank 0 of a --resume job: the epoch the checkpoint resumed at (0-based), so
  // the driver expects epoch summaries from there on.
  static constexpr const char* kResumedAt = "job/resumed-at";
  static constexpr const char* kProgress = "job/progress";  // rank 0, every step
  static constexpr const char* kLastAccuracy = "job/last-accuracy";
  static constexpr const char* kDone = "job/done";  // rank 0: the final line
  static constexpr const char* kStop = "job/stop";  // driver: stop early, and why
  // Driver -> rank 0: "epoch" (stop at the next epoch boundary) or "now" (next commit).
  static std::string Request(uint64_t generation) {
    return runtime::GenerationKey(generation, "request");
  }
  // Rank 0 -> driver: "<epoch> <position>" where the generation stopped on request.
  static std::string Stopped(uint64_t generation) {
    return runtime::GenerationKey(generation, "stopped");
  }
  // Rank 0 -> driver: wall-clock time (s) of the generation's first completed step.
  static std::string FirstStep(uint64_t generation) {
    return runtime::GenerationKey(generation, "first-step");
  }
  static std::string Epoch(int64_t epoch) { return "job/epoch/" + std::to_string(epoch); }
  // Worker -> driver: its WorkerStatsRecord (worker_stats.h), cumulative.
  static std::string WorkerStats(uint64_t member_id) {
    return "job/worker-stats/" + std::to_string(member_id);
  }
  // Worker -> driver: it got SIGTERM (wall-clock time, s).
  static std::string Draining(uint64_t member_id) {
    return "job/draining/" + std::to_string(member_id);
  }
};

// The job's flags as one value ('\0'-separated) and back.
std::string JoinJobArgs(const std::vector<std::string>& args);
std::vector<std::string> SplitJobArgs(const std::string& bytes);

// Parses the job's flags as the driver did (throws FlagError).
void ParseJobArgs(const std::vector<std::string>& args, TrainOptions* train,
                  ElasticOptions* elastic);

}  // namespace elastic::trainer
