#pragma once

// The job controller's journal in --state-dir: the durable facts a controller
// restarted on the same address and token needs to take the job over
// (docs/DESIGN.md, "Job state and the control plane", rule 2).
//
// The file <dir>/journal is rewritten whole at every change: a temporary file
// next to it is written and fsync'ed, renamed over the journal, and the
// directory is fsync'ed, so a crash leaves either the old or the new journal.
// Its format: the 8-byte magic "ELJRNL01", the FNV-1a 64 checksum of the
// payload (8 bytes, little-endian), the payload's length (8 bytes,
// little-endian), then the payload: a Cap'n Proto flat-array message of
// `Journal` (control.capnp).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainer/elastic/controller/copy_store.h"
#include "trainer/elastic/controller/job_controller.h"
#include "trainer/elastic/protocol/job_spec.h"

namespace elastic::trainer {

struct JournalRecord {
  std::string job_id;  // random hex at the job's start
  JobSettings job;     // the job's settings (what workers get as their spec)
  // Read from a journal older than the typed spec, whose job's flags were
  // kept as text and parsed here (said when the job is taken over).
  bool job_read_from_flags = false;
  uint64_t generation = 0;      // the last generation published
  uint64_t next_member_id = 1;  // ids a restarted head must not reuse
  uint64_t next_node_id = 1;
  bool started = false;              // the first sync happened
  bool finished = false;             // the job is over (a new start begins a new job)
  int exit_code = 0;                 // when finished
  std::optional<StatePoint> newest;  // the newest commit known to exist
  uint32_t world_of_newest = 0;      // how many members held it
  std::optional<StatePoint> checkpoint;
  int64_t printed_epoch = 0;       // the last epoch summary printed (1-based)
  std::string run_dir;             // where the job's events.jsonl is; "" in older journals
  std::optional<StoredCopy> copy;  // the controller's copy in the directory, complete
};

// Rewrites <dir>/journal whole (temporary file with a unique name, fsync,
// rename, fsync of the directory); creates `dir` if it is missing. Throws
// std::runtime_error naming the path and the reason on failure, after
// removing its temporary file; never leaves a half-written journal.
void WriteJournal(const std::string& dir, const JournalRecord& record);

// The journal in `dir`; nullopt when <dir>/journal does not exist. Throws
// std::runtime_error naming the path and what is wrong when the file cannot be
// read, is truncated, has a bad magic, a checksum mismatch, or does not decode.
std::optional<JournalRecord> ReadJournal(const std::string& dir);

// <dir>/journal
std::string JournalPath(const std::string& dir);

// Why a driver started in `dir`, whose journal says the job is over, must
// not begin a new job there: that job would start from a fresh model, and a
// restarted controller (a Kubernetes Deployment, a systemd unit) would train
// from scratch without anyone asking. Empty when `resume` is set: a stopped
// job continues from its checkpoint in a new job, as --resume says.
std::string RefusalToReuse(const std::string& dir, const JournalRecord& finished, bool resume);

// A new job's id: 16 random hex characters.
std::string NewJobId();

}  // namespace elastic::trainer
