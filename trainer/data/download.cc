#include "trainer/data/download.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>

#include "trainer/data/cifar10.h"
#include "trainer/data/tar_gz.h"

namespace elastic::trainer {
namespace {

namespace fs = std::filesystem;

constexpr char kArchiveName[] = "cifar-10-binary.tar.gz";
constexpr char kBatchesDir[] = "cifar-10-batches-bin";

std::vector<std::string> AllCifar10Files() {
  std::vector<std::string> names = Cifar10FileNames(Split::kTrain);
  names.push_back(Cifar10FileNames(Split::kTest).front());
  return names;
}

bool HasAllFiles(const std::string& dir) {
  for (const std::string& name : AllCifar10Files()) {
    std::error_code ec;
    if (!fs::is_regular_file(dir + "/" + name, ec)) return false;
  }
  return true;
}

std::string HomeDir() {
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') return home;
  if (const passwd* pw = getpwuid(getuid()); pw != nullptr && pw->pw_dir != nullptr) {
    return pw->pw_dir;
  }
  throw std::runtime_error(
      "cannot find the home directory for the cache (~/.cache/elastic); set ELASTIC_CACHE");
}

// Serialises EnsureCifar10 across the processes of one machine (every worker
// of a job may ask at once): one downloads, the others then find the files.
class DirLock {
 public:
  explicit DirLock(const std::string& dir) {
    const std::string path = dir + "/.lock";
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) {
        ::close(fd_);
        throw std::runtime_error(path + ": cannot lock: " + std::strerror(errno));
      }
    }
  }
  ~DirLock() { ::close(fd_); }  // closing releases the lock
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int fd_;
};

// A one-line progress bar on stderr, redrawn at most ten times a second.
class ProgressBar {
 public:
  explicit ProgressBar(std::string label) : label_(std::move(label)) {}

  void Update(curl_off_t done, curl_off_t total) {
    if (done <= 0) return;  // nothing arrived yet (or never will: no bar for a failed connect)
    const auto now = std::chrono::steady_clock::now();
    if (done != total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    constexpr int kWidth = 30;
    const double mb = 1e6;
    if (total > 0) {
      const double fraction = static_cast<double>(done) / static_cast<double>(total);
      const int filled = static_cast<int>(fraction * kWidth);
      std::fprintf(stderr, "\r%s [%s%s] %3d%% %.1f/%.1f MB", label_.c_str(),
                   std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(),
                   static_cast<int>(fraction * 100), done / mb, total / mb);
    } else {
      std::fprintf(stderr, "\r%s %.1f MB", label_.c_str(), done / mb);
    }
    drawn_ = true;
  }

  void Finish() {
    if (drawn_) std::fprintf(stderr, "\n");
  }

  static int Callback(void* self, curl_off_t total, curl_off_t done, curl_off_t, curl_off_t) {
    static_cast<ProgressBar*>(self)->Update(done, total);
    return 0;  // go on
  }

 private:
  std::string label_;
  std::chrono::steady_clock::time_point last_{};
  bool drawn_ = false;
};

size_t WriteToFile(char* data, size_t size, size_t count, void* file) {
  return std::fwrite(data, size, count, static_cast<FILE*>(file)) * size;
}

void FsyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

std::string ParentDir(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

// Temporaries of a process killed mid-download or mid-unpack. Only called
// under the cache lock, so none of them belongs to a live process.
void RemoveLeftovers(const std::string& cache_dir) {
  const std::string part_prefix = std::string(kArchiveName) + ".part.";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(cache_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(part_prefix, 0) == 0 || name.rfind(".unpack.", 0) == 0) {
      fs::remove_all(entry.path(), ec);
    }
  }
}

}  // namespace

std::string ElasticCacheDir() {
  if (const char* cache = std::getenv("ELASTIC_CACHE"); cache != nullptr && *cache != '\0') {
    return cache;
  }
  return HomeDir() + "/.cache/elastic";
}

std::string CifarCacheDir() { return ElasticCacheDir() + "/cifar10"; }

std::string Md5OfFile(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!file) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_md5(), nullptr) != 1) {
    throw std::runtime_error("OpenSSL: cannot start an MD5 digest");
  }
  std::vector<unsigned char> buffer(1 << 20);
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), file.get())) > 0) {
    EVP_DigestUpdate(ctx.get(), buffer.data(), n);
  }
  if (std::ferror(file.get())) throw std::runtime_error(path + ": read error");
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), digest, &len);
  std::string hex;
  char byte[3];
  for (unsigned int i = 0; i < len; ++i) {
    std::snprintf(byte, sizeof(byte), "%02x", digest[i]);
    hex += byte;
  }
  return hex;
}

