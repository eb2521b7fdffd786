#include "trainer/data/index_codec.h"

#include <cstring>

namespace elastic::trainer {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
  if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("OpenSSL: cannot start a SHA-256 digest");
  }
}

void Sha256::Add(const void* data, size_t n) { EVP_DigestUpdate(ctx_.get(), data, n); }

void Sha256::Add(uint64_t v) {
  unsigned char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(v >> (8 * i));
  Add(bytes, 8);
}

void Sha256::Add(const std::string& s) {
  Add(static_cast<uint64_t>(s.size()));
  Add(s.data(), s.size());
}

std::string Sha256::Finish() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx_.get(), digest, &n);
  return std::string(reinterpret_cast<const char*>(digest), n);
}

std::string Hex(std::string_view bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

uint32_t IndexReader::U32() {
  uint32_t v;
  std::memcpy(&v, Take(4, "a number"), 4);
  return v;
}

uint64_t IndexReader::U64() {
  uint64_t v;
  std::memcpy(&v, Take(8, "a number"), 8);
  return v;
}

float IndexReader::F32() {
  float v;
  std::memcpy(&v, Take(4, "a number"), 4);
  return v;
}

std::string IndexReader::Str() {
  const uint32_t n = U32();
  return std::string(Take(n, "a string"), n);
}

uint64_t IndexReader::Count(size_t min_bytes) {
  const uint64_t n = U64();
  if (n > (bytes_.size() - at_) / min_bytes) {
    throw IndexFormatError("damaged: a count of " + std::to_string(n) + " at byte " +
                           std::to_string(base_ + at_ - 8) + " exceeds the file");
  }
  return n;
}

const char* IndexReader::Take(size_t n, const char* what) {
  if (n > bytes_.size() - at_) {
    throw IndexFormatError("damaged: " + std::string(what) + " at byte " +
                           std::to_string(base_ + at_) + " runs past the end");
  }
  const char* p = bytes_.data() + at_;
  at_ += n;
  return p;
}

std::string SealIndex(const char (&magic)[8], uint32_t version, const std::string& body) {
  Sha256 sha;
  sha.Add(body.data(), body.size());
  IndexWriter file;
  file.Bytes(magic, sizeof(magic));
  file.U32(version);
  file.U64(body.size());
  file.Bytes(sha.Finish().data(), 32);
  file.out().append(body);
  return std::move(file.out());
}

std::string_view UnsealIndex(std::string_view bytes, const char (&magic)[8], uint32_t version,
                             const std::string& kind) {
  if (bytes.size() < sizeof(magic) || std::memcmp(bytes.data(), magic, sizeof(magic)) != 0) {
    throw IndexFormatError("not " + kind + " (no " + std::string(magic, sizeof(magic)) +
                           " magic at its start)");
  }
  if (bytes.size() < kIndexHeaderBytes) {
    throw IndexFormatError("truncated: " + std::to_string(bytes.size()) +
                           " bytes, shorter than the " + std::to_string(kIndexHeaderBytes) +
                           "-byte header");
  }
  IndexReader header(bytes.substr(sizeof(magic), kIndexHeaderBytes - sizeof(magic)));
  const uint32_t found = header.U32();
  if (found != version) {
    throw IndexFormatError("version " + std::to_string(found) + ", this program reads version " +
                           std::to_string(version));
  }
  const uint64_t body_bytes = header.U64();
  const std::string_view body = bytes.substr(kIndexHeaderBytes);
  if (body.size() != body_bytes) {
    throw IndexFormatError((body.size() < body_bytes ? "truncated: " : "damaged: ") +
                           std::to_string(body.size()) + " bytes after the header, which says " +
                           std::to_string(body_bytes));
  }
  Sha256 sha;
  sha.Add(body.data(), body.size());
  if (sha.Finish() != std::string(bytes.data() + kIndexHeaderBytes - 32, 32)) {
    throw IndexFormatError("damaged: its SHA-256 does not match its contents");
  }
  return body;
}

}  // namespace elastic::trainer
