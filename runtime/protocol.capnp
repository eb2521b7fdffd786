# The one wire schema of the runtime. Every frame on every connection (head,
# node agents, workers, actor systems) is one Envelope in Cap'n Proto's standard
# segment framing. Requests carry a non-zero requestId; the answer echoes it.
@0xc1f0d7a4b2e93c55;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("elastic::runtime::proto");

# --- hello and authentication -------------------------------------------------
# The accepting side speaks first with a random nonce; the connecting side
# proves it knows the cluster token with HMAC-SHA256(token, nonce) and sends a
# nonce of its own, which the acceptor answers the same way in Welcome. Nothing
# else is accepted before Welcome.

struct Hello {
  protocolVersion @0 :UInt32;
  nonce @1 :Data;
}

struct Authenticate {
  protocolVersion @0 :UInt32;
  mac @1 :Data;       # HMAC-SHA256(token, "elastic-runtime/client" || Hello.nonce)
  nonce @2 :Data;     # the acceptor must prove itself over this
  peerName @3 :Text;  # for logs only
}

struct Welcome {
  mac @0 :Data;       # HMAC-SHA256(token, "elastic-runtime/server" || Authenticate.nonce)
}

enum ErrorCode {
  unauthenticated @0;
  malformed @1;
  notFound @2;
  timeout @3;
  invalidArgument @4;
  unavailable @5;
  internal @6;
  resourceExhausted @7;  # beyond one of the head's limits (HeadLimits); the message names it
}

struct Error {
  code @0 :ErrorCode;
  message @1 :Text;
}

struct Heartbeat {
  sentAtMicros @0 :UInt64;
}

# --- key-value store ----------------------------------------------------------

struct KvPut {
  key @0 :Text;
  value @1 :Data;
}

struct KvGet {
  key @0 :Text;
}

struct KvWait {
  key @0 :Text;
  timeoutMillis @1 :UInt64;
}

struct KvValue {
  found @0 :Bool;
  value @1 :Data;
}

# Bytes [offset, offset + length) of a value, cut at the value's end.
struct ByteRange {
  offset @0 :UInt64;
  length @1 :UInt64;
}

# Waits until every key is set, or timeoutMillis passed, and answers with all
# of them in one KvValues: a rendezvous of n members costs each member one
# request and one reply instead of one per peer. At most
# KvLimits::max_keys_per_wait keys and HeadLimits::max_ranges_per_wait ranges;
# the reply must fit a frame.
struct KvWaitAll {
  keys @0 :List(Text);
  timeoutMillis @1 :UInt64;
  # Of each value, only the concatenation of these ranges; all of it when
  # empty. A member that needs one slot of every peer's value (its own port
  # among a peer's n) reads O(1) bytes per peer, not O(n).
  ranges @2 :List(ByteRange);
  # More keys, after `keys`: keyPrefix + "0" .. keyPrefix + (keyCount - 1) in
  # decimal. A rendezvous names its n members' keys in O(1) bytes.
  keyPrefix @3 :Text;
  keyCount @4 :UInt32;
  # Set before the wait, as a KvPut would be (KeyValueStore::AllGather): a
  # member's own key and its wait for everyone's in one request.
  put @5 :KvPut;
}

# The answer to KvWaitAll: at the deadline too, then naming what is missing.
struct KvValues {
  values @0 :List(Data);     # in the order of the request's keys; empty for a missing key
  missing @1 :List(UInt32);  # indices of the keys not set by the deadline; empty: all were
}

# --- nodes, members and membership --------------------------------------------

struct Endpoint {
  host @0 :Text;
  port @1 :UInt16;
}

struct RegisterNode {
  name @0 :Text;
  workers @1 :UInt32;   # how many worker processes the node agent runs
  previousId @2 :UInt64; # the id it had with a head that was restarted; 0: none
}

struct NodeRegistered {
  nodeId @0 :UInt64;
}

# A process that takes part in the job (a worker). Its id is stable for the life
# of its connection to the head.
struct RegisterMember {
  name @0 :Text;
  nodeId @1 :UInt64;    # 0 when not started by a node agent
  endpoint @2 :Endpoint; # its actor system, where actors of this member listen
  pid @3 :Int32;
  previousId @4 :UInt64; # the id it had with a head that was restarted; 0: none
}

