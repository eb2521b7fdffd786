// The cluster token and the HMAC-SHA256 challenge/response built on it.
//
// The token never crosses the wire: each side proves it knows the token by
// MACing a fresh random nonce chosen by the other side, so a recorded
// handshake cannot be replayed.
#pragma once

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

// A fresh random token (64 hex characters).
std::string GenerateToken();

// The token in a file (surrounding whitespace stripped). Throws
// std::runtime_error naming the file when it is missing, unreadable, empty or
// readable by group or others.
std::string ReadTokenFile(const std::string& path);

// Writes a token to a new file with mode 0600 (temp + fsync + rename).
void WriteTokenFile(const std::string& path, const std::string& token);

// Constant-time equality, so a MAC check leaks nothing through timing.
bool ConstantTimeEquals(const std::string& a, const std::string& b);

// The MACs of the two directions of the handshake (see protocol.capnp).
std::string ClientProof(const std::string& token, const std::string& server_nonce);
std::string ServerProof(const std::string& token, const std::string& client_nonce);

}  // namespace elastic::runtime
