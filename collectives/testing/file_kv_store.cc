#include "collectives/testing/file_kv_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace elastic::collectives::testing {

FileKeyValueStore::FileKeyValueStore(std::string directory) : directory_(std::move(directory)) {
  if (access(directory_.c_str(), W_OK) != 0) {
    throw std::runtime_error("FileKeyValueStore: directory " + directory_ +
                             " is not writable: " + std::strerror(errno));
  }
}

std::string FileKeyValueStore::PathOf(const std::string& key) const {
  // Keys hold '/' and arbitrary bytes; hex keeps every key a plain file name.
  static const char kHex[] = "0123456789abcdef";
  std::string name = "k_";
  for (unsigned char c : key) {
    name += kHex[c >> 4];
    name += kHex[c & 15];
  }
  return directory_ + "/" + name;
}

void FileKeyValueStore::Put(const std::string& key, const std::string& value) {
  static std::atomic<uint64_t> counter{0};
  const std::string path = PathOf(key);
  const std::string temp =
      path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(counter.fetch_add(1));
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out.write(value.data(), static_cast<std::streamsize>(value.size()));
    out.flush();
    if (!out) throw std::runtime_error("FileKeyValueStore: cannot write " + temp);
  }
  // rename() makes the whole value visible at once; readers never see a prefix.
  if (rename(temp.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    unlink(temp.c_str());
    throw std::runtime_error("FileKeyValueStore: cannot publish " + path + ": " + reason);
  }
}

std::optional<std::string> FileKeyValueStore::Get(const std::string& key) {
  std::ifstream in(PathOf(key), std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::string FileKeyValueStore::Wait(const std::string& key, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(200);
  for (;;) {
    if (auto value = Get(key)) return *value;
    if (std::chrono::steady_clock::now() >= deadline) {
      throw runtime::TimeoutError("FileKeyValueStore: key " + key + " not set within " +
                                  std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(5000));
  }
}

}  // namespace elastic::collectives::testing
