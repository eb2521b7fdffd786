// The bytes of an index file (an image folder's, image_index.h; a WebDataset's,
// webdataset_index.h): a body of little-endian integers and length-prefixed
// strings, sealed in an envelope of a magic string, a version, the body's
// length and its SHA-256, so that a file cut short, damaged, of another
// version or of another kind is refused with the reason instead of misread.
#pragma once

#include <openssl/evp.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

// IndexFormatError: a file that is not an intact index of its kind and
// version. Declared with the image-folder index, the first of them.
#include "trainer/data/image_index.h"

namespace elastic::trainer {

class Sha256 {
 public:
  Sha256();
  void Add(const void* data, size_t n);
  void Add(uint64_t v);  // 8 bytes, little-endian
  // Length-prefixed, so that no two different lists of strings hash alike.
  void Add(const std::string& s);
  std::string Finish();  // the 32-byte digest

 private:
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx_;
};

// Lower-case hex digits of `bytes`.
std::string Hex(std::string_view bytes);

// A body being written.
class IndexWriter {
 public:
  void U32(uint32_t v) { Bytes(&v, 4); }  // little-endian hosts only (x86-64, aarch64)
  void U64(uint64_t v) { Bytes(&v, 8); }
  void F32(float v) { Bytes(&v, 4); }
  void Str(const std::string& s) {
    U32(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  void Bytes(const void* data, size_t n) { out_.append(static_cast<const char*>(data), n); }
  std::string& out() { return out_; }

 private:
  std::string out_;
};

// Reads a body. Every read is bounds-checked, so a damaged length throws
// IndexFormatError instead of reading past the end or allocating wildly;
// errors give byte offsets in the file (`base`: where the body starts).
class IndexReader {
 public:
  explicit IndexReader(std::string_view bytes, size_t base = 0) : bytes_(bytes), base_(base) {}

  uint32_t U32();
  uint64_t U64();
  float F32();
  std::string Str();
  // A count of items of at least `min_bytes` each: one that the rest of the
  // file cannot hold is damage, refused before anything is reserved.
  uint64_t Count(size_t min_bytes);
  bool done() const { return at_ == bytes_.size(); }
  size_t at() const { return at_; }

 private:
  const char* Take(size_t n, const char* what);

  std::string_view bytes_;
  size_t base_;
  size_t at_ = 0;
};

// The envelope: 8 magic bytes, the version (u32), the body's length (u64),
// its SHA-256, then the body.
inline constexpr size_t kIndexHeaderBytes = 8 + 4 + 8 + 32;

std::string SealIndex(const char (&magic)[8], uint32_t version, const std::string& body);

// The body of `bytes`. `kind` names the index in errors ("an image-folder
// index"). Throws IndexFormatError for another magic or version, a file cut
// short or with bytes after the body, or a checksum that does not match.
std::string_view UnsealIndex(std::string_view bytes, const char (&magic)[8], uint32_t version,
                             const std::string& kind);

}  // namespace elastic::trainer
