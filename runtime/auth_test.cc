// HMAC-SHA256 against RFC 4231, token files (strength, owner, mode, links,
// atomic exclusive creation, racing creators), the transport flags, and a
// head on a non-loopback address with a token file.
#include "runtime/auth.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

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

// A fresh empty directory under the test's temporary directory.
std::string TempDir(const std::string& name) {
  const std::string dir = TempPath(name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// A file as a user would make it by hand (not through WriteTokenFile).
void WriteByHand(const std::string& path, const std::string& text, mode_t mode = 0600) {
  std::ofstream(path, std::ios::trunc) << text;
  ASSERT_EQ(::chmod(path.c_str(), mode), 0);
}

// ReadTokenFile's error, or "" when it accepts the file.
std::string ReadError(const std::string& path) {
  try {
    ReadTokenFile(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    names.push_back(entry.path().filename().string());
  return names;
}

// 32 bytes of urandom in base64, as docs/operations.md says to make one.
constexpr char kBase64Token[] = "q3Jv0m8d2nH6Yb3cX1zW9kLp4sTe7uAa5RiGfOyQhVc=";

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

TEST(AuthTest, FrameMacsDependOnKeyNumberAndEveryByte) {
  const std::string key = SessionKey(std::string(32, 't'), "acceptor nonce", "connector nonce",
                                     /*sent_by_connector=*/true);
  ASSERT_EQ(key.size(), 32u);
  EXPECT_NE(key, SessionKey(std::string(32, 't'), "acceptor nonce", "connector nonce", false));
  EXPECT_NE(key, SessionKey(std::string(32, 't'), "other nonce", "connector nonce", true));
  EXPECT_NE(key, SessionKey(std::string(32, 'u'), "acceptor nonce", "connector nonce", true));

  std::string frame(100000, 'f');
  FrameSealer sender(key), receiver(key);
  const std::string first = sender.Next(frame.data(), frame.size());
  EXPECT_EQ(first.size(), kFrameMacBytes);
  EXPECT_EQ(first, receiver.Next(frame.data(), frame.size()));  // same key, same number
  // The same frame again (a replay) gets another MAC: its number moved on.
  const std::string second = sender.Next(frame.data(), frame.size());
  EXPECT_NE(first, second);
  frame[77777] ^= 1;  // one bit altered on the way
  EXPECT_NE(second, receiver.Next(frame.data(), frame.size()));
  EXPECT_EQ(sender.frames(), 2u);
  // Another direction's key never verifies this one's frames.
  FrameSealer other(SessionKey(std::string(32, 't'), "acceptor nonce", "connector nonce", false));
  EXPECT_NE(other.Next(frame.data(), frame.size()),
            FrameSealer(key).Next(frame.data(), frame.size()));
  EXPECT_THROW(FrameSealer("short key"), std::invalid_argument);
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
  WriteByHand(empty, "  \n");
  EXPECT_NE(ReadError(empty).find("is empty"), std::string::npos) << ReadError(empty);
}

TEST(AuthTest, WeakTokensAreRefusedWithHowToMakeOne) {
  const std::string dir = TempDir("weak");
  for (const std::string& weak : std::vector<std::string>{
           "file-token-123",
           "0123456789abcdef0123456789abcde",  // 31 hex digits: 124 bits
           "q3Jv0m8d2nH6Yb3cX1zW9",            // 21 base64 characters: 126 bits
           std::string(64, 'a'),
           "passwordpasswordpasswordpassword",
       }) {
    const std::string path = dir + "/token";
    WriteByHand(path, weak + "\n");
    const std::string error = ReadError(path);
    EXPECT_NE(error.find("too weak"), std::string::npos) << weak << ": " << error;
    EXPECT_NE(error.find(path), std::string::npos) << error;
    EXPECT_NE(error.find("head -c 32 /dev/urandom | base64"), std::string::npos) << error;
  }
  for (const std::string& strong : std::vector<std::string>{
           std::string("0123456789abcdef0123456789ABCDEF"),  // 32 hex digits: 128 bits
           std::string(kBase64Token),
           std::string("q3Jv0m8d2nH6Yb3cX1zW9k"),  // 22 base64 characters: 132 bits
           GenerateToken(),
       }) {
    const std::string path = dir + "/token";
    WriteByHand(path, strong + "\n");
    EXPECT_EQ(ReadError(path), "") << strong;
  }
  // A token handed to the head in code is held to the same rule.
  HeadOptions options;
  options.token = "file-token-123";
  try {
    Head head(options);
    FAIL() << "the head took a weak token";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("too weak"), std::string::npos) << e.what();
  }
}

TEST(AuthTest, TokenFileMustBeAPrivateRegularFileOfThisUser) {
  const std::string dir = TempDir("private");
  const std::string real = dir + "/real";
  WriteByHand(real, std::string(kBase64Token) + "\n");
  ASSERT_EQ(ReadError(real), "");

  const std::string link = dir + "/link";
  ASSERT_EQ(::symlink(real.c_str(), link.c_str()), 0);
  EXPECT_NE(ReadError(link).find("symbolic link"), std::string::npos) << ReadError(link);

  EXPECT_NE(ReadError(dir).find("not a regular file"), std::string::npos) << ReadError(dir);
  // A FIFO would block a plain open until someone writes: refused at once.
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(ReadError(fifo).find("not a regular file"), std::string::npos) << ReadError(fifo);

  ASSERT_EQ(::chmod(real.c_str(), 0640), 0);
  EXPECT_NE(ReadError(real).find("chmod 600 " + real), std::string::npos) << ReadError(real);
  ASSERT_EQ(::chmod(real.c_str(), 0600), 0);

  // Another user's file: only root can make one here (and in a sandbox with
  // user namespaces even root may not).
  if (::chown(real.c_str(), ::geteuid() + 1, ::getegid()) != 0) {
    GTEST_SKIP() << "cannot chown a file to another user here (" << std::strerror(errno)
                 << "): owner check not exercised";
  }
  EXPECT_NE(ReadError(real).find("owned by uid " + std::to_string(::geteuid() + 1)),
            std::string::npos)
      << ReadError(real);
  EXPECT_NE(ReadError(real).find("chown"), std::string::npos) << ReadError(real);
}

TEST(AuthTest, WriteTokenFileNeverReplacesAnExistingFile) {
  const std::string dir = TempDir("exclusive");
  const std::string path = dir + "/token";
  const std::string first = GenerateToken();
  EXPECT_TRUE(WriteTokenFile(path, first));
  EXPECT_FALSE(WriteTokenFile(path, GenerateToken()));
  EXPECT_EQ(ReadTokenFile(path), first);
  EXPECT_EQ(Entries(dir), std::vector<std::string>{"token"});

  // A link planted under the name is neither followed nor replaced.
  const std::string planted = dir + "/planted";
  const std::string target = dir + "/target";
  ASSERT_EQ(::symlink(target.c_str(), planted.c_str()), 0);
  EXPECT_FALSE(WriteTokenFile(planted, GenerateToken()));
  EXPECT_FALSE(std::filesystem::exists(target));
  EXPECT_TRUE(std::filesystem::is_symlink(planted));
  EXPECT_EQ(Entries(dir).size(), 2u) << "a temporary file left behind";
  // A weak token is never written.
  EXPECT_THROW(WriteTokenFile(dir + "/weak", "file-token-123"), std::invalid_argument);
  EXPECT_FALSE(std::filesystem::exists(dir + "/weak"));
}

// Two drivers started at once with the same --token-file that does not exist
// yet: both must end up with the one token that is in the file.
TEST(AuthTest, RacingCreatorsAgreeOnOneToken) {
  const std::string dir = TempDir("race");
  int disagreements = 0;
  std::vector<std::string> errors;
  for (int round = 0; round < 100; ++round) {
    const std::string path = dir + "/token-" + std::to_string(round);
    std::string seen[2];
    std::atomic<int> ready{0};
    std::vector<std::thread> drivers;
    for (int d = 0; d < 2; ++d) {
      drivers.emplace_back([&, d] {
        ++ready;
        while (ready.load() < 2) {
        }
        try {
          WriteTokenFile(path, GenerateToken());
          seen[d] = ReadTokenFile(path);
        } catch (const std::exception& e) {
          seen[d] = std::string("error: ") + e.what();
        }
      });
    }
    for (std::thread& driver : drivers) driver.join();
    if (seen[0] != seen[1] || seen[0].rfind("error: ", 0) == 0) {
      ++disagreements;
      if (errors.size() < 3) errors.push_back(seen[0] + " / " + seen[1]);
    }
  }
  EXPECT_EQ(disagreements, 0);
  for (const std::string& error : errors) ADD_FAILURE() << error;
  EXPECT_EQ(Entries(dir).size(), 100u) << "temporary files left behind";
}

TEST(AuthTest, HeadOnAnyAddressWithTokenFileAuthenticatesWithThatToken) {
  const std::string path = TempPath("cluster-token");
  std::filesystem::remove(path);
  WriteTokenFile(path, kBase64Token);
  HeadOptions options;
  options.listen_host = "0.0.0.0";
  options.token_file = path;
  Head head(options);
  EXPECT_EQ(head.token(), kBase64Token);
  HeadClientOptions client;
  client.port = head.port();
  client.token = kBase64Token;
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
