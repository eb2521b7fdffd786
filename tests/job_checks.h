// What the end-to-end tests of //trainer:cifar share besides Process: a fresh
// directory per scenario, the checksum invariant read off a job's event log,
// and ending a job once a membership change took effect.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "tests/job_events.h"
#include "tests/process.h"

namespace elastic::tests {

// An empty directory `name` under $TEST_TMPDIR (or /tmp outside Bazel).
std::string FreshTempDir(const std::string& name);

// Every generation's ranks reported one and the same parameter checksum after
// their sync (the "params" events), at least one generation did, and every
// rank was within its world. Google Test expectations.
void ExpectOneChecksumPerGeneration(const JobEvents& events);

// No progress line counts past its epoch ("epoch E/N step S/T" with S > T):
// a generation that redoes part of an epoch with another world has another
// number of steps, and the line must say so. (This checks the line people
// read itself; it is the one check made on printed text.)
void ExpectStepsWithinTheirEpoch(const std::string& output);

// Waits until the job's log in `run_dir` has an epoch of `world` workers,
// then sends the driver SIGTERM: the job stops at the next epoch boundary
// with a checkpoint (exit status 3). A test whose membership change must take
// effect runs as many epochs as that takes on a loaded machine, and one more.
// False (with the driver killed) if no such epoch came within `timeout`.
bool StopAfterAnEpochWithWorld(Process& driver, const std::string& run_dir, int world,
                               std::chrono::seconds timeout);

// A worker failed (a "leave" with reason "failed", or a survivor's "fault",
// whichever the log has first), and a generation after it went back to the
// last commit: its state came from a commit (a member's, the controller's
// copy or a checkpoint), not from a fresh model.
void ExpectRolledBackToACommit(const JobEvents& events);

// The test accuracy (percent) of the last epoch in the log, or -1.
double LastTestAccuracy(const JobEvents& events);

// The validation loss of the last epoch in the log, or -1.
double LastValidationLoss(const JobEvents& events);

// Tiny Shakespeare's input.txt where ELASTIC_TINYSHAKESPEARE names its
// directory (../shared/data/tinyshakespeare), or "" when it is not there.
std::string TinyShakespeareText();

// Prepares it as nanoGPT does (tools/prepare_tokens.py, run by
// /usr/bin/python3: train.bin, val.bin, meta.json) into DIR/shakespeare_char
// and returns that directory; a Google Test failure and "" if it failed.
std::string PrepareTinyShakespeare(const std::string& dir);

// The epochs the log has a summary of (each once, whatever was redone).
int EpochCount(const JobEvents& events);

// Every sample of each of the first `epochs` epochs was trained on exactly
// once, across all workers and generations, discarding the steps a later
// restore rolled back: read from the files --log-samples wrote in
// `samples_dir` for a job of `train_samples` training samples.
void ExpectEverySampleOnce(const std::string& samples_dir, int64_t train_samples, int epochs);

}  // namespace elastic::tests
