// A file mapped read-only and shared (PROT_READ, MAP_SHARED). The pages are
// the page cache's: every process on a machine that maps the same file reads
// the same physical memory, and a page is resident only once it is touched.
// This is how the data readers (CIFAR-10 batches, .npy arrays, token files)
// give eight workers one copy of the data set instead of eight.
//
// A file that shrinks while it is mapped makes reads past its new end raise
// SIGBUS: data files are written once and then only read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace elastic::trainer {

class MappedFile {
 public:
  // How the pages will be read, passed to madvise. Only a hint: a kernel
  // that ignores it reads the same bytes, perhaps more slowly.
  enum class Access {
    kNormal,      // the kernel's default readahead
    kRandom,      // samples in shuffled order: readahead would fetch pages nobody wants yet
    kSequential,  // one pass in order: read ahead further
  };

  // Maps `path` whole. An empty file is valid and maps nothing (size() 0,
  // data() nullptr): whether that is an error is the format's to say.
  // Throws std::runtime_error whose message starts with the path: "no such
  // file", "cannot open (...)", "cannot stat (...)", "not a regular file",
  // "cannot map (...)".
  explicit MappedFile(std::string path, Access access = Access::kNormal);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  // The file's bytes; valid as long as this object (or what it moved to) lives.
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

  // Changes the hint for the whole mapping (e.g. kSequential for a check
  // that reads every record once, then kRandom for training).
  void Advise(Access access) const;

 private:
  void Release() noexcept;

  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace elastic::trainer
