// Cap'n Proto's standard stream framing, decoded incrementally and defensively.
//
// A frame is: uint32 (segment count - 1), one uint32 size (in 8-byte words) per
// segment, zero padding to a word boundary, then the segments. The decoder
// checks every size against a limit before it allocates anything, so a peer
// cannot make us buffer more than max_frame_bytes for one frame.
#pragma once

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/array.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/protocol.capnp.h"

namespace elastic::runtime {

// A frame that breaks the framing rules or the size limit. The connection that
// sent it is closed; what() names the problem.
class FrameError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Cap'n Proto itself refuses messages with more segments than this.
constexpr uint32_t kMaxSegments = 512;

// One received frame, owning its words, with the Envelope it holds. Reading
// the root validates pointers lazily; Envelope() throws FrameError when the
// message inside the frame is malformed.
class IncomingFrame {
 public:
  explicit IncomingFrame(kj::Array<capnp::word> words);
  IncomingFrame(const IncomingFrame&) = delete;
  IncomingFrame& operator=(const IncomingFrame&) = delete;

  proto::Envelope::Reader Envelope();
  size_t size_bytes() const { return words_.size() * sizeof(capnp::word); }
  // The frame as it came (segment table and segments), for its MAC.
  kj::ArrayPtr<const kj::byte> bytes() const { return words_.asBytes(); }
  // The bytes that followed the frame on the stream (FrameDecoder's trailer).
  const std::string& trailer() const { return trailer_; }
  void set_trailer(std::string trailer) { trailer_ = std::move(trailer); }

 private:
  kj::Array<capnp::word> words_;
  capnp::FlatArrayMessageReader reader_;
  std::string trailer_;
};

// Turns a byte stream into whole frames. Feed it whatever the socket gave;
// take frames out with Next() until it returns null.
class FrameDecoder {
 public:
  explicit FrameDecoder(size_t max_frame_bytes);

  // Appends bytes received from the stream.
  void Append(const uint8_t* data, size_t size);

  // The next complete frame, or null when more bytes are needed. Throws
  // FrameError when the bytes cannot be a valid frame; the decoder is then
  // unusable (the stream has lost its framing).
  std::shared_ptr<IncomingFrame> Next();

  // Bytes buffered that do not yet form a frame (a truncated frame at close).
  size_t buffered_bytes() const { return buffer_.size() - consumed_; }

  // Changes the limit for frames not yet started (e.g. after authentication).
  void set_max_frame_bytes(size_t max_frame_bytes) { max_frame_bytes_ = max_frame_bytes; }

  // From the next frame on, each frame is followed by `bytes` more (a MAC),
  // which Next() hands over with the frame (IncomingFrame::trailer).
  void set_trailer_bytes(size_t bytes) { trailer_bytes_ = bytes; }

 private:
  size_t max_frame_bytes_;
  size_t trailer_bytes_ = 0;
  std::vector<uint8_t> buffer_;
  size_t consumed_ = 0;
};

// Cap'n Proto Data <-> std::string (bytes).
inline std::string ToBytes(capnp::Data::Reader data) {
  return std::string(reinterpret_cast<const char*>(data.begin()), data.size());
}
inline capnp::Data::Reader AsData(const std::string& bytes) {
  return capnp::Data::Reader(reinterpret_cast<const kj::byte*>(bytes.data()), bytes.size());
}

// Serialises a message in the standard framing.
kj::Array<capnp::word> EncodeFrame(capnp::MessageBuilder& message);

// Decodes exactly one frame from bytes (tests and the fuzz target). Throws
// FrameError for anything that is not one complete valid frame.
std::shared_ptr<IncomingFrame> DecodeSingleFrame(const uint8_t* data, size_t size,
                                                 size_t max_frame_bytes);

}  // namespace elastic::runtime
