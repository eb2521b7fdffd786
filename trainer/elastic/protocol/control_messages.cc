#include "trainer/elastic/protocol/control_messages.h"

#include <capnp/schema.h>

#include <cstring>
#include <stdexcept>

namespace elastic::trainer {
namespace {

template <typename Union>
std::string NameOf(typename Union::Reader message) {
  const uint16_t which = static_cast<uint16_t>(message.which());
  KJ_IF_MAYBE (field, capnp::Schema::from<Union>().getFieldByDiscriminant(which)) {
    return field->getProto().getName().cStr();
  }
  return "#" + std::to_string(which) + " (unknown to this build)";
}

template <typename Union>
[[noreturn]] void Refuse(const char* receiver, typename Union::Reader message,
                         const char* union_name) {
  throw Unimplemented(std::string(receiver) + ": unimplemented message " + union_name + "." +
                      NameOf<Union>(message));
}

}  // namespace

std::string SpecRequest() {
  return EncodeMessage<proto::ToController>([](proto::ToController::Builder m) { m.setSpec(); });
}

std::string Tick() {
  return EncodeMessage<proto::ToController>([](proto::ToController::Builder m) { m.setTick(); });
}

void RefuseUnimplemented(const char* receiver, proto::ToController::Reader message) {
  Refuse<proto::ToController>(receiver, message, "ToController");
}

void RefuseUnimplemented(const char* receiver, proto::ToTrainer::Reader message) {
  Refuse<proto::ToTrainer>(receiver, message, "ToTrainer");
}

void RefuseUnimplemented(const char* receiver, const std::string& method) {
  throw Unimplemented(std::string(receiver) + ": unimplemented method '" + method +
                      "' (control messages come as '" + kControlCall + "')");
}

MessageBytes::MessageBytes(const std::string& bytes, const char* what) : what_(what) {
  if (bytes.empty() || bytes.size() % sizeof(capnp::word) != 0)
    throw std::invalid_argument(std::string("malformed ") + what +
                                " message: " + std::to_string(bytes.size()) + " bytes");
  words_ = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  std::memcpy(words_.begin(), bytes.data(), bytes.size());
  capnp::ReaderOptions options;
  // The frame is bounded by the transport already; the limit only has to
  // allow reading each field a few times.
  options.traversalLimitInWords = 8 * words_.size() + 1024;
  try {
    reader_ = kj::heap<capnp::FlatArrayMessageReader>(words_, options);
  } catch (const kj::Exception& e) {
    throw std::invalid_argument(std::string("malformed ") + what +
                                " message: " + e.getDescription().cStr());
  }
}

StatePoint FromProto(proto::StatePoint::Reader point) {
  return {point.getEpoch(), point.getPosition(), point.getStep()};
}

void ToProto(const StatePoint& point, proto::StatePoint::Builder builder) {
  builder.setEpoch(point.epoch);
  builder.setPosition(point.position);
  builder.setStep(point.step);
}

proto::StateSource::Kind ToProto(SourceKind kind) {
  switch (kind) {
    case SourceKind::kFresh:
      return proto::StateSource::Kind::FRESH;
    case SourceKind::kResume:
      return proto::StateSource::Kind::RESUME;
    case SourceKind::kMember:
      return proto::StateSource::Kind::MEMBER;
    case SourceKind::kControllerCopy:
      return proto::StateSource::Kind::CONTROLLER_COPY;
    case SourceKind::kCheckpoint:
      return proto::StateSource::Kind::CHECKPOINT;
  }
  return proto::StateSource::Kind::FRESH;
}

SourceKind FromProto(proto::StateSource::Kind kind) {
  switch (kind) {
    case proto::StateSource::Kind::FRESH:
      return SourceKind::kFresh;
    case proto::StateSource::Kind::RESUME:
      return SourceKind::kResume;
    case proto::StateSource::Kind::MEMBER:
      return SourceKind::kMember;
    case proto::StateSource::Kind::CONTROLLER_COPY:
      return SourceKind::kControllerCopy;
    case proto::StateSource::Kind::CHECKPOINT:
      return SourceKind::kCheckpoint;
  }
  throw std::invalid_argument("unknown state source kind");
}

std::vector<std::string> ToStrings(capnp::List<capnp::Text>::Reader list) {
  std::vector<std::string> out;
  for (capnp::Text::Reader text : list) out.emplace_back(text.cStr());
  return out;
}

}  // namespace elastic::trainer
