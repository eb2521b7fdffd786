#include "models/model_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "models/torchscript.h"

namespace elastic::models {

std::unique_ptr<ModelFile> OpenModelFile(const std::string& path) {
  const std::string what = "--model-file " + path;
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    throw ModelFileError(what + ": is a directory, not a file");
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) throw ModelFileError(what + ": cannot open: " + std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (file.bad()) throw ModelFileError(what + ": cannot read: " + std::strerror(errno));
  if (bytes.empty()) throw ModelFileError(what + ": the file is empty");
  // One format today; another is recognised here by its content.
  return OpenTorchScriptFile(path, std::move(bytes));
}

}  // namespace elastic::models
