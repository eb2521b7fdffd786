# The control plane of an elastic job: every message between the job
# controller (an actor in the driver) and the trainer actors (one per worker
# process), and the controller's journal. Every actor call (runtime/actor.h)
# between them carries one message per direction: ToController or ToTrainer,
# a union whose member says what it is (control_messages.h builds them and
# maps each struct to its member); docs/elastic.md lists who sends which.
@0xd4a1b7c9e6f20381;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("elastic::trainer::proto");

# Where the job is: a commit is taken at (epoch, position) after `step`
# optimizer steps. Commits of one job are ordered by (step, epoch, position).
struct StatePoint {
  epoch @0 :Int64;
  position @1 :Int64;
  step @2 :Int64;
}

# Controller -> worker, the answer to ToController.spec (an ask): the job's
# settings, the same for every worker wherever it was started. Built once by
# the driver from its flags of the training and elastic scopes (FlagScope in
# trainer/flags.h), journaled, and read by workers as values (job_spec.h):
# nobody parses a command line but the process it was given to.
struct JobSpec {
  jobId @0 :Text;  # random at the job's start, kept by a controller that takes it over
  train @1 :TrainSpec;
  elastic @2 :ElasticSpec;
}

# The training scope: TrainOptions (trainer/train_options.h), field for field;
# docs/flags.md says what each one is.
struct TrainSpec {
  model @0 :Text;
  modelFile @1 :Text;
  listModels @2 :Bool;
  dataset @3 :Text;
  dataDir @4 :Text;
  imageSize @5 :Int64;
  imageIndex @6 :Text;
  imageIndexDir @7 :Text;
  normalize @8 :Text;
  context @9 :Int64;
  trainSamples @10 :Int64;
  testSamples @11 :Int64;
  epochs @12 :Int64;
  maxSteps @13 :Int64;
  evalEvery @14 :Int64;
  batchSize @15 :Int64;
  optimizer @16 :Text;
  lr @17 :Float64;
  momentum @18 :Float64;
  nesterov @19 :Bool;
  weightDecay @20 :Float64;
  adamBeta1 @21 :Float64;
  adamBeta2 @22 :Float64;
  lookahead @23 :Bool;
  lookaheadK @24 :Int64;
  lookaheadAlpha @25 :Float64;
  schedule @26 :Text;
  warmupEpochs @27 :Float64;
  warmupSteps @28 :Int64;
  recomputeBn @29 :Int64;
  stepSize @30 :Int64;
  gamma @31 :Float64;
  plateauPatience @32 :Int64;
  plateauFactor @33 :Float64;
  minLr @34 :Float64;
  decaySteps @35 :Int64;
  patience @36 :Int64;
  labelSmoothing @37 :Float64;
  clipGrad @38 :Float64;
  augment @39 :Bool;
  seed @40 :Int64;
  precision @41 :Text;
  memoryFormat @42 :Text;
  checkpointDir @43 :Text;
  checkpointEvery @44 :Int64;
  resume @45 :Bool;
  traceDir @46 :Text;
  device @47 :Text;
  threads @48 :Int64;
  loaderThreads @49 :Int64;
  logEvery @50 :Int64;
  balance @51 :Bool;
}

# The elastic scope: the job's fields of ElasticOptions
# (trainer/elastic/elastic_options.h); the process scope (role, ports,
# addresses, token file, directories of this process) is not here.
struct ElasticSpec {
  minWorkers @0 :Int64;
  maxWorkers @1 :Int64;
  commitEvery @2 :Int64;
  admitAt @3 :Text;
  joinWindow @4 :Float64;
  drainTimeout @5 :Float64;
  rendezvousTimeout @6 :Float64;
  heartbeatTimeout @7 :Float64;
  reconnectTimeout @8 :Float64;
  globalBatch @9 :Int64;
  perWorkerBatch @10 :Bool;
  logSamples @11 :Text;
  stateCopyEvery @12 :Int64;
  stepTimeout @13 :Float64;
  blacklistAfter @14 :Int64;
  blacklistSeconds @15 :Float64;
  letGoBelow @16 :Float64;
}

# Worker -> controller (ToController.hello, a tell): this member's trainer
# actor and the commit it holds in memory (a worker that lost its controller
# and came back).
struct Hello {
  memberId @0 :UInt64;
  holdsCommit @1 :Bool;
  commit @2 :StatePoint;
  generation @3 :UInt64;  # the generation the commit was taken in
}

struct StateSource {
  enum Kind {
    fresh @0;           # a freshly seeded model: only at the very start of a job
    resume @1;          # rank 0 reads --checkpoint-dir (--resume, start of a job)
    member @2;          # rank `rank` holds the commit in memory and broadcasts it
    controllerCopy @3;  # `state` below: the controller's copy, sent to rank 0
    checkpoint @4;      # rank 0 reads --checkpoint-dir (every holder was lost)
  }
  kind @0 :Kind;
  rank @1 :Int32;       # the rank that broadcasts (0 unless kind is member)
  point @2 :StatePoint; # what the source holds
  state @3 :Data;       # controllerCopy, rank 0's message only
}

