#include "trainer/flags.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <utility>

namespace elastic::trainer {
namespace {

std::string FormatDouble(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// The shortest text that reads back as exactly `value` ("0.1", not
// "0.10000000000000001"): what a person would have typed.
std::string ExactText(double value) {
  char text[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof(text), "%.*g", digits, value);
    if (std::strtod(text, nullptr) == value) break;
  }
  return text;
}

const char* KindName(bool is_bool, bool is_int, bool is_double) {
  if (is_bool) return "";
  if (is_int) return "=INT";
  if (is_double) return "=FLOAT";
  return "=STRING";
}

}  // namespace

FlagSet::FlagSet(std::string program, std::string summary)
    : program_(std::move(program)), summary_(std::move(summary)) {}

void FlagSet::Add(const std::string& name, Flag flag) {
  if (flags_.count(name) != 0) throw std::logic_error("flag --" + name + " registered twice");
  flag.scope = scope_;
  flags_.emplace(name, std::move(flag));
  order_.push_back(name);
}

void FlagSet::AddBool(const std::string& name, bool* target, const std::string& help) {
  Add(name, Flag{Kind::kBool, target, help, *target ? "true" : "false", {}});
}

void FlagSet::AddInt(const std::string& name, int64_t* target, const std::string& help) {
  Add(name, Flag{Kind::kInt, target, help, std::to_string(*target), {}});
}

void FlagSet::AddDouble(const std::string& name, double* target, const std::string& help) {
  Add(name, Flag{Kind::kDouble, target, help, FormatDouble(*target), {}});
}

void FlagSet::AddString(const std::string& name, std::string* target, const std::string& help,
                        std::vector<std::string> choices) {
  Add(name, Flag{Kind::kString, target, help, "\"" + *target + "\"", std::move(choices)});
}

void FlagSet::Assign(const std::string& name, Flag& flag, const std::string& value) {
  const std::string where = "--" + name + "=" + value;
  switch (flag.kind) {
    case Kind::kBool:
      if (value == "true" || value == "1") {
        *static_cast<bool*>(flag.target) = true;
      } else if (value == "false" || value == "0") {
        *static_cast<bool*>(flag.target) = false;
      } else {
        throw FlagError(where + ": expected true or false");
      }
      return;
    case Kind::kInt: {
      errno = 0;
      char* end = nullptr;
      const long long parsed = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || errno == ERANGE)
        throw FlagError(where + ": expected an integer");
      *static_cast<int64_t*>(flag.target) = parsed;
      return;
    }
    case Kind::kDouble: {
      errno = 0;
      char* end = nullptr;
      const double parsed = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(parsed))
        throw FlagError(where + ": expected a finite number");
      *static_cast<double*>(flag.target) = parsed;
      return;
    }
    case Kind::kString: {
      if (!flag.choices.empty()) {
        bool known = false;
        std::string list;
        for (const std::string& choice : flag.choices) {
          known = known || choice == value;
          list += (list.empty() ? "" : ", ") + choice;
        }
        if (!known) throw FlagError(where + ": must be one of " + list);
      }
      *static_cast<std::string*>(flag.target) = value;
      return;
    }
  }
}

void FlagSet::Parse(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_requested_ = true;
      return;
    }
    if (arg.rfind("--", 0) != 0 || arg.size() == 2)
      throw FlagError("unexpected argument '" + arg + "' (flags look like --name=value)");
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto it = flags_.find(name);
    if (it == flags_.end() && !has_value && name.rfind("no-", 0) == 0) {
      auto negated = flags_.find(name.substr(3));
      if (negated != flags_.end() && negated->second.kind == Kind::kBool) {
        *static_cast<bool*>(negated->second.target) = false;
        given_.push_back(name.substr(3));
        continue;
      }
    }
    if (it == flags_.end()) throw FlagError("unknown flag --" + name + " (see --help)");
    Flag& flag = it->second;
    if (!has_value) {
      if (flag.kind == Kind::kBool) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        throw FlagError("flag --" + name + " needs a value");
      }
    }
    Assign(name, flag, value);
    given_.push_back(name);
  }
}

std::map<std::string, std::string> FlagSet::Values(FlagScope scope) const {
  std::map<std::string, std::string> out;
  for (const auto& [name, flag] : flags_) {
    if (flag.scope != scope) continue;
    switch (flag.kind) {
      case Kind::kBool:
        out[name] = *static_cast<const bool*>(flag.target) ? "true" : "false";
        break;
      case Kind::kInt:
        out[name] = std::to_string(*static_cast<const int64_t*>(flag.target));
        break;
      case Kind::kDouble:
        out[name] = ExactText(*static_cast<const double*>(flag.target));
        break;
      case Kind::kString:
        out[name] = *static_cast<const std::string*>(flag.target);
        break;
    }
  }
  return out;
}

std::vector<FlagSet::Described> FlagSet::Describe() const {
  std::vector<Described> out;
  for (const std::string& name : order_) {
    const Flag& flag = flags_.at(name);
    const char kind = flag.kind == Kind::kBool     ? 'b'
                      : flag.kind == Kind::kInt    ? 'i'
                      : flag.kind == Kind::kDouble ? 'd'
                                                   : 's';
    out.push_back(Described{name, flag.scope, kind, flag.choices});
  }
  return out;
}

std::string FlagSet::Help() const {
  std::ostringstream out;
  out << "Usage: " << program_ << " [flags]\n\n" << summary_ << "\n\nFlags:\n";
  for (const std::string& name : order_) {
    const Flag& flag = flags_.at(name);
    out << "  --" << name
        << KindName(flag.kind == Kind::kBool, flag.kind == Kind::kInt, flag.kind == Kind::kDouble)
        << "\n      " << flag.help;
    if (!flag.choices.empty()) {
      out << " One of:";
      for (const std::string& choice : flag.choices) out << " " << choice;
      out << ".";
    }
    out << " (default: " << flag.default_text << ")\n";
  }
  out << "  --help\n      Print this text and exit.\n";
  return out.str();
}

}  // namespace elastic::trainer
