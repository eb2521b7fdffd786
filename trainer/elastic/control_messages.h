// The control plane's messages as bytes and back (control.capnp), and the
// conversions between them and the plain structs the code works with. Every
// message is the payload of an actor call whose method is one of kMethod*.
#pragma once

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/elastic/control.capnp.h"
#include "trainer/elastic/job_controller.h"

namespace elastic::trainer {

// Controller -> trainer actors. A state they carry (CommitReport.state,
// Generation's state) is a sealed Commit (commit_state.h).

inline constexpr char kMethodGeneration[] = "generation";  // proto::Generation
inline constexpr char kMethodRequest[] = "request";        // proto::StopRequest
inline constexpr char kMethodOver[] = "over";              // proto::JobOver
// Trainer actors -> controller.
inline constexpr char kMethodSpec[] = "spec";  // ask, empty payload -> proto::JobSpec
inline constexpr char kMethodHello[] = "hello";
inline constexpr char kMethodProgress[] = "progress";
inline constexpr char kMethodEpoch[] = "epoch";
inline constexpr char kMethodCommit[] = "commit";
inline constexpr char kMethodSynced[] = "synced";
inline constexpr char kMethodFirstStep[] = "first-step";
inline constexpr char kMethodCheckpoint[] = "checkpoint";
inline constexpr char kMethodFault[] = "fault";
inline constexpr char kMethodDraining[] = "draining";
inline constexpr char kMethodDone[] = "done";  // ask: answered once the controller knows
inline constexpr char kMethodStats[] = "stats";
// The controller actor's own clock (its tick thread).
inline constexpr char kMethodTick[] = "tick";

// The name of the controller actor in the head's directory, and of the
// trainer actor in every worker's actor system.
inline constexpr char kControllerActor[] = "job-controller";
inline constexpr char kTrainerActor[] = "trainer";

// Builds a message of type T with fill(T::Builder) and returns its bytes.
template <typename T, typename Fill>
std::string EncodeMessage(Fill fill) {
  capnp::MallocMessageBuilder message;
  fill(message.initRoot<T>());
  const kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  const kj::ArrayPtr<const kj::byte> bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

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

}  // namespace elastic::trainer