# Controller -> every member of a view (ToTrainer.generation, a tell).
struct Generation {
  generation @0 :UInt64;
  memberIds @1 :List(UInt64);   # ranks are positions in this list
  source @2 :StateSource;
  stop @3 :Text;                # non-empty: sync, rank 0 checkpoints, all exit
  reason @4 :Text;              # why this generation (for logs)
  sendCopy @5 :Bool;            # rank 0 sends the state it synced (Synced.state):
                                # it comes from a member, the controller's copy is older
}

# Controller -> rank 0 (ToTrainer.request, a tell): stop at a commit point so
# that joins and leaves can be applied.
struct StopRequest {
  generation @0 :UInt64;
  atNextCommit @1 :Bool;  # false: at the next epoch boundary
}

# Controller -> a member that is not (or no longer) in a view (ToTrainer.over,
# a tell).
struct JobOver {
  reason @0 :Text;
}

# Rank 0 -> controller (ToController.progress, a tell), after every step.
struct Progress {
  generation @0 :UInt64;
  epoch @1 :Int64;        # 0-based
  step @2 :Int64;         # optimizer steps in all
  stepsInEpoch @3 :Int64;
  stepInEpoch @4 :Int64;
  seen @5 :Float64;       # samples of this epoch trained on so far
  loss @6 :Float64;
  accuracy @7 :Float64;   # in [0, 1]
  lr @8 :Float64;
  world @9 :Int32;
}

# Rank 0 -> controller (ToController.epoch, a tell), after each epoch's
# evaluation.
struct EpochSummary {
  epoch @0 :Int64;        # 1-based, as printed
  epochs @1 :Int64;
  world @2 :Int32;
  trainLoss @3 :Float64;
  trainAccuracy @4 :Float64;
  testLoss @5 :Float64;
  testAccuracy @6 :Float64;
  imagesPerSecond @7 :Float64;
  seconds @8 :Float64;
  arithmetic @9 :Text;    # rank 0's precision and memory format, e.g. "bf16, channels-last"
  learningRate @10 :Float64;  # at the epoch's last step
}

# Rank 0 -> controller (ToController.evaluation, a tell), after an evaluation
# inside an epoch (--eval-every).
struct Evaluation {
  step @0 :Int64;            # optimizer steps in all
  epoch @1 :Int64;           # 1-based: the epoch it fell in
  epochFraction @2 :Float64; # how far through that epoch, in [0, 1)
  world @3 :Int32;
  testLoss @4 :Float64;
  testAccuracy @5 :Float64;
  seconds @6 :Float64;       # the evaluation's own time
}

# Rank 0 -> controller (ToController.commit, a tell), at every commit point.
struct CommitReport {
  generation @0 :UInt64;
  point @1 :StatePoint;
  state @2 :Data;           # the full state, every --state-copy-every commits; else empty
  stoppedOnRequest @3 :Bool; # the generation stopped here as the controller asked
  memberId @4 :UInt64;       # who reports: rank 0 every commit, every rank a stop
}

# Rank 0 -> controller (ToController.shares, a tell): a commit planned how a
# step is split (trainer/shares.h), from every rank's measured speed, about
# once a second of training; `changed` when the split is new.
struct Shares {
  generation @0 :UInt64;
  point @1 :StatePoint;         # the commit the new split starts after
  stepSamples @2 :Int64;
  shares @3 :List(Int64);       # a rank each, from now on
  speeds @4 :List(Float64);     # samples a second of each rank's own work
  slowdowns @5 :List(Float64);  # times slower than the median rank
  changed @6 :Bool;             # the split is new (else the speeds only, for the metrics)
}

# Rank 0 -> controller (ToController.synced, a tell): the generation restored
# its state and agrees on it.
struct Synced {
  generation @0 :UInt64;
  point @1 :StatePoint;
  checksum @2 :UInt64;
  state @3 :Data;  # the state synced, when the order asked (Generation.sendCopy)
}

# Every member -> controller (ToController.params, a tell): the checksum of
# the parameters it holds once its generation restored its state, for the
# event log (events.jsonl: every rank of a generation must hold the same).
struct ParamsChecksum {
  generation @0 :UInt64;
  memberId @1 :UInt64;
  rank @2 :Int32;
  world @3 :Int32;
  checksum @4 :UInt64;
  point @5 :StatePoint;  # the state restored
  pid @6 :Int32;         # the member's process, on its machine
}

# Rank 0 -> controller (ToController.firstStep, a tell): wall-clock time of
# the generation's first step, for the rescale time.
struct FirstStep {
  generation @0 :UInt64;
  wallSeconds @1 :Float64;
}

# Rank 0 -> controller (ToController.checkpoint, a tell): a checkpoint file
# now holds `point`.
struct CheckpointWritten {
  point @0 :StatePoint;
  path @1 :Text;
}

# Any member -> controller (ToController.fault, a tell): a collective failed
# or timed out, or the state source could not be read; the controller
# re-forms the generation.
struct Fault {
  generation @0 :UInt64;
  memberId @1 :UInt64;
  reason @2 :Text;
  stateUnavailable @3 :Bool;  # rank 0 could not load the source it was given
}

