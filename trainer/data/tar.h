// The tar format, as far as the project reads it: 512-byte ustar and GNU
// headers with their checksums, GNU long names ('L') and pax extended headers
// ('x', their "path" record). Two readers share it: the CIFAR-10 archive's
// unpacker (tar_gz.h) and the WebDataset shard indexer (webdataset_index.h),
// which walks an uncompressed, mapped shard's headers and notes where each
// member's bytes are, so that a sample is later read in place.
//
// libarchive would parse the same headers, but only as a stream: it does not
// give the byte offset of a member's data, which is what a shard's index
// keeps, and it is not installed on these machines (docs/data.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace elastic::trainer {

inline constexpr size_t kTarBlock = 512;

// What one header block says.
struct TarHeader {
  std::string name;  // the ustar prefix joined to the name; long names are the caller's to apply
  char type = '0';   // typeflag: '0' or '\0' a regular file, '5' a directory, 'L', 'x', 'g', ...
  uint64_t size = 0;
};

enum class TarBlock {
  kHeader,            // a header whose checksum matches
  kZero,              // all zeros: the end of the archive
  kNotAHeader,        // its size or checksum field is not a number
  kChecksumMismatch,  // the checksum field disagrees with the block's bytes
};

// Parses the 512 bytes at `block`; fills `header` for kHeader.
TarBlock ParseTarHeader(const uint8_t* block, TarHeader* header);

// `size` rounded up to whole blocks: the bytes a member's data occupies.
uint64_t TarPadded(uint64_t size);

// The "path" record of a pax extended header's records ("<len> path=<value>\n"
// ...), or "" when there is none.
std::string PaxPath(std::string_view records);

// The name a GNU 'L' entry's data gives the next entry (up to its first NUL).
std::string GnuLongName(std::string_view data);

// A member of an archive that lies in memory: a regular file's name and
// where its data is.
struct TarMember {
  std::string name;            // long names applied
  uint64_t header_offset = 0;  // of its own header (after any long-name entries)
  uint64_t data_offset = 0;
  uint64_t size = 0;
  bool regular =
      true;  // false: a link, device, fifo...: the caller decides (directories are skipped)
};

// Why a walk over an archive stopped. what() names the archive and the byte offset.
class TarError : public std::runtime_error {
 public:
  enum class Kind {
    kCorrupt,    // a block where a header should be is not one
    kTruncated,  // the bytes end inside a header or a member, or before the end-of-archive block
  };
  TarError(Kind kind, uint64_t offset, std::string reason, const std::string& what,
           std::string member = "")
      : std::runtime_error(what),
        kind_(kind),
        offset_(offset),
        reason_(std::move(reason)),
        member_(std::move(member)) {}
  Kind kind() const { return kind_; }
  // Where the block that failed starts (the archive's size: it ends there).
  uint64_t offset() const { return offset_; }
  // what() without the archive's name.
  const std::string& reason() const { return reason_; }
  // The member whose data the archive ends in; "" otherwise.
  const std::string& member() const { return member_; }

 private:
  Kind kind_;
  uint64_t offset_;
  std::string reason_;
  std::string member_;
};

// Walks the members of an uncompressed tar archive held in memory (a mapped
// shard): headers only, never a member's data unless Data() is asked for.
// The archive must end with an end-of-archive (all-zero) block, as every tar
// writer makes it: an archive cut short at a member boundary would otherwise
// look whole.
class TarScanner {
 public:
  // `name` names the archive in errors. The bytes must outlive the scanner.
  TarScanner(std::string name, const uint8_t* data, size_t size);

  // The next member that is not a directory, or nullopt after the
  // end-of-archive block. Throws TarError.
  std::optional<TarMember> Next();

  // A member's data, in place.
  std::string_view Data(const TarMember& member) const;

  const std::string& name() const { return name_; }
  int64_t headers_read() const { return headers_read_; }

 private:
  [[noreturn]] void Fail(TarError::Kind kind, uint64_t offset, const std::string& why,
                         const std::string& member = "") const;

  std::string name_;
  const uint8_t* data_;
  size_t size_;
  uint64_t offset_ = 0;
  bool ended_ = false;
  int64_t headers_read_ = 0;
};

}  // namespace elastic::trainer
