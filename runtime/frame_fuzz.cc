#include "runtime/frame_fuzz.h"

#include <kj/exception.h>

#include "runtime/frame.h"

// Decodes data as a stream (split in two at a point chosen by the data, to
// exercise reassembly) and reads every frame as far as the connection would:
// the whole Envelope, every pointer. Only FrameError and Cap'n Proto's own
// validation errors are acceptable outcomes; a crash, hang or sanitizer report
// is a bug.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using elastic::runtime::FrameDecoder;
  using elastic::runtime::FrameError;
  FrameDecoder decoder(1 << 20);
  const size_t split = size == 0 ? 0 : data[0] % (size + 1);
  try {
    for (const auto& [begin, end] : {std::pair<size_t, size_t>{0, split}, {split, size}}) {
      decoder.Append(data + begin, end - begin);
      while (auto frame = decoder.Next()) {
        auto envelope = frame->Envelope();
        (void)envelope.totalSize();  // visits every pointer of the message
        (void)envelope.getRequestId();
      }
    }
  } catch (const FrameError&) {
  } catch (const kj::Exception&) {
  }
  return 0;
}
