#include "trainer/elastic/preemption_notice.h"

#include <curl/curl.h>

#include <memory>
#include <utility>

#include "trainer/flags.h"

namespace elastic::trainer {
namespace {

constexpr char kGcePath[] = "/computeMetadata/v1/instance/preempted";
constexpr char kAwsTokenPath[] = "/latest/api/token";
constexpr char kAwsNoticePath[] = "/latest/meta-data/spot/instance-action";
// Short: the notice gives 30 s (GCE) to 120 s (AWS), and a watcher must
// neither miss it nor hold the agent's exit for long.
constexpr long kRequestTimeoutMs = 2000;
constexpr size_t kMaxBodyBytes = 64 << 10;

bool IsHttpUrl(const std::string& text) {
  return text.rfind("http://", 0) == 0 || text.rfind("https://", 0) == 0;
}

std::string Trim(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t\r\n") - first + 1);
}

size_t AppendBody(char* data, size_t size, size_t count, void* user) {
  auto* body = static_cast<std::string*>(user);
  const size_t bytes = size * count;
  if (body->size() + bytes > kMaxBodyBytes) return 0;  // fails the transfer
  body->append(data, bytes);
  return bytes;
}

}  // namespace

NoticeSource ParseNoticeSource(const std::string& flag) {
  const auto with_base = [&](NoticeSource::Kind kind, const std::string& prefix,
                             const char* default_base) {
    NoticeSource source{kind, default_base};
    if (flag.size() > prefix.size()) {
      source.base = flag.substr(prefix.size() + 1);
      if (!IsHttpUrl(source.base))
        throw FlagError("--preemption-notice=" + flag + ": after '" + prefix +
                        ":' comes the metadata server's http:// URL");
      while (!source.base.empty() && source.base.back() == '/') source.base.pop_back();
    }
    return source;
  };
  if (flag == "gce" || flag.rfind("gce:", 0) == 0)
    return with_base(NoticeSource::Kind::kGce, "gce", kGceMetadataServer);
  if (flag == "aws" || flag.rfind("aws:", 0) == 0)
    return with_base(NoticeSource::Kind::kAws, "aws", kAwsMetadataServer);
  if (IsHttpUrl(flag)) return {NoticeSource::Kind::kUrl, flag};
  throw FlagError("--preemption-notice=" + flag +
                  ": expected gce, aws (their metadata servers), gce:URL or aws:URL (another "
                  "metadata server), or an http(s) URL that answers 200 once a notice is out");
}

std::optional<std::string> NoticeIn(NoticeSource::Kind kind, long status, const std::string& body) {
  if (status != 200) return std::nullopt;
  const std::string text = Trim(body);
  switch (kind) {
    case NoticeSource::Kind::kGce:
      if (text == "TRUE") return std::string("GCE: instance/preempted is TRUE");
      return std::nullopt;
    case NoticeSource::Kind::kAws:
      // 200 only once a notice is out; its body names the action and time.
      if (text.find("\"action\"") == std::string::npos) return std::nullopt;
      return "AWS spot instance-action " + text;
    case NoticeSource::Kind::kUrl:
      return text.empty() ? std::string("the URL answered 200") : text;
  }
  return std::nullopt;
}

std::string Describe(const NoticeSource& source) {
  switch (source.kind) {
    case NoticeSource::Kind::kGce:
      return "gce (" + source.base + ")";
    case NoticeSource::Kind::kAws:
      return "aws (" + source.base + ")";
    case NoticeSource::Kind::kUrl:
      return source.base;
  }
  return source.base;
}

PreemptionWatcher::PreemptionWatcher(NoticeSource source, std::chrono::milliseconds interval,
                                     OnNotice on_notice, Say say)
    : source_(std::move(source)),
      interval_(interval),
      on_notice_(std::move(on_notice)),
      say_(std::move(say)) {
  thread_ = std::thread([this] { Run(); });
}

PreemptionWatcher::~PreemptionWatcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void PreemptionWatcher::Run() {
  bool reachable = true;
  while (true) {
    const Answer answer = Poll();
    if (answer.status == 0 || (answer.status >= 500 && answer.status < 600) ||
        answer.status == 401 || answer.status == 403) {
      // Not a notice; a watcher that cannot see the source must say so once.
      if (reachable)
        say_("preemption notice: cannot read " + Describe(source_) + ": " +
             (answer.status == 0 ? answer.error : "HTTP " + std::to_string(answer.status)) +
             "; still watching");
      reachable = false;
    } else {
      if (!reachable) say_("preemption notice: " + Describe(source_) + " answers again");
      reachable = true;
      if (const std::optional<std::string> notice =
              NoticeIn(source_.kind, answer.status, answer.body)) {
        on_notice_(*notice);
        return;
      }
    }
    std::unique_lock<std::mutex> lock(mutex_);
    if (wake_.wait_for(lock, interval_, [this] { return stopping_; })) return;
  }
}

PreemptionWatcher::Answer PreemptionWatcher::Poll() {
  switch (source_.kind) {
    case NoticeSource::Kind::kGce:
      return Get(source_.base + kGcePath, "Metadata-Flavor: Google");
    case NoticeSource::Kind::kAws: {
      // IMDSv2: a session token first (kept until refused); a server that
      // has no token endpoint is IMDSv1 and answers without one.
      if (aws_token_.empty()) {
        const Answer token =
            Get(source_.base + kAwsTokenPath, "X-aws-ec2-metadata-token-ttl-seconds: 21600", "PUT");
        if (token.status == 200) aws_token_ = Trim(token.body);
      }
      Answer answer = Get(source_.base + kAwsNoticePath,
                          aws_token_.empty() ? "" : "X-aws-ec2-metadata-token: " + aws_token_);
      if (answer.status == 401) aws_token_.clear();  // expired: a new one next time
      return answer;
    }
    case NoticeSource::Kind::kUrl:
      return Get(source_.base, "");
  }
  return {};
}

PreemptionWatcher::Answer PreemptionWatcher::Get(const std::string& url, const std::string& header,
                                                 const char* method) {
  Answer answer;
  std::unique_ptr<CURL, void (*)(CURL*)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) {
    answer.error = "curl_easy_init failed";
    return answer;
  }
  char error[CURL_ERROR_SIZE] = "";
  curl_slist* headers = nullptr;
  if (!header.empty()) headers = curl_slist_append(headers, header.c_str());
  std::unique_ptr<curl_slist, void (*)(curl_slist*)> owned(headers, curl_slist_free_all);
  curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_CUSTOMREQUEST, method);
  curl_easy_setopt(curl.get(), CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl.get(), CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl.get(), CURLOPT_TIMEOUT_MS, kRequestTimeoutMs);
  curl_easy_setopt(curl.get(), CURLOPT_NOSIGNAL, 1L);  // a thread of a multi-threaded process
  curl_easy_setopt(curl.get(), CURLOPT_NOPROXY, "*");  // metadata servers are link-local
  curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, AppendBody);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &answer.body);
  const CURLcode code = curl_easy_perform(curl.get());
  if (code != CURLE_OK) {
    answer.error = error[0] != '\0' ? error : curl_easy_strerror(code);
    return answer;
  }
  curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &answer.status);
  return answer;
}

}  // namespace elastic::trainer
