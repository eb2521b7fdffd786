#include "monitoring/testing/promql.h"

#include <cctype>

namespace elastic::monitoring::testing {

namespace {

bool IsIdentStart(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':';
}
bool IsIdentChar(char c) { return IsIdentStart(c) || std::isdigit(static_cast<unsigned char>(c)); }

// Words that are never metric names where they stand.
bool IsKeyword(const std::string& word) {
  static const std::set<std::string> kKeywords = {
      // binary and set operators, modifiers
      "and", "or", "unless", "bool", "offset", "atan2", "inf", "nan", "start", "end",
      // aggregations: may be followed by `by (...)` before their parenthesis
      "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk",
      "topk", "quantile"};
  return kKeywords.count(word) > 0;
}

// Keywords whose parenthesis holds label names, not an expression.
bool TakesLabelList(const std::string& word) {
  return word == "by" || word == "without" || word == "on" || word == "ignoring" ||
         word == "group_left" || word == "group_right";
}

class Scanner {
 public:
  explicit Scanner(const std::string& expr) : expr_(expr) {}

  std::set<std::string> Run() {
    std::set<std::string> names;
    while (pos_ < expr_.size()) {
      const char c = expr_[pos_];
      if (c == '"' || c == '\'' || c == '`') {
        SkipString();
      } else if (c == '{') {
        SkipUntilClosing('{', '}');  // label matchers
      } else if (c == '[') {
        SkipUntilClosing('[', ']');  // range or subquery, may hold $__rate_interval
      } else if (c == '$') {
        ++pos_;  // a Grafana variable: $name or ${name}
        if (pos_ < expr_.size() && expr_[pos_] == '{') SkipUntilClosing('{', '}');
        while (pos_ < expr_.size() && IsIdentChar(expr_[pos_])) ++pos_;
      } else if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
        // 0.99, 1e-3, 5m (after offset): letters glued to a number are its unit.
        while (pos_ < expr_.size() &&
               (std::isalnum(static_cast<unsigned char>(expr_[pos_])) || expr_[pos_] == '.' ||
                ((expr_[pos_] == '-' || expr_[pos_] == '+') &&
                 (expr_[pos_ - 1] == 'e' || expr_[pos_ - 1] == 'E')))) {
          ++pos_;
        }
      } else if (IsIdentStart(c)) {
        const size_t start = pos_;
        while (pos_ < expr_.size() && IsIdentChar(expr_[pos_])) ++pos_;
        const std::string word = expr_.substr(start, pos_ - start);
        const bool call = NextNonSpace() == '(';
        if (TakesLabelList(word)) {
          if (call) {
            SkipSpaces();
            SkipUntilClosing('(', ')');
          }
        } else if (!call && !IsKeyword(word)) {
          names.insert(word);
        }
      } else {
        ++pos_;
      }
    }
    return names;
  }

 private:
  char NextNonSpace() const {
    size_t p = pos_;
    while (p < expr_.size() && std::isspace(static_cast<unsigned char>(expr_[p]))) ++p;
    return p < expr_.size() ? expr_[p] : '\0';
  }
  void SkipSpaces() {
    while (pos_ < expr_.size() && std::isspace(static_cast<unsigned char>(expr_[pos_]))) ++pos_;
  }

  void SkipString() {
    const char quote = expr_[pos_++];
    while (pos_ < expr_.size() && expr_[pos_] != quote) {
      if (expr_[pos_] == '\\' && quote != '`') ++pos_;
      ++pos_;
    }
    if (pos_ >= expr_.size()) throw PromQLError("unterminated string in PromQL '" + expr_ + "'");
    ++pos_;
  }

  // pos_ is at `open`; leaves pos_ after the matching `close`.
  void SkipUntilClosing(char open, char close) {
    int depth = 0;
    while (pos_ < expr_.size()) {
      const char c = expr_[pos_];
      if (c == '"' || c == '\'' || c == '`') {
        SkipString();
        continue;
      }
      ++pos_;
      if (c == open) ++depth;
      if (c == close && --depth == 0) return;
    }
    throw PromQLError(std::string("unbalanced '") + open + "' in PromQL '" + expr_ + "'");
  }

  const std::string& expr_;
  size_t pos_ = 0;
};

}  // namespace

std::set<std::string> MetricNamesInPromQL(const std::string& expr) { return Scanner(expr).Run(); }

}  // namespace elastic::monitoring::testing
