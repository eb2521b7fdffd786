// The control plane's messages as bytes and back (control.capnp), and the
// conversions between them and the plain structs the code works with. Every
// actor call between the controller and a trainer carries one ToController
// or ToTrainer message (built by EncodeControl, SpecRequest, Tick), and its
// receiver dispatches by a switch on the union's member.
#pragma once

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/elastic/protocol/control.capnp.h"
#include "trainer/elastic/protocol/state_source.h"

namespace elastic::trainer {

// The name of the controller actor in the head's directory, and of the
// trainer actor in every worker's actor system.
inline constexpr char kControllerActor[] = "job-controller";
inline constexpr char kTrainerActor[] = "trainer";

// The one method every control-plane call names. The runtime's actor call
// (runtime/actor.h) still carries a method, generic as the runtime is; here
// it is always this one and what a message is, its union member says.
inline constexpr char kControlCall[] = "control";

// Thrown by a receiver for a message it does not implement: a union left
// unset, a member it does not know (a newer sender), a call with another
// method. The runtime answers an ask with an AskError carrying what() and
// logs a tell; the actor goes on with its next message.
class Unimplemented : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Which union member carries the struct T: Union is proto::ToController or
// proto::ToTrainer, Init(message) sets the member and returns its builder,
// kName names it (for logs). One ELASTIC_CONTROL_MEMBER line below per
// member with a struct type; EncodeControl refuses any other T at compile time.
template <typename T>
struct ControlMember {
  static constexpr bool kMapped = false;
};

#define ELASTIC_CONTROL_MEMBER(UNION, TYPE, MEMBER, NAME)                           \
  template <>                                                                       \
  struct ControlMember<proto::TYPE> {                                               \
    static constexpr bool kMapped = true;                                           \
    static constexpr const char* kName = NAME;                                      \
    using Union = proto::UNION;                                                     \
    static proto::TYPE::Builder Init(Union::Builder m) { return m.init##MEMBER(); } \
  }
// Controller -> trainer actors. A state they carry (Generation's source) is a
// sealed Commit (commit_state.h).
ELASTIC_CONTROL_MEMBER(ToTrainer, Generation, Generation, "generation");
ELASTIC_CONTROL_MEMBER(ToTrainer, StopRequest, Request, "request");
ELASTIC_CONTROL_MEMBER(ToTrainer, JobOver, Over, "over");
// Trainer actors -> controller. Its Void members spec and tick: SpecRequest(), Tick().
ELASTIC_CONTROL_MEMBER(ToController, Hello, Hello, "hello");
ELASTIC_CONTROL_MEMBER(ToController, Progress, Progress, "progress");
ELASTIC_CONTROL_MEMBER(ToController, EpochSummary, Epoch, "epoch");
ELASTIC_CONTROL_MEMBER(ToController, Evaluation, Evaluation, "evaluation");
ELASTIC_CONTROL_MEMBER(ToController, CommitReport, Commit, "commit");
ELASTIC_CONTROL_MEMBER(ToController, Synced, Synced, "synced");
ELASTIC_CONTROL_MEMBER(ToController, FirstStep, FirstStep, "firstStep");
ELASTIC_CONTROL_MEMBER(ToController, CheckpointWritten, Checkpoint, "checkpoint");
ELASTIC_CONTROL_MEMBER(ToController, Fault, Fault, "fault");
ELASTIC_CONTROL_MEMBER(ToController, Draining, Draining, "draining");
ELASTIC_CONTROL_MEMBER(ToController, Done, Done, "done");  // an ask, answered once known
ELASTIC_CONTROL_MEMBER(ToController, WorkerStats, Stats, "stats");
ELASTIC_CONTROL_MEMBER(ToController, ParamsChecksum, Params, "params");
ELASTIC_CONTROL_MEMBER(ToController, Shares, Shares, "shares");
#undef ELASTIC_CONTROL_MEMBER

// Builds a message of type T with fill(T::Builder) and returns its bytes.
template <typename T, typename Fill>
std::string EncodeMessage(Fill fill) {
  capnp::MallocMessageBuilder message;
  fill(message.initRoot<T>());
  const kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  const kj::ArrayPtr<const kj::byte> bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

// The ToController or ToTrainer message whose member is the struct T, filled
// by fill(T::Builder):
//   controller.Tell(kControlCall, EncodeControl<proto::Progress>([&](proto::Progress::Builder m) {
//     m.setStep(step);
//   }));
template <typename T, typename Fill>
std::string EncodeControl(Fill fill) {
  static_assert(ControlMember<T>::kMapped,
                "T is no member of ToController or ToTrainer (control.capnp): add it there and "
                "its ELASTIC_CONTROL_MEMBER line in control_messages.h");
  using Member = ControlMember<T>;
  using Union = typename Member::Union;
  return EncodeMessage<Union>(
      [&](typename Union::Builder message) { fill(Member::Init(message)); });
}
// ToController.spec (an ask: the answer is a JobSpec message).
std::string SpecRequest();
// ToController.tick (the controller's own clock).
std::string Tick();

// Reads bytes as one message (whatever its size: a state copy can be hundreds
// of megabytes). Throws std::invalid_argument naming `what` for bytes that are
// not a message.
class MessageBytes {
 public:
  MessageBytes(const std::string& bytes, const char* what);
  template <typename T>
  typename T::Reader Get() {
    try {
      return reader_->getRoot<T>();
    } catch (const kj::Exception& e) {
      throw std::invalid_argument(std::string("malformed ") + what_ +
                                  " message: " + e.getDescription().cStr());
    }
  }

 private:
  kj::Array<capnp::word> words_;
  kj::Own<capnp::FlatArrayMessageReader> reader_;
  const char* what_;
};

StatePoint FromProto(proto::StatePoint::Reader point);
void ToProto(const StatePoint& point, proto::StatePoint::Builder builder);
proto::StateSource::Kind ToProto(SourceKind kind);
SourceKind FromProto(proto::StateSource::Kind kind);

std::vector<std::string> ToStrings(capnp::List<capnp::Text>::Reader list);

// Throws Unimplemented: `receiver` does not handle `message` (the default of
// a dispatch switch), or a call named `method` (another than kControlCall).
[[noreturn]] void RefuseUnimplemented(const char* receiver, proto::ToController::Reader message);
[[noreturn]] void RefuseUnimplemented(const char* receiver, proto::ToTrainer::Reader message);
[[noreturn]] void RefuseUnimplemented(const char* receiver, const std::string& method);

}  // namespace elastic::trainer
