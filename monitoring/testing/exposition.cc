#include "monitoring/testing/exposition.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

namespace elastic::monitoring::testing {

namespace {

bool IsNameStart(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':';
}
bool IsNameChar(char c) { return IsNameStart(c) || std::isdigit(static_cast<unsigned char>(c)); }

// Reads one line of the format; every failure names the line.
class LineParser {
 public:
  LineParser(const std::string& line, int number) : line_(line), number_(number) {}

  [[noreturn]] void Fail(const std::string& what) const {
    throw ExpositionError("exposition line " + std::to_string(number_) + ": " + what + ": '" +
                          line_ + "'");
  }

  bool AtEnd() const { return pos_ >= line_.size(); }
  char Peek() const { return AtEnd() ? '\0' : line_[pos_]; }
  void SkipSpaces() {
    while (!AtEnd() && (line_[pos_] == ' ' || line_[pos_] == '\t')) ++pos_;
  }
  void Expect(char c) {
    if (Peek() != c) Fail(std::string("expected '") + c + "'");
    ++pos_;
  }

  std::string Name() {
    if (!IsNameStart(Peek())) Fail("expected a metric or label name");
    const size_t start = pos_;
    while (!AtEnd() && IsNameChar(line_[pos_])) ++pos_;
    return line_.substr(start, pos_ - start);
  }

  std::string QuotedValue() {
    Expect('"');
    std::string value;
    while (true) {
      if (AtEnd()) Fail("unterminated label value");
      const char c = line_[pos_++];
      if (c == '"') return value;
      if (c != '\\') {
        value += c;
        continue;
      }
      if (AtEnd()) Fail("dangling escape in label value");
      const char escaped = line_[pos_++];
      if (escaped == 'n') {
        value += '\n';
      } else if (escaped == '\\' || escaped == '"') {
        value += escaped;
      } else {
        Fail(std::string("unknown escape \\") + escaped);
      }
    }
  }

  std::map<std::string, std::string> Labels() {
    std::map<std::string, std::string> labels;
    if (Peek() != '{') return labels;
    ++pos_;
    SkipSpaces();
    while (Peek() != '}') {
      const std::string name = Name();
      SkipSpaces();
      Expect('=');
      SkipSpaces();
      if (!labels.emplace(name, QuotedValue()).second) Fail("label '" + name + "' repeated");
      SkipSpaces();
      if (Peek() == ',') {
        ++pos_;
        SkipSpaces();
      } else if (Peek() != '}') {
        Fail("expected ',' or '}' after a label");
      }
    }
    ++pos_;
    return labels;
  }

  std::string Word() {
    const size_t start = pos_;
    while (!AtEnd() && line_[pos_] != ' ' && line_[pos_] != '\t') ++pos_;
    return line_.substr(start, pos_ - start);
  }

  double Value() {
    const std::string word = Word();
    if (word == "+Inf" || word == "Inf") return std::numeric_limits<double>::infinity();
    if (word == "-Inf") return -std::numeric_limits<double>::infinity();
    if (word == "NaN") return std::numeric_limits<double>::quiet_NaN();
    char* end = nullptr;
    const double value = std::strtod(word.c_str(), &end);
    if (word.empty() || end != word.c_str() + word.size()) Fail("bad sample value '" + word + "'");
    return value;
  }

  std::string Rest() {
    SkipSpaces();
    return AtEnd() ? "" : line_.substr(pos_);
  }

 private:
  const std::string& line_;
  int number_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<Sample> Exposition::Find(const std::string& name,
                                     const std::map<std::string, std::string>& labels) const {
  std::vector<Sample> found;
  for (const Sample& sample : samples) {
    if (sample.name != name) continue;
    bool match = true;
    for (const auto& [key, value] : labels) {
      auto it = sample.labels.find(key);
      if (it == sample.labels.end() || it->second != value) match = false;
    }
    if (match) found.push_back(sample);
  }
  return found;
}

std::optional<double> Exposition::Value(const std::string& name,
                                        const std::map<std::string, std::string>& labels) const {
  const std::vector<Sample> found = Find(name, labels);
  if (found.empty()) return std::nullopt;
  if (found.size() > 1) {
    throw ExpositionError(std::to_string(found.size()) + " samples of " + name +
                          " match; give more labels");
  }
  return found.front().value;
}

Exposition ParseExposition(const std::string& text) {
  Exposition result;
  std::istringstream lines(text);
  std::string line;
  int number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    LineParser parser(line, number);
    parser.SkipSpaces();
    if (parser.AtEnd()) continue;
    if (parser.Peek() == '#') {
      parser.Expect('#');
      parser.SkipSpaces();
      const std::string keyword = parser.Word();
      if (keyword != "HELP" && keyword != "TYPE") continue;  // a plain comment
      parser.SkipSpaces();
      const std::string family = parser.Name();
      const std::string rest = parser.Rest();
      if (keyword == "HELP") {
        result.help[family] = rest;
      } else {
        static const char* kTypes[] = {"counter", "gauge", "histogram", "summary", "untyped"};
        bool known = false;
        for (const char* type : kTypes) known = known || rest == type;
        if (!known) parser.Fail("unknown metric type '" + rest + "'");
        if (!result.types.emplace(family, rest).second) parser.Fail("second TYPE for " + family);
      }
      continue;
    }
    Sample sample;
    sample.name = parser.Name();
    sample.labels = parser.Labels();
    parser.SkipSpaces();
    sample.value = parser.Value();
    parser.SkipSpaces();
    if (!parser.AtEnd()) parser.Word();  // an optional timestamp
    if (!parser.Rest().empty()) parser.Fail("trailing text after the sample");
    result.samples.push_back(std::move(sample));
  }
  return result;
}

}  // namespace elastic::monitoring::testing
