#include "trainer/elastic/control_messages.h"

#include <cstring>
#include <stdexcept>

namespace elastic::trainer {

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
