// A tar writer for the tests of the tar readers (tar.h, webdataset_index.h):
// archives built in memory, byte for byte as POSIX ustar writers make them,
// so a test can also damage them at a known offset.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace elastic::trainer::testing {

class TarWriter {
 public:
  // A member of `type` ('0' a regular file, '5' a directory, '2' a symbolic
  // link...). A name longer than 100 bytes is written as a pax extended
  // header ('x', a "path" record) before the member's own header, as
  // Python's tarfile does.
  void Add(const std::string& name, std::string_view data, char type = '0');
  // Where the next header will start: the offset of a member's header just
  // added is the size() before it (after its pax header, if any).
  size_t size() const { return out_.size(); }
  // The archive with `zero_blocks` end-of-archive blocks (tar writes two).
  std::string Finish(int zero_blocks = 2) const;

 private:
  void Header(const std::string& name, size_t size, char type);

  std::string out_;
};

}  // namespace elastic::trainer::testing
