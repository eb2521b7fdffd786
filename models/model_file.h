// A model the user brings as a file (--model-file), behind one small
// interface: the trainer asks it for fresh copies of the module and for the
// trained one written back in the file's own format, and knows nothing else of
// the format.
//
// TorchScript (torch.jit.script(model).save(path)) is the one format today,
// because it is the only one LibTorch can run backward through. PyTorch has
// deprecated TorchScript in favour of torch.export; a file of that kind is one
// more implementation of ModelFile once LibTorch can train it.
#ifndef ELASTIC_MODELS_MODEL_FILE_H_
#define ELASTIC_MODELS_MODEL_FILE_H_

#include <map>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/net.h"

namespace elastic::models {

// A model file that cannot be used. The message names the file and says why
// and what to do instead.
class ModelFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ModelFile {
 public:
  virtual ~ModelFile() = default;

  virtual const std::string& path() const = 0;
  // "TorchScript".
  virtual std::string format() const = 0;
  // The file name of the trained module written back (Save), e.g. "model.pt".
  virtual std::string saved_name() const = 0;
  // What is suspicious but trainable, one line each (e.g. a traced module).
  virtual const std::vector<std::string>& warnings() const = 0;

  // A fresh copy of the module with the weights the file holds. Every worker
  // and every generation calls it: copies share no tensor.
  virtual std::shared_ptr<Net> Create() const = 0;

  // Writes `trained` (a copy made by Create()) in the file's format, on the
  // CPU and in eval mode, with `extra` files beside it in the archive.
  // Throws ModelFileError when `trained` is not such a copy.
  virtual void Save(const Net& trained, std::ostream& out,
                    const std::map<std::string, std::string>& extra) const = 0;
};

// Opens `path`, recognising its format by content. Throws ModelFileError for a
// missing or unreadable file, a file that is no module (a state dict, a
// pickled model, any other file), a file written by a newer PyTorch than the
// LibTorch of this build, and a module without parameters.
std::unique_ptr<ModelFile> OpenModelFile(const std::string& path);

}  // namespace elastic::models

#endif  // ELASTIC_MODELS_MODEL_FILE_H_
