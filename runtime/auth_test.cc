// HMAC-SHA256 against RFC 4231, token files (permissions, atomic write), the
// transport flags, and a head on a non-loopback address with a token file.
#include "runtime/auth.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

#include "runtime/head.h"
#include "runtime/head_client.h"
#include "runtime/options.h"

namespace elastic::runtime {
namespace {

std::string Hex(const std::string& bytes) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

TEST(AuthTest, HmacSha256MatchesRfc4231TestCase2) {
  EXPECT_EQ(Hex(HmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(AuthTest, ProofsDependOnTokenNonceAndDirection) {
  const std::string nonce = RandomNonce();
  EXPECT_EQ(nonce.size(), kNonceBytes);
  EXPECT_NE(RandomNonce(), nonce);
  EXPECT_TRUE(ConstantTimeEquals(ClientProof("t", nonce), ClientProof("t", nonce)));
  EXPECT_FALSE(ConstantTimeEquals(ClientProof("t", nonce), ClientProof("u", nonce)));
  EXPECT_FALSE(ConstantTimeEquals(ClientProof("t", nonce), ServerProof("t", nonce)));
  EXPECT_FALSE(ConstantTimeEquals(ClientProof("t", nonce), ClientProof("t", RandomNonce())));
  EXPECT_FALSE(ConstantTimeEquals("abc", "ab"));
}

TEST(AuthTest, TokenFileRoundTripsAndMustBePrivate) {
  const std::string path = TempPath("token");
  const std::string token = GenerateToken();
  EXPECT_EQ(token.size(), 64u);
  WriteTokenFile(path, token);
  struct stat info;
  ASSERT_EQ(stat(path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  EXPECT_EQ(ReadTokenFile(path), token);

  chmod(path.c_str(), 0644);
  try {
    ReadTokenFile(path);
    FAIL() << "a world-readable token file was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_THROW(ReadTokenFile(TempPath("no-such-token")), std::runtime_error);
  const std::string empty = TempPath("empty-token");
  WriteTokenFile(empty, "  ");
  EXPECT_THROW(ReadTokenFile(empty), std::runtime_error);
}

TEST(AuthTest, HeadOnAnyAddressWithTokenFileAuthenticatesWithThatToken) {
  const std::string path = TempPath("cluster-token");
  WriteTokenFile(path, "file-token-123");
  HeadOptions options;
  options.listen_host = "0.0.0.0";
  options.token_file = path;
  Head head(options);
  EXPECT_EQ(head.token(), "file-token-123");
  HeadClientOptions client;
  client.port = head.port();
  client.token = "file-token-123";
  HeadClient kv(client);
  kv.Put("k", "v");
  EXPECT_EQ(kv.Get("k").value(), "v");
}

TEST(TransportFlagsTest, ParsesKnownFlagsAndRejectsBadValues) {
  TransportOptions options;
  EXPECT_TRUE(ParseTransportFlag("--heartbeat-ms=50", &options));
  EXPECT_TRUE(ParseTransportFlag("--heartbeat-timeout-ms=400", &options));
  EXPECT_TRUE(ParseTransportFlag("--max-frame-bytes=1048576", &options));
  EXPECT_EQ(options.heartbeat_interval.count(), 50);
  EXPECT_EQ(options.heartbeat_timeout.count(), 400);
  EXPECT_EQ(options.max_frame_bytes, 1048576u);
  EXPECT_FALSE(ParseTransportFlag("--workers=8", &options));
  EXPECT_FALSE(ParseTransportFlag("positional", &options));
  EXPECT_THROW(ParseTransportFlag("--heartbeat-ms=fast", &options), std::invalid_argument);
  EXPECT_THROW(ParseTransportFlag("--heartbeat-ms=-5", &options), std::invalid_argument);
  EXPECT_THROW(ParseTransportFlag("--max-frame-bytes=10", &options), std::invalid_argument);
  // A timeout shorter than the interval would fail every healthy peer.
  EXPECT_THROW(ParseTransportFlag("--heartbeat-timeout-ms=20", &options), std::invalid_argument);
}

TEST(TransportFlagsTest, DefaultsAreTheDocumentedOnes) {
  const TransportOptions options;
  EXPECT_EQ(options.heartbeat_interval.count(), 100);
  EXPECT_EQ(options.heartbeat_timeout.count(), 1000);
  EXPECT_EQ(options.max_frame_bytes, size_t{256} << 20);
}

}  // namespace
}  // namespace elastic::runtime
