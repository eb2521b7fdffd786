// The exit codes of the elastic processes (driver, --join agent, worker).
#pragma once

namespace elastic::trainer {

// Exit codes of the elastic processes.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
// Stopped before --epochs: with a checkpoint of the last commit (below
// --min-workers after --rendezvous-timeout, SIGINT/SIGTERM to the driver), or
// because the job's state was lost (the message says what).
inline constexpr int kExitStopped = 3;

}  // namespace elastic::trainer
