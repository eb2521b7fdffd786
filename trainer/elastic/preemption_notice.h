// Cloud preemption notices (--preemption-notice): GCE gives a spot VM 30 s and
// AWS 120 s of notice through their metadata servers, which a bare VM never
// turns into a signal. A node agent that watches the source drains its
// workers as soon as a notice appears, so they leave at a boundary instead of
// being killed mid-epoch.
//
// The sources, as the clouds document them:
// - gce: GET <base>/computeMetadata/v1/instance/preempted with
//   "Metadata-Flavor: Google" answers "FALSE", then "TRUE" once preempted.
// - aws: PUT <base>/latest/api/token (IMDSv2) gives a session token; GET
//   <base>/latest/meta-data/spot/instance-action with it answers 404 until a
//   notice, then 200 with {"action": "terminate"|"stop", "time": ...}.
// - a URL of the user's: 200 is a notice (its body is logged), anything else
//   is not.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace elastic::trainer {

struct NoticeSource {
  enum class Kind { kGce, kAws, kUrl };
  Kind kind = Kind::kUrl;
  std::string base;  // gce, aws: the metadata server; kUrl: the URL itself
};

inline constexpr char kGceMetadataServer[] = "http://metadata.google.internal";
inline constexpr char kAwsMetadataServer[] = "http://169.254.169.254";

// Parses the flag's value: "gce", "aws", "gce:URL" or "aws:URL" (another
// metadata server, e.g. a proxy or a test's), or an http(s) URL. Throws
// FlagError naming --preemption-notice.
NoticeSource ParseNoticeSource(const std::string& flag);

// What `kind`'s answer (HTTP status and body) says: the notice's text, or
// nullopt when there is none yet.
std::optional<std::string> NoticeIn(NoticeSource::Kind kind, long status, const std::string& body);

// Polls a source on its own thread until a notice appears, then calls
// on_notice once (with what the source said) and stops. A source that cannot
// be reached is not a notice: it is said once, and again when it answers.
class PreemptionWatcher {
 public:
  using OnNotice = std::function<void(const std::string& notice)>;
  using Say = std::function<void(const std::string& line)>;

  PreemptionWatcher(NoticeSource source, std::chrono::milliseconds interval, OnNotice on_notice,
                    Say say);
  ~PreemptionWatcher();  // stops polling (at most one request's timeout later)
  PreemptionWatcher(const PreemptionWatcher&) = delete;
  PreemptionWatcher& operator=(const PreemptionWatcher&) = delete;

 private:
  struct Answer {
    long status = 0;  // 0: no HTTP answer (error says why)
    std::string body;
    std::string error;
  };
  void Run();
  // One look at the source.
  Answer Poll();
  Answer Get(const std::string& url, const std::string& header, const char* method = "GET");

  const NoticeSource source_;
  const std::chrono::milliseconds interval_;
  const OnNotice on_notice_;
  const Say say_;
  std::string aws_token_;  // IMDSv2 session token; empty: none yet (or IMDSv1)
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

// "gce", "aws" or the URL, for messages.
std::string Describe(const NoticeSource& source);

}  // namespace elastic::trainer