struct MemberRegistered {
  memberId @0 :UInt64;
  generation @1 :UInt64; # the view current at registration
}

struct Member {
  id @0 :UInt64;
  name @1 :Text;
  nodeId @2 :UInt64;
  endpoint @3 :Endpoint;
  draining @4 :Bool;
  pid @5 :Int32;
}

# An ordered list of live members; a new generation whenever the list changes.
struct MembershipView {
  generation @0 :UInt64;
  members @1 :List(Member);
}

struct MembershipEvent {
  enum Kind {
    joined @0;        # a member registered (it may not be in the view yet)
    left @1;          # a member said goodbye
    failed @2;        # connection dropped or heartbeats stopped
    draining @3;      # its node was asked to stop (preemption)
    exited @4;        # a node agent saw the process exit
    viewChanged @5;   # a new view was published
    snapshot @6;      # first update after Subscribe
  }
  kind @0 :Kind;
  memberId @1 :UInt64;
  nodeId @2 :UInt64;
  detail @3 :Text;
}

struct MembershipUpdate {
  view @0 :MembershipView;     # the view current after the event
  event @1 :MembershipEvent;
  pending @2 :List(Member);    # registered live members not in the view
  # Set on the updates a subscriber is sent after its snapshot, in place of
  # the members of view and pending, which are then empty.
  delta @3 :MembershipDelta;
}

# The members of an update's view and pending list as ids, with the whole
# record only of those whose record changed (or is new) since the head's
# previous update; the receiver has the others from its snapshot and the
# updates since. A change then costs each of n subscribers 8 bytes per member
# instead of a whole record (~80 bytes) per member.
struct MembershipDelta {
  viewIds @0 :List(UInt64);
  pendingIds @1 :List(UInt64);
  records @2 :List(Member);
}

struct PublishView {
  memberIds @0 :List(UInt64);  # the new order; generation becomes current + 1
}

struct Draining {
  nodeId @0 :UInt64;
  reason @1 :Text;
}

struct ProcessExited {
  nodeId @0 :UInt64;
  workerIndex @1 :UInt32;
  pid @2 :Int32;
  exitCode @3 :Int32;   # -1 when killed by a signal
  signal @4 :Int32;     # 0 when it exited normally
}

# --- actors -------------------------------------------------------------------

struct RegisterActor {
  name @0 :Text;
  endpoint @1 :Endpoint;
}

struct LookupActor {
  name @0 :Text;
  timeoutMillis @1 :UInt64;   # wait this long for the name to be registered
}

struct ActorLocation {
  name @0 :Text;
  endpoint @1 :Endpoint;
}

struct ActorCall {
  actor @0 :Text;
  method @1 :Text;
  payload @2 :Data;
  expectsReply @3 :Bool;      # false for tell
}

struct ActorReply {
  ok @0 :Bool;
  payload @1 :Data;
  error @2 :Text;
}

struct Envelope {
  requestId @0 :UInt64;
  union {
    hello @1 :Hello;
    authenticate @2 :Authenticate;
    welcome @3 :Welcome;
    refused @4 :Error;           # authentication failed; the connection closes
    error @5 :Error;             # answer to a request that failed
    ok @6 :Void;                 # answer to a request that has no result
    heartbeat @7 :Heartbeat;
    kvPut @8 :KvPut;
    kvGet @9 :KvGet;
    kvWait @10 :KvWait;
    kvValue @11 :KvValue;
    registerNode @12 :RegisterNode;
    nodeRegistered @13 :NodeRegistered;
    registerMember @14 :RegisterMember;
    memberRegistered @15 :MemberRegistered;
    leave @16 :Void;
    subscribe @17 :Void;
    membershipUpdate @18 :MembershipUpdate;
    publishView @19 :PublishView;
    getView @20 :Void;
    view @21 :MembershipUpdate;
    draining @22 :Draining;
    processExited @23 :ProcessExited;
    registerActor @24 :RegisterActor;
    lookupActor @25 :LookupActor;
    actorLocation @26 :ActorLocation;
    actorCall @27 :ActorCall;
    actorReply @28 :ActorReply;
    kvWaitAll @29 :KvWaitAll;
    kvValues @30 :KvValues;
  }
}
