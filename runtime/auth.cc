#include "runtime/auth.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <stdexcept>

#include "runtime/atomic_file.h"

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

std::string SessionKey(const std::string& token, const std::string& acceptor_nonce,
                       const std::string& connector_nonce, bool sent_by_connector) {
  return HmacSha256(token, std::string(sent_by_connector ? "elastic-runtime/session/connector"
                                                         : "elastic-runtime/session/acceptor") +
                               acceptor_nonce + connector_nonce);
}

struct FrameSealer::Cipher {
  std::unique_ptr<EVP_CIPHER_CTX, void (*)(EVP_CIPHER_CTX*)> context{EVP_CIPHER_CTX_new(),
                                                                     EVP_CIPHER_CTX_free};
};

FrameSealer::FrameSealer(const std::string& session_key) : cipher_(std::make_unique<Cipher>()) {
  if (session_key.size() != 32) throw std::invalid_argument("a session key has 32 bytes");
  if (cipher_->context == nullptr ||
      EVP_EncryptInit_ex(cipher_->context.get(), EVP_aes_256_gcm(), nullptr,
                         reinterpret_cast<const unsigned char*>(session_key.data()),
                         nullptr) != 1) {
    throw std::runtime_error("AES-256-GCM setup failed in OpenSSL");
  }
}

FrameSealer::~FrameSealer() = default;

std::string FrameSealer::Next(const void* frame, size_t size) {
  EVP_CIPHER_CTX* context = cipher_->context.get();
  unsigned char nonce[12] = {};  // GCM's 96-bit nonce: the frame's number, then zeros
  for (int i = 0; i < 8; ++i) nonce[i] = static_cast<unsigned char>(frames_ >> (8 * i));
  ++frames_;
  auto fail = [] { return std::runtime_error("AES-256-GMAC of a frame failed in OpenSSL"); };
  if (EVP_EncryptInit_ex(context, nullptr, nullptr, nullptr, nonce) != 1) throw fail();
  const auto* bytes = static_cast<const unsigned char*>(frame);
  int unused = 0;
  for (size_t done = 0; done < size;) {  // associated data only: nothing is encrypted
    const int chunk = static_cast<int>(std::min<size_t>(size - done, 1 << 30));
    if (EVP_EncryptUpdate(context, nullptr, &unused, bytes + done, chunk) != 1) throw fail();
    done += static_cast<size_t>(chunk);
  }
  unsigned char tail[16];
  std::string mac(kFrameMacBytes, '\0');
  if (EVP_EncryptFinal_ex(context, tail, &unused) != 1 ||
      EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_GET_TAG, static_cast<int>(kFrameMacBytes),
                          mac.data()) != 1) {
    throw fail();
  }
  return mac;
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

