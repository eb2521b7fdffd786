#include "trainer/elastic/preemption_notice.h"

#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/elastic/testing/fake_metadata_server.h"
#include "trainer/flags.h"

namespace elastic::trainer {
namespace {

using testing::FakeMetadataServer;
using Kind = NoticeSource::Kind;

TEST(PreemptionNoticeTest, ParsesTheSources) {
  EXPECT_EQ(ParseNoticeSource("gce").base, kGceMetadataServer);
  EXPECT_EQ(ParseNoticeSource("gce").kind, Kind::kGce);
  EXPECT_EQ(ParseNoticeSource("aws").base, kAwsMetadataServer);
  EXPECT_EQ(ParseNoticeSource("aws").kind, Kind::kAws);
  const NoticeSource proxied = ParseNoticeSource("gce:http://127.0.0.1:8080/");
  EXPECT_EQ(proxied.kind, Kind::kGce);
  EXPECT_EQ(proxied.base, "http://127.0.0.1:8080");
  EXPECT_EQ(ParseNoticeSource("https://example.internal/notice").kind, Kind::kUrl);
  for (const char* bad : {"", "azure", "gce:", "aws:169.254.169.254", "ftp://x"}) {
    try {
      ParseNoticeSource(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const FlagError& e) {
      EXPECT_NE(std::string(e.what()).find("--preemption-notice"), std::string::npos) << e.what();
    }
  }
}

TEST(PreemptionNoticeTest, ReadsEachCloudsAnswer) {
  struct Case {
    Kind kind;
    long status;
    const char* body;
    bool notice;
  };
  const Case cases[] = {
      {Kind::kGce, 200, "FALSE", false},
      {Kind::kGce, 200, "TRUE", true},
      {Kind::kGce, 200, "TRUE\n", true},
      {Kind::kGce, 403, "TRUE", false},  // refused: not an answer
      {Kind::kAws, 404, "", false},
      {Kind::kAws, 200, R"({"action": "terminate", "time": "2026-11-24T01:02:03Z"})", true},
      {Kind::kAws, 200, "<html>captive portal</html>", false},
      {Kind::kUrl, 200, "", true},
      {Kind::kUrl, 404, "", false},
      {Kind::kUrl, 503, "", false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(static_cast<int>(c.kind)) + " " + std::to_string(c.status) + " " +
                 c.body);
    EXPECT_EQ(NoticeIn(c.kind, c.status, c.body).has_value(), c.notice);
  }
}

// The watcher against a server that answers as the cloud does: nothing while
// there is no notice (with the headers the cloud demands), then exactly one
// call once it appears.
void WatchUntilNotified(FakeMetadataServer::Cloud cloud, const std::string& flag_kind,
                        const std::string& expected) {
  FakeMetadataServer server(cloud);
  std::promise<std::string> noticed;
  std::mutex mutex;
  std::vector<std::string> said;
  int calls = 0;
  {
    PreemptionWatcher watcher(
        ParseNoticeSource(flag_kind + ":" + server.url()), std::chrono::milliseconds(20),
        [&](const std::string& notice) {
          if (++calls == 1) noticed.set_value(notice);
        },
        [&](const std::string& line) {
          std::lock_guard<std::mutex> lock(mutex);
          said.push_back(line);
        });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (server.queries() < 3 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_GE(server.queries(), 3) << "the watcher never asked with the right headers";
    EXPECT_EQ(calls, 0) << "no notice yet";
    server.Notify();
    std::future<std::string> notice = noticed.get_future();
    ASSERT_EQ(notice.wait_for(std::chrono::seconds(30)), std::future_status::ready);
    EXPECT_NE(notice.get().find(expected), std::string::npos);
    const int64_t queries = server.queries();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_EQ(server.queries(), queries) << "the watcher stops after the notice";
  }
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(said.empty()) << said.front();
}

TEST(PreemptionNoticeTest, GceNoticeThroughTheMetadataServer) {
  WatchUntilNotified(FakeMetadataServer::Cloud::kGce, "gce", "GCE: instance/preempted is TRUE");
}

TEST(PreemptionNoticeTest, AwsNoticeThroughImdsV2) {
  WatchUntilNotified(FakeMetadataServer::Cloud::kAws, "aws", "\"action\": \"terminate\"");
}

// A source that cannot be reached is no notice: said once, not per poll.
TEST(PreemptionNoticeTest, AnUnreachableSourceIsSaidOnceAndIsNoNotice) {
  std::mutex mutex;
  std::vector<std::string> said;
  bool noticed = false;
  {
    // A port nothing listens on: bind one, then close it.
    FakeMetadataServer* gone = new FakeMetadataServer(FakeMetadataServer::Cloud::kGce);
    const std::string url = gone->url();
    delete gone;
    PreemptionWatcher watcher(
        ParseNoticeSource("gce:" + url), std::chrono::milliseconds(10),
        [&](const std::string&) { noticed = true; },
        [&](const std::string& line) {
          std::lock_guard<std::mutex> lock(mutex);
          said.push_back(line);
        });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  EXPECT_FALSE(noticed);
  ASSERT_EQ(said.size(), 1u);
  EXPECT_NE(said[0].find("cannot read gce"), std::string::npos) << said[0];
}

}  // namespace
}  // namespace elastic::trainer