# A member -> controller (ToController.draining, a tell): it got SIGTERM.
struct Draining {
  memberId @0 :UInt64;
  reason @1 :Text;  # why it leaves; empty: told to (SIGTERM, a preemption notice)
}

# Rank 0 -> controller (ToController.done, an ask): the job trained every epoch.
struct Done {
  epochs @0 :Int64;
  steps @1 :Int64;
  testAccuracy @2 :Float64;
  earlyStop @3 :Bool;
  generation @4 :UInt64;  # the generation that trained the last step
}

# A member -> controller (ToController.stats, a tell): its cumulative
# allreduce and step time record (worker_stats.h).
struct WorkerStats {
  memberId @0 :UInt64;
  generation @1 :UInt64;
  rank @2 :Int64;
  stepSeconds @3 :Float64;
  allreduceBuckets @4 :List(UInt64);
  allreduceSeconds @5 :Float64;
  allreduceBytes @6 :UInt64;
}

# Every message to the job controller. The member's type is the message's
# struct above; Void members carry nothing. Ordinals only grow: a new member
# gets the next number, and a receiver that does not know it (or gets `unset`)
# answers it as unimplemented and goes on.
struct ToController {
  union {
    unset @0 :Void;                  # nothing set: refused as unimplemented
    spec @1 :Void;                   # ask: answered with a JobSpec message
    hello @2 :Hello;
    progress @3 :Progress;
    epoch @4 :EpochSummary;
    commit @5 :CommitReport;
    synced @6 :Synced;
    firstStep @7 :FirstStep;
    checkpoint @8 :CheckpointWritten;
    fault @9 :Fault;
    draining @10 :Draining;
    done @11 :Done;                  # ask: answered (empty) once the controller knows
    stats @12 :WorkerStats;
    tick @13 :Void;                  # the controller's own clock (its tick thread)
    evaluation @14 :Evaluation;
    params @15 :ParamsChecksum;
    shares @16 :Shares;
  }
}

# Every message to a worker's trainer actor.
struct ToTrainer {
  union {
    unset @0 :Void;                  # nothing set: refused as unimplemented
    generation @1 :Generation;
    request @2 :StopRequest;
    over @3 :JobOver;
  }
}

# The controller's journal in --state-dir (journal.h): what a restarted
# controller needs to take the job over. Rewritten whole (temporary file,
# fsync, rename); the file is a magic, a checksum and a length before this
# message.
struct Journal {
  jobId @0 :Text;            # random hex at the job's start
  # Journals written before the typed spec held the job's flags here, as
  # text (a List(Text)); read only to take such a job over (journal.h).
  retiredFlags @1 :AnyPointer;
  generation @2 :UInt64;     # the last generation published
  nextMemberId @3 :UInt64;   # ids a restarted head must not reuse
  nextNodeId @4 :UInt64;
  started @5 :Bool;          # the first sync happened
  finished @6 :Bool;         # the job is over (a new start begins a new job)
  exitCode @7 :Int32;        # when finished
  hasNewest @8 :Bool;
  newest @9 :StatePoint;     # the newest commit known to exist
  worldOfNewest @10 :UInt32; # how many members held it
  hasCheckpoint @11 :Bool;
  checkpoint @12 :StatePoint;
  printedEpoch @13 :Int64;   # the last epoch summary printed (1-based)
  hasCopy @14 :Bool;         # the controller's copy on disk (copy_store.h)
  copy @15 :StoredCopy;
  train @16 :TrainSpec;      # the job's settings (what workers get as their JobSpec)
  elastic @17 :ElasticSpec;
  runDir @18 :Text;          # where the job's events.jsonl is (a restarted driver appends there)
}

# A copy of the job's state in --state-dir, complete before the journal names it.
struct StoredCopy {
  point @0 :StatePoint;
  file @1 :Text;    # a name in --state-dir
  sha256 @2 :Text;  # of the file's bytes, lowercase hex
}

# What a worker records of its own generations, one message after another in
# <--log-samples>/events-<member>.bin (worker_events.h), for tests and
# post-mortems to read as typed values rather than log text.
struct WorkerEvent {
  unixMs @0 :Int64;     # wall clock when it happened
  memberId @1 :UInt64;
  union {
    generationJoined @2 :GenerationJoined;
    generationLeft @3 :GenerationLeft;
  }
}

# The generation's communicator formed: this worker trains in it.
struct GenerationJoined {
  generation @0 :UInt64;
  rank @1 :Int32;
  world @2 :Int32;
  pid @3 :Int32;        # the worker's process
}

# The worker left a generation (its communicator is gone).
struct GenerationLeft {
  generation @0 :UInt64;
  outcome @1 :Text;          # "change", "failed", "done" or "stopped"
  # Milliseconds from this worker first learning that a newer generation
  # exists (the head's view or the controller's order) to leaving this one;
  # -1 when no newer one existed when it left.
  supersededForMs @2 :Int64;
}
