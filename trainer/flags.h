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

// Whom a flag configures, which says where its value goes:
// - kTraining: the job's training (model, data, recipe): sent to every worker
//   in the typed job spec and journaled; the only flags mpirun's ranks take.
// - kElastic: the job's elastic behaviour (commits, admission, timeouts):
//   in the job spec and the journal too, refused under mpirun.
// - kProcess: this process only (its role, ports, addresses, token file, run
//   directory): never sent or journaled; a restarted driver may change them.
enum class FlagScope { kTraining, kElastic, kProcess };

class FlagSet {
 public:
  FlagSet(std::string program, std::string summary);

  // The scope of the flags added from now on (kTraining until set).
  void SetScope(FlagScope scope) { scope_ = scope; }

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

  // Names of the flags the last Parse was given, in their order.
  const std::vector<std::string>& given() const { return given_; }
  // The scope of `name` (throws std::out_of_range for an unknown flag).
  FlagScope ScopeOf(const std::string& name) const { return flags_.at(name).scope; }
  // Every flag of `scope` with the value its field holds now, as
  // --name=value would give it; ordered by name.
  std::map<std::string, std::string> Values(FlagScope scope) const;

  // What a test needs to give each flag a value other than its default.
  struct Described {
    std::string name;
    FlagScope scope;
    char kind;  // 'b', 'i', 'd' or 's'
    std::vector<std::string> choices;
  };
  std::vector<Described> Describe() const;

 private:
  enum class Kind { kBool, kInt, kDouble, kString };
  struct Flag {
    Kind kind;
    void* target;
    std::string help;
    std::string default_text;
    std::vector<std::string> choices;
    FlagScope scope = FlagScope::kTraining;
  };

  void Add(const std::string& name, Flag flag);
  void Assign(const std::string& name, Flag& flag, const std::string& value);

  std::string program_;
  std::string summary_;
  std::map<std::string, Flag> flags_;
  std::vector<std::string> order_;  // registration order, for Help()
  bool help_requested_ = false;
  FlagScope scope_ = FlagScope::kTraining;
  std::vector<std::string> given_;
};

}  // namespace elastic::trainer
