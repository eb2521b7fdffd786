#include "trainer/elastic/controller/copy_store.h"

#include <openssl/evp.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

#include "runtime/atomic_file.h"

namespace elastic::trainer {
namespace {

constexpr char kPrefix[] = "copy-step";

// A name CopyStore::Write makes: no directory part, so a journal cannot point
// a reader elsewhere.
bool IsCopyName(const std::string& name) {
  return name.rfind(kPrefix, 0) == 0 && name.find('/') == std::string::npos && name != "." &&
         name != "..";
}

}  // namespace

bool operator==(const StoredCopy& a, const StoredCopy& b) {
  return a.point == b.point && a.file == b.file && a.sha256 == b.sha256;
}

std::string Sha256Hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &size, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("SHA-256 failed in OpenSSL");
  static const char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < size; ++i) {
    hex.push_back(kDigits[digest[i] >> 4]);
    hex.push_back(kDigits[digest[i] & 0xf]);
  }
  return hex;
}

CopyStore::CopyStore(std::string dir) : dir_(dir.empty() ? "." : std::move(dir)) {}

StoredCopy CopyStore::Write(const StatePoint& point, std::string_view sealed) const {
  StoredCopy copy;
  copy.point = point;
  copy.sha256 = Sha256Hex(sealed);
  // The digest in the name: the same state written twice is the same file,
  // and a new state never replaces the file the journal names.
  copy.file = kPrefix + std::to_string(point.step) + "-" + copy.sha256.substr(0, 16);
  std::error_code error;
  std::filesystem::create_directories(dir_, error);
  if (error)
    throw runtime::FileWriteError("cannot create the directory " + dir_ + ": " + error.message());
  runtime::WriteFileAtomically((std::filesystem::path(dir_) / copy.file).string(), sealed, 0600);
  return copy;
}

std::string CopyStore::Read(const StoredCopy& copy) const {
  if (!IsCopyName(copy.file))
    throw StoredCopyError("the journal names \"" + copy.file + "\" as the copy, not a copy file");
  const std::string path = (std::filesystem::path(dir_) / copy.file).string();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw StoredCopyError("the controller's copy " + path + " cannot be opened");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw StoredCopyError("the controller's copy " + path + " cannot be read");
  const std::string digest = Sha256Hex(bytes);
  if (digest != copy.sha256)
    throw StoredCopyError("the controller's copy " + path + " is corrupt: its SHA-256 is " +
                          digest + ", the journal says " + copy.sha256 + " (" +
                          std::to_string(bytes.size()) + " bytes)");
  return bytes;
}

int CopyStore::RemoveAllBut(const std::optional<StoredCopy>& keep) const {
  std::error_code error;
  std::filesystem::directory_iterator it(dir_, error);
  if (error) return 0;
  int removed = 0;
  for (const std::filesystem::directory_entry& entry : it) {
    const std::string name = entry.path().filename().string();
    if (!IsCopyName(name) || (keep && name == keep->file)) continue;
    std::error_code ignored;
    if (std::filesystem::remove(entry.path(), ignored)) ++removed;
  }
  return removed;
}

}  // namespace elastic::trainer
