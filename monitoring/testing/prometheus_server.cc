#include "monitoring/testing/prometheus_server.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "monitoring/testing/http_get.h"

namespace elastic::monitoring::testing {

namespace {

void ReplaceOnce(std::string& text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  if (at == std::string::npos) {
    throw PrometheusError("scrape config has no '" + from + "' to replace");
  }
  text.replace(at, from.size(), to);
}

}  // namespace

std::string ScrapeConfigFor(const std::string& shipped_config, const std::string& target,
                            const std::string& interval) {
  std::string config = shipped_config;
  ReplaceOnce(config, "localhost:9464", target);
  ReplaceOnce(config, "scrape_interval: 5s", "scrape_interval: " + interval);
  return config;
}

PrometheusServer::PrometheusServer(const std::string& config, const std::string& work_dir,
                                   double wait_seconds)
    : wait_seconds_(wait_seconds) {
  if (access(kPrometheusBinary, X_OK) != 0) {
    throw PrometheusError(std::string(kPrometheusBinary) +
                          " is missing: run tools/setup.sh (Debian package 'prometheus')");
  }
  std::filesystem::remove_all(work_dir);
  std::filesystem::create_directories(work_dir);
  const std::string config_path = work_dir + "/prometheus.yml";
  std::ofstream out(config_path);
  out << config;
  out.close();
  if (!out) throw PrometheusError("cannot write " + config_path);
  port_ = ReserveFreePort();
  process_ = std::make_unique<ChildProcess>(
      std::vector<std::string>{kPrometheusBinary, "--config.file=" + config_path,
                               "--storage.tsdb.path=" + work_dir + "/tsdb",
                               "--web.listen-address=127.0.0.1:" + std::to_string(port_)},
      work_dir + "/prometheus.log");
  WaitUntil("Prometheus to be ready", [&] { return HttpGet(Url("/-/ready"), 5).status == 200; });
}

PrometheusServer::~PrometheusServer() { Stop(); }

std::string PrometheusServer::Url(const std::string& path) const {
  return "http://127.0.0.1:" + std::to_string(port_) + path;
}

namespace {

PrometheusServer::QueryResult ParseReply(const HttpResponse& response) {
  if (response.status == 0) return {std::nullopt, response.error};
  const nlohmann::json reply =
      nlohmann::json::parse(response.body, nullptr, /*allow_exceptions=*/false);
  if (reply.is_discarded()) return {std::nullopt, "reply is not JSON: " + response.body};
  if (reply.value("status", "") != "success") {
    return {std::nullopt, reply.value("errorType", "") + ": " + reply.value("error", "")};
  }
  return {reply.at("data"), ""};
}

std::string Seconds(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.3f", value);
  return buffer;
}

}  // namespace

PrometheusServer::QueryResult PrometheusServer::Query(const std::string& promql) const {
  return ParseReply(HttpGet(Url("/api/v1/query?query=" + UrlEncode(promql)), 10));
}

PrometheusServer::QueryResult PrometheusServer::QueryRange(const std::string& promql, double start,
                                                           double end, double step) const {
  return ParseReply(HttpGet(Url("/api/v1/query_range?query=" + UrlEncode(promql) + "&start=" +
                                Seconds(start) + "&end=" + Seconds(end) + "&step=" + Seconds(step)),
                            30));
}

std::optional<double> PrometheusServer::Scalar(const std::string& promql) const {
  const QueryResult result = Query(promql);
  if (!result.data || result.data->at("resultType") != "vector" ||
      result.data->at("result").size() != 1) {
    return std::nullopt;
  }
  return std::stod(result.data->at("result")[0].at("value")[1].get<std::string>());
}

void PrometheusServer::WaitUntil(const std::string& what, const std::function<bool()>& done) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_seconds_);
  while (!done()) {
    if (!process_->Running()) {
      throw PrometheusError("Prometheus exited (wait status " +
                            std::to_string(process_->wait_status()) + ") while waiting for " +
                            what + "; log:\n" + process_->LogTail());
    }
    if (std::chrono::steady_clock::now() > deadline) {
      throw PrometheusError("gave up waiting for " + what + " after " +
                            std::to_string(wait_seconds_) + " s; log:\n" + process_->LogTail());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

int PrometheusServer::Stop() {
  process_->Stop();
  return process_->wait_status();
}

std::string PrometheusServer::LogTail() const { return process_->LogTail(); }

}  // namespace elastic::monitoring::testing