void DownloadFile(const std::string& url, const std::string& path, bool show_progress) {
  static std::once_flag curl_init;
  std::call_once(curl_init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });

  const std::string temp = path + ".part." + std::to_string(::getpid());
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(temp.c_str(), "wb"), std::fclose);
  if (!file) throw std::runtime_error(temp + ": cannot create: " + std::strerror(errno));
  std::unique_ptr<CURL, void (*)(CURL*)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) throw std::runtime_error("libcurl: cannot create a transfer");

  char error[CURL_ERROR_SIZE] = {0};
  ProgressBar bar("downloading " + fs::path(path).filename().string());
  curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl.get(), CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl.get(), CURLOPT_FAILONERROR, 1L);  // HTTP 404 is an error, not a file
  curl_easy_setopt(curl.get(), CURLOPT_CONNECTTIMEOUT, 30L);
  // A stalled transfer (under 1 byte/s for 60 s) fails instead of hanging forever.
  curl_easy_setopt(curl.get(), CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(curl.get(), CURLOPT_LOW_SPEED_TIME, 60L);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, WriteToFile);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, file.get());
  if (show_progress) {
    curl_easy_setopt(curl.get(), CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(curl.get(), CURLOPT_XFERINFOFUNCTION, ProgressBar::Callback);
    curl_easy_setopt(curl.get(), CURLOPT_XFERINFODATA, &bar);
  }
  const CURLcode code = curl_easy_perform(curl.get());
  bar.Finish();
  const bool flushed = std::fflush(file.get()) == 0 && ::fsync(fileno(file.get())) == 0;
  file.reset();
  if (code != CURLE_OK || !flushed) {
    std::remove(temp.c_str());
    const std::string reason = code != CURLE_OK
                                   ? (error[0] != '\0' ? error : curl_easy_strerror(code))
                                   : std::string("cannot write ") + temp;
    throw std::runtime_error("download of " + url + " failed: " + reason);
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    std::remove(temp.c_str());
    throw std::runtime_error("cannot rename " + temp + " to " + path + ": " + reason);
  }
  FsyncDir(ParentDir(path));
}

std::string EnsureCifar10(const std::string& cache_dir, const DownloadSource& source,
                          bool show_progress) {
  const std::string data_dir = cache_dir + "/" + kBatchesDir;
  if (HasAllFiles(data_dir)) return data_dir;

  std::error_code ec;
  fs::create_directories(cache_dir, ec);
  if (ec)
    throw std::runtime_error("cannot create the CIFAR-10 cache " + cache_dir + ": " + ec.message());
  DirLock lock(cache_dir);
  if (HasAllFiles(data_dir)) return data_dir;  // another process got it while we waited
  RemoveLeftovers(cache_dir);

  const std::string archive = cache_dir + "/" + kArchiveName;
  if (!fs::is_regular_file(archive, ec)) {
    if (show_progress)
      std::fprintf(stderr, "CIFAR-10 not found in %s; downloading %s\n", cache_dir.c_str(),
                   source.url.c_str());
    try {
      DownloadFile(source.url, archive, show_progress);
    } catch (const std::exception& e) {
      throw std::runtime_error(
          std::string(e.what()) +
          "\nCIFAR-10 is not on this machine and could not be downloaded. Either:\n"
          "  --data-dir DIR          a directory holding data_batch_1.bin .. data_batch_5.bin and "
          "test_batch.bin (CIFAR-10 binary version), or\n"
          "  --dataset fashion-mnist train on Fashion-MNIST, installed by tools/setup.sh");
    }
  }

  const std::string md5 = Md5OfFile(archive);
  if (md5 != source.md5) {
    std::remove(archive.c_str());  // never reuse a bad archive
    throw std::runtime_error("MD5 mismatch for " + archive + " (from " + source.url + "): got " +
                             md5 + ", expected " + source.md5 +
                             "; the file was deleted, run again to download it afresh");
  }

  // Unpack into a fresh directory, then rename it into place in one step.
  const std::string temp_dir = cache_dir + "/.unpack." + std::to_string(::getpid());
  fs::remove_all(temp_dir, ec);
  fs::create_directories(temp_dir, ec);
  if (ec) throw std::runtime_error("cannot create " + temp_dir + ": " + ec.message());
  const std::vector<std::string> wanted = AllCifar10Files();
  const std::set<std::string> wanted_set(wanted.begin(), wanted.end());
  try {
    ExtractTarGz(archive, temp_dir,
                 [&](const std::string& name) { return wanted_set.count(name) > 0; });
    for (const std::string& name : wanted) {
      if (!fs::is_regular_file(temp_dir + "/" + name, ec)) {
        throw std::runtime_error(archive + " holds no " + name +
                                 "; it is not the CIFAR-10 binary archive");
      }
    }
    fs::remove_all(data_dir, ec);  // a partial directory left by hand
    fs::rename(temp_dir, data_dir);
  } catch (...) {
    fs::remove_all(temp_dir, ec);
    throw;
  }
  FsyncDir(cache_dir);
  return data_dir;
}

}  // namespace elastic::trainer
