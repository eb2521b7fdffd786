#include "runtime/frame.h"

#include <kj/exception.h>

#include <cstring>

namespace elastic::runtime {
namespace {

uint32_t ReadLittleEndian32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

capnp::ReaderOptions ReaderOptionsFor(size_t words) {
  capnp::ReaderOptions options;
  // Cap'n Proto's amplification guard: reading may visit each word a few
  // times (shared pointers); beyond that the message is hostile.
  options.traversalLimitInWords = words * 4 + 1024;
  options.nestingLimit = 64;
  return options;
}

}  // namespace

IncomingFrame::IncomingFrame(kj::Array<capnp::word> words)
    : words_(std::move(words)), reader_(words_.asPtr(), ReaderOptionsFor(words_.size())) {}

proto::Envelope::Reader IncomingFrame::Envelope() {
  try {
    auto root = reader_.getRoot<proto::Envelope>();
    // which() reads the discriminant: it throws now, not later, on a bad root.
    (void)root.which();
    return root;
  } catch (const kj::Exception& e) {
    throw FrameError("malformed message: " + std::string(e.getDescription().cStr()));
  }
}

FrameDecoder::FrameDecoder(size_t max_frame_bytes) : max_frame_bytes_(max_frame_bytes) {}

void FrameDecoder::Append(const uint8_t* data, size_t size) {
  // Drop consumed bytes before growing, so the buffer holds at most one
  // partial frame plus one read's worth.
  if (consumed_ > 0 && (consumed_ == buffer_.size() || consumed_ > 64 * 1024)) {
    buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<ptrdiff_t>(consumed_));
    consumed_ = 0;
  }
  buffer_.insert(buffer_.end(), data, data + size);
}

std::shared_ptr<IncomingFrame> FrameDecoder::Next() {
  const uint8_t* begin = buffer_.data() + consumed_;
  const size_t available = buffer_.size() - consumed_;
  if (available < 4) return nullptr;

  const uint64_t segment_count = static_cast<uint64_t>(ReadLittleEndian32(begin)) + 1;
  if (segment_count > kMaxSegments) {
    throw FrameError("frame declares " + std::to_string(segment_count) + " segments (limit " +
                     std::to_string(kMaxSegments) + ")");
  }
  // Header: count word + sizes, padded to a multiple of 8 bytes.
  const size_t header_bytes = ((4 + 4 * segment_count) + 7) / 8 * 8;
  if (header_bytes > max_frame_bytes_) {
    throw FrameError("frame header of " + std::to_string(header_bytes) +
                     " bytes exceeds the frame limit of " + std::to_string(max_frame_bytes_));
  }
  if (available < header_bytes) return nullptr;

  uint64_t body_words = 0;
  for (uint64_t i = 0; i < segment_count; ++i) {
    body_words += ReadLittleEndian32(begin + 4 + 4 * i);
  }
  const uint64_t frame_bytes = header_bytes + body_words * sizeof(capnp::word);
  if (frame_bytes > max_frame_bytes_) {
    throw FrameError("frame of " + std::to_string(frame_bytes) + " bytes exceeds the limit of " +
                     std::to_string(max_frame_bytes_));
  }
  if (body_words == 0) throw FrameError("frame has no content (all segments empty)");
  if (available < frame_bytes + trailer_bytes_) return nullptr;

  // Copy into word-aligned storage that the frame owns.
  auto words = kj::heapArray<capnp::word>(frame_bytes / sizeof(capnp::word));
  std::memcpy(words.begin(), begin, frame_bytes);
  std::string trailer(reinterpret_cast<const char*>(begin) + frame_bytes, trailer_bytes_);
  consumed_ += frame_bytes + trailer_bytes_;
  try {
    auto frame = std::make_shared<IncomingFrame>(std::move(words));
    frame->set_trailer(std::move(trailer));
    return frame;
  } catch (const kj::Exception& e) {
    throw FrameError("malformed frame: " + std::string(e.getDescription().cStr()));
  }
}

kj::Array<capnp::word> EncodeFrame(capnp::MessageBuilder& message) {
  return capnp::messageToFlatArray(message);
}

std::shared_ptr<IncomingFrame> DecodeSingleFrame(const uint8_t* data, size_t size,
                                                 size_t max_frame_bytes) {
  FrameDecoder decoder(max_frame_bytes);
  decoder.Append(data, size);
  auto frame = decoder.Next();
  if (frame == nullptr) {
    throw FrameError("truncated frame: " + std::to_string(size) + " bytes is not a whole frame");
  }
  if (decoder.buffered_bytes() != 0) {
    throw FrameError(std::to_string(decoder.buffered_bytes()) + " bytes after the frame");
  }
  return frame;
}

}  // namespace elastic::runtime
