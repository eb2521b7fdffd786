// The cluster token and the HMAC-SHA256 challenge/response built on it.
//
// The token never crosses the wire: each side proves it knows the token by
// MACing a fresh random nonce chosen by the other side, so a recorded
// handshake cannot be replayed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace elastic::runtime {

// Environment variable through which node agents hand the token to workers
// (never argv: argv is world-readable in /proc).
constexpr const char* kTokenEnvironmentVariable = "ELASTIC_RUNTIME_TOKEN";

constexpr size_t kNonceBytes = 32;

// HMAC-SHA256(key, message), 32 raw bytes.
std::string HmacSha256(const std::string& key, std::string_view message);

// kNonceBytes from the OS's cryptographic generator.
std::string RandomNonce();

// A fresh random token (64 hex characters, 256 bits).
std::string GenerateToken();

// Why `token` is too weak to be a cluster token, or "" when it is not.
// Strength is estimated simply: 4 bits per character when every character is
// a hex digit, else 6 (base64); at least 128 bits, so 32 hex digits or 22
// base64 characters, and at least 8 different characters (which refuses
// "aaaa..." and repeated words). A random token passes; what a person types
// does not.
std::string TokenWeakness(const std::string& token);

// The commands that make a good token file at `path`, for error messages.
std::string HowToMakeATokenFile(const std::string& path);

// The token in a file (surrounding whitespace stripped). Throws
// std::runtime_error naming the file and saying how to fix it when it is
// missing, a symbolic link, not a regular file, not owned by this user,
// accessible by group or others, empty, or too weak (TokenWeakness).
std::string ReadTokenFile(const std::string& path);

// Creates `path` holding `token`, mode 0600, atomically (a temporary file
// beside it, fsync, then a rename that never replaces), unless something
// already has that name: then returns false and leaves it alone, so that two
// drivers racing to create the file both use the one token that won. Throws
// std::invalid_argument for a weak token, std::runtime_error naming the file
// when it cannot be written.
bool WriteTokenFile(const std::string& path, const std::string& token);

// Constant-time equality, so a MAC check leaks nothing through timing.
bool ConstantTimeEquals(const std::string& a, const std::string& b);

// Every frame after the handshake is followed by a MAC of kFrameMacBytes.
constexpr size_t kFrameMacBytes = 16;

// The key that MACs the frames one side sends after the handshake: derived
// from the token and both handshake nonces, so a relay that passed the
// handshake through (and knows no token) can neither forge nor replay one.
std::string SessionKey(const std::string& token, const std::string& acceptor_nonce,
                       const std::string& connector_nonce, bool sent_by_connector);

// The MACs of one direction's frames, numbered from 0, so that a frame
// dropped, repeated or reordered fails too. AES-256-GMAC (GCM with the frame
// as associated data and its number as the nonce): a session key MACs each
// number once, and GMAC runs at memory speed where HMAC-SHA256 halved the
// runtime's throughput of 1 MB messages.
class FrameSealer {
 public:
  explicit FrameSealer(const std::string& session_key);  // 32 bytes
  ~FrameSealer();
  FrameSealer(const FrameSealer&) = delete;
  FrameSealer& operator=(const FrameSealer&) = delete;

  // The MAC (kFrameMacBytes) of the next frame.
  std::string Next(const void* frame, size_t size);
  uint64_t frames() const { return frames_; }

 private:
  struct Cipher;
  std::unique_ptr<Cipher> cipher_;
  uint64_t frames_ = 0;
};

// The MACs of the two directions of the handshake (see protocol.capnp).
std::string ClientProof(const std::string& token, const std::string& server_nonce);
std::string ServerProof(const std::string& token, const std::string& client_nonce);

}  // namespace elastic::runtime
