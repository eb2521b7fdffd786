#include "runtime/auth.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace elastic::runtime {

std::string HmacSha256(const std::string& key, std::string_view message) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_size = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac,
           &mac_size) == nullptr) {
    throw std::runtime_error("HMAC-SHA256 failed in OpenSSL");
  }
  return std::string(reinterpret_cast<const char*>(mac), mac_size);
}

std::string RandomNonce() {
  std::string nonce(kNonceBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), static_cast<int>(nonce.size())) !=
      1) {
    throw std::runtime_error("OpenSSL RAND_bytes failed: no entropy for a nonce");
  }
  return nonce;
}

std::string GenerateToken() {
  static const char kHex[] = "0123456789abcdef";
  const std::string raw = RandomNonce();
  std::string token;
  for (unsigned char c : raw) {
    token.push_back(kHex[c >> 4]);
    token.push_back(kHex[c & 15]);
  }
  return token;
}

std::string ReadTokenFile(const std::string& path) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0) {
    throw std::runtime_error("token file " + path + ": " + std::strerror(errno));
  }
  if ((info.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    throw std::runtime_error("token file " + path +
                             " is accessible by group or others; chmod 600 it");
  }
  std::ifstream in(path);
  if (!in) throw std::runtime_error("token file " + path + ": cannot open for reading");
  std::stringstream content;
  content << in.rdbuf();
  std::string token = content.str();
  const auto first = token.find_first_not_of(" \t\r\n");
  const auto last = token.find_last_not_of(" \t\r\n");
  if (first == std::string::npos) throw std::runtime_error("token file " + path + " is empty");
  return token.substr(first, last - first + 1);
}

void WriteTokenFile(const std::string& path, const std::string& token) {
  const std::string temp = path + ".tmp." + std::to_string(getpid());
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) throw std::runtime_error("token file " + temp + ": " + std::strerror(errno));
  const std::string line = token + "\n";
  const bool written = write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  const bool synced = fsync(fd) == 0;
  close(fd);
  if (!written || !synced || rename(temp.c_str(), path.c_str()) != 0) {
    unlink(temp.c_str());
    throw std::runtime_error("token file " + path + ": cannot write: " + std::strerror(errno));
  }
}

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string ClientProof(const std::string& token, const std::string& server_nonce) {
  return HmacSha256(token, "elastic-runtime/client" + server_nonce);
}

std::string ServerProof(const std::string& token, const std::string& client_nonce) {
  return HmacSha256(token, "elastic-runtime/server" + client_nonce);
}

}  // namespace elastic::runtime
