#include "trainer/checkpoint.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "runtime/atomic_file.h"
#include "trainer/bytes.h"

namespace elastic::trainer {
namespace {

constexpr std::string_view kMagic = "ELCKPT\r\n";  // CR LF catches text-mode mangling
constexpr uint64_t kFormatVersion = 1;
constexpr size_t kDigestSize = 32;
constexpr size_t kHeaderSize = 8 + 8 + 8 + kDigestSize;

std::string Sha256(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(data.data(), data.size(), digest, &size, EVP_sha256(), nullptr) != 1 ||
      size != kDigestSize) {
    throw CheckpointError("checkpoint: SHA-256 failed");
  }
  return std::string(reinterpret_cast<const char*>(digest), size);
}

}  // namespace

std::string CheckpointPath(const std::string& dir) { return dir + "/checkpoint.ckpt"; }

void WriteCheckpointFile(const std::string& path, std::string_view payload) {
  ByteWriter header;
  header.U64(kFormatVersion);
  header.U64(payload.size());
  try {
    runtime::WriteFileAtomically(path, {kMagic, header.bytes(), Sha256(payload), payload});
  } catch (const runtime::FileWriteError& e) {
    throw CheckpointError("checkpoint " + path + " not written: " + e.what());
  }
}

std::string ReadCheckpointFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError("checkpoint " + path + ": cannot open: " + std::strerror(errno));
  std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw CheckpointError("checkpoint " + path + ": read failed");
  if (file.size() < kHeaderSize || std::string_view(file).substr(0, kMagic.size()) != kMagic) {
    throw CheckpointError("checkpoint " + path +
                          ": not a checkpoint of this trainer (bad magic or shorter than the "
                          "header)");
  }
  ByteReader header(std::string_view(file).substr(kMagic.size(), 16), "checkpoint header");
  const uint64_t version = header.U64();
  const uint64_t size = header.U64();
  if (version != kFormatVersion) {
    throw CheckpointError("checkpoint " + path + ": format version " + std::to_string(version) +
                          ", this build reads version " + std::to_string(kFormatVersion));
  }
  if (size != file.size() - kHeaderSize) {
    throw CheckpointError("checkpoint " + path + ": header says " + std::to_string(size) +
                          " payload bytes, the file has " +
                          std::to_string(file.size() - kHeaderSize) + " (truncated or corrupt)");
  }
  const std::string_view digest = std::string_view(file).substr(kMagic.size() + 16, kDigestSize);
  std::string payload = file.substr(kHeaderSize);
  if (Sha256(payload) != digest)
    throw CheckpointError("checkpoint " + path + ": checksum mismatch (the file is corrupt)");
  return payload;
}

void CheckNoCheckpointToReplace(const std::string& dir, bool resume) {
  if (dir.empty() || resume) return;
  const std::string path = CheckpointPath(dir);
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return;
  throw CheckpointError(
      path +
      " holds the checkpoint of an earlier run, which this new run would replace with a "
      "freshly initialised model's: continue that run with --resume, or start a new one with "
      "another --checkpoint-dir (or move " +
      path + " away first)");
}

std::string WriteCheckpointIn(const std::string& dir, std::string_view payload) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error)
    throw CheckpointError("cannot create checkpoint directory " + dir + ": " + error.message());
  const std::string path = CheckpointPath(dir);
  WriteCheckpointFile(path, payload);
  return path;
}

}  // namespace elastic::trainer