namespace {

constexpr size_t kMinTokenBits = 128;
constexpr size_t kMinDistinctCharacters = 8;
// A token file holds one token; anything larger is the wrong file.
constexpr off_t kMaxTokenFileBytes = 4096;

bool AllHexDigits(const std::string& text) {
  return std::all_of(text.begin(), text.end(),
                     [](unsigned char c) { return std::isxdigit(c) != 0; });
}

std::string TrimWhitespace(const std::string& text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  const auto last = text.find_last_not_of(" \t\r\n");
  return text.substr(first, last - first + 1);
}

std::string OctalMode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// Closes a descriptor on every way out of ReadTokenFile.
struct FdCloser {
  int fd;
  ~FdCloser() { close(fd); }
};

// The checks on the open file: a private regular file of this user.
void CheckTokenFileStatus(int fd, const std::string& path) {
  struct stat info;
  if (fstat(fd, &info) != 0) {
    throw std::runtime_error("token file " + path + ": cannot stat: " + std::strerror(errno));
  }
  if (!S_ISREG(info.st_mode)) {
    throw std::runtime_error("token file " + path +
                             " is not a regular file (a directory, FIFO or device): "
                             "--token-file must name a file that holds the token");
  }
  if (info.st_uid != geteuid()) {
    const std::string me = std::to_string(geteuid());
    throw std::runtime_error("token file " + path + " is owned by uid " +
                             std::to_string(info.st_uid) + ", not by this user (uid " + me +
                             "): another user could have chosen the token; chown " + me + " " +
                             path + " if that user is trusted, or run as its owner");
  }
  if ((info.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    throw std::runtime_error("token file " + path + " is accessible by group or others (mode " +
                             OctalMode(info.st_mode) + "): chmod 600 " + path);
  }
  if (info.st_size > kMaxTokenFileBytes) {
    throw std::runtime_error("token file " + path + " has " + std::to_string(info.st_size) +
                             " bytes, more than a token (" + std::to_string(kMaxTokenFileBytes) +
                             " at most): is it the right file?");
  }
}

std::string ReadSmallFile(int fd, const std::string& path) {
  std::string content(static_cast<size_t>(kMaxTokenFileBytes) + 1, '\0');
  size_t size = 0;
  while (size < content.size()) {
    const ssize_t n = read(fd, content.data() + size, content.size() - size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw std::runtime_error("token file " + path + ": cannot read: " + std::strerror(errno));
    }
    if (n == 0) break;
    size += static_cast<size_t>(n);
  }
  content.resize(size);
  return content;
}

}  // namespace

std::string TokenWeakness(const std::string& token) {
  const size_t bits_per_character = AllHexDigits(token) ? 4 : 6;
  const size_t bits = token.size() * bits_per_character;
  if (bits < kMinTokenBits) {
    return "it has " + std::to_string(token.size()) + " characters, about " + std::to_string(bits) +
           " bits at " + std::to_string(bits_per_character) + " bits per character, fewer than " +
           std::to_string(kMinTokenBits);
  }
  const std::set<char> distinct(token.begin(), token.end());
  if (distinct.size() < kMinDistinctCharacters) {
    return "it uses only " + std::to_string(distinct.size()) + " different characters (" +
           std::to_string(kMinDistinctCharacters) + " at least), so it is not random";
  }
  return "";
}

std::string HowToMakeATokenFile(const std::string& path) {
  return "a cluster token needs at least 128 random bits (32 hex digits or 22 base64 "
         "characters); make one with `head -c 32 /dev/urandom | base64 > " +
         path + " && chmod 600 " + path + "`, or remove " + path +
         " and the driver (without --join) writes a new one when it starts";
}

std::string ReadTokenFile(const std::string& path) {
  // O_NOFOLLOW: a link could point the cluster at a file someone else
  // controls. O_NONBLOCK: a FIFO must not hang the open; fstat refuses it.
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0 && errno == ELOOP) {
    throw std::runtime_error("token file " + path +
                             " is a symbolic link, which is refused: give the path of the file "
                             "itself, or copy it (cp --dereference)");
  }
  if (fd < 0) throw std::runtime_error("token file " + path + ": " + std::strerror(errno));
  FdCloser closer{fd};
  CheckTokenFileStatus(fd, path);
  const std::string token = TrimWhitespace(ReadSmallFile(fd, path));
  if (token.empty()) {
    throw std::runtime_error("token file " + path + " is empty; " + HowToMakeATokenFile(path));
  }
  const std::string weakness = TokenWeakness(token);
  if (!weakness.empty()) {
    throw std::runtime_error("token file " + path + ": the token is too weak: " + weakness + "; " +
                             HowToMakeATokenFile(path));
  }
  return token;
}

bool WriteTokenFile(const std::string& path, const std::string& token) {
  const std::string weakness = TokenWeakness(token);
  if (!weakness.empty()) {
    throw std::invalid_argument("token for " + path + " is too weak: " + weakness);
  }
  try {
    return CreateFileExclusively(path, token + "\n", 0600);
  } catch (const FileWriteError& e) {
    throw std::runtime_error("token file " + path + " not written: " + e.what());
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
