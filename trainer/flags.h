// A small command-line flag parser: each flag is bound to a field that holds
// its default, so --help can print the default next to the help text.
//
// It is its own class so that every binary composes the flags it needs: the
// single-process trainer registers the training flags (train_options.h), the
// distributed trainer adds its own (--workers, --join, ...) to the same set.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace elastic::trainer {

// A flag that is unknown, malformed or out of range. The message names it.
class FlagError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class FlagSet {
 public:
  FlagSet(std::string program, std::string summary);

  // Each Add binds `--name` to *target; the value *target holds now is the
  // default shown by Help(). Names are lowercase words joined by '-'.
  void AddBool(const std::string& name, bool* target, const std::string& help);
  void AddInt(const std::string& name, int64_t* target, const std::string& help);
  void AddDouble(const std::string& name, double* target, const std::string& help);
  // With `choices`, any other value is rejected.
  void AddString(const std::string& name, std::string* target, const std::string& help,
                 std::vector<std::string> choices = {});

  // Accepts --name=value and --name value; a bool also takes --name and
  // --no-name. --help sets help_requested() and stops. Throws FlagError on an
  // unknown flag, a missing or malformed value, or a positional argument.
  void Parse(int argc, const char* const* argv);

  bool help_requested() const { return help_requested_; }
  // The usage text: every flag with its value type, help and default.
  std::string Help() const;

 private:
  enum class Kind { kBool, kInt, kDouble, kString };
  struct Flag {
    Kind kind;
    void* target;
    std::string help;
    std::string default_text;
    std::vector<std::string> choices;
  };

  void Add(const std::string& name, Flag flag);
  void Assign(const std::string& name, Flag& flag, const std::string& value);

  std::string program_;
  std::string summary_;
  std::map<std::string, Flag> flags_;
  std::vector<std::string> order_;  // registration order, for Help()
  bool help_requested_ = false;
};

}  // namespace elastic::trainer
