#include "test/head/prometheus_parser.h"

#include <cmath>
#include <cstdlib>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace lumen::test {
namespace {

bool IsNameStart(char c, bool colon) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
}
bool IsNameChar(char c, bool colon) { return IsNameStart(c, colon) || (c >= '0' && c <= '9'); }

bool ValidName(const std::string& s, bool colon) {
  if (s.empty() || !IsNameStart(s[0], colon)) return false;
  for (char c : s)
    if (!IsNameChar(c, colon)) return false;
  return true;
}

bool ParseValue(const std::string& s, double* out) {
  if (s == "+Inf" || s == "Inf") {
    *out = INFINITY;
    return true;
  }
  if (s == "-Inf") {
    *out = -INFINITY;
    return true;
  }
  if (s == "NaN") {
    *out = NAN;
    return true;
  }
  if (s.empty()) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')) {
      return false;
    }
  }
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

// The family a series belongs to: histogram/summary suffixes stripped when the
// base is a declared family of that type.
std::string FamilyOf(const std::string& series, const std::map<std::string, std::string>& types) {
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    std::string s(suffix);
    if (series.size() > s.size() && series.compare(series.size() - s.size(), s.size(), s) == 0) {
      std::string base = series.substr(0, series.size() - s.size());
      auto it = types.find(base);
      if (it != types.end() && (it->second == "histogram" || it->second == "summary")) return base;
    }
  }
  return series;
}

absl::Status CheckHistogram(const PromFamily& f) {
  // Per label set (without le): buckets in order, cumulative, +Inf == _count.
  std::map<std::map<std::string, std::string>, std::vector<std::pair<double, double>>> buckets;
  std::map<std::map<std::string, std::string>, double> counts;
  std::set<std::map<std::string, std::string>> sums;
  for (const auto& s : f.samples) {
    auto labels = s.labels;
    if (s.name == f.name + "_bucket") {
      auto le = labels.find("le");
      if (le == labels.end()) return absl::InvalidArgumentError(f.name + ": bucket without le");
      double bound = 0;
      if (!ParseValue(le->second, &bound)) return absl::InvalidArgumentError(f.name + ": bad le");
      labels.erase(le);
      buckets[labels].emplace_back(bound, s.value);
    } else if (s.name == f.name + "_count") {
      counts[labels] = s.value;
    } else if (s.name == f.name + "_sum") {
      sums.insert(labels);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(f.name, ": stray series ", s.name));
    }
  }
  for (const auto& [labels, list] : buckets) {
    for (size_t i = 1; i < list.size(); ++i) {
      if (list[i].first <= list[i - 1].first || list[i].second < list[i - 1].second) {
        return absl::InvalidArgumentError(f.name + ": buckets not increasing or not cumulative");
      }
    }
    if (list.empty() || !std::isinf(list.back().first)) {
      return absl::InvalidArgumentError(f.name + ": no +Inf bucket");
    }
    if (!counts.contains(labels) || counts[labels] != list.back().second) {
      return absl::InvalidArgumentError(f.name + ": _count differs from the +Inf bucket");
    }
    if (!sums.contains(labels)) return absl::InvalidArgumentError(f.name + ": no _sum");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<PromFamily>> ParsePrometheusText(const std::string& text) {
  std::vector<PromFamily> families;
  std::map<std::string, std::string> types;
  std::set<std::string> closed;  // families whose samples ended
  std::set<std::pair<std::string, std::map<std::string, std::string>>> series_seen;
  if (!text.empty() && text.back() != '\n') {
    return absl::InvalidArgumentError("the last line does not end with a newline");
  }
  int number = 0;
  auto family_named = [&](const std::string& name) -> PromFamily& {
    if (families.empty() || families.back().name != name) {
      if (!families.empty()) closed.insert(families.back().name);
      families.push_back(PromFamily{name, "untyped", "", {}});
    }
    return families.back();
  };
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++number;
    std::string line(raw);
    auto fail = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat("line ", number, ": ", why, ": ", line));
    };
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(' ', 3));
      if (parts.size() < 3 || (parts[1] != "HELP" && parts[1] != "TYPE")) continue;  // a comment
      const std::string& name = parts[2];
      if (!ValidName(name, true)) return fail("bad metric name");
      if (closed.contains(name)) return fail("family appears twice");
      PromFamily& f = family_named(name);
      if (parts[1] == "TYPE") {
        if (parts.size() != 4) return fail("TYPE without a type");
        static const std::set<std::string> kTypes = {"counter", "gauge", "histogram", "summary",
                                                      "untyped"};
        if (!kTypes.contains(parts[3])) return fail("unknown type");
        if (types.contains(name)) return fail("second TYPE");
        if (!f.samples.empty()) return fail("TYPE after samples");
        types[name] = parts[3];
        f.type = parts[3];
      } else {
        f.help = parts.size() == 4 ? parts[3] : "";
      }
      continue;
    }
    // name{labels} value [timestamp]
    size_t i = 0;
    while (i < line.size() && IsNameChar(line[i], true)) ++i;
    PromSample sample;
    sample.name = line.substr(0, i);
    if (!ValidName(sample.name, true)) return fail("bad metric name");
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        size_t start = i;
        while (i < line.size() && IsNameChar(line[i], false)) ++i;
        std::string label = line.substr(start, i - start);
        if (!ValidName(label, false)) return fail("bad label name");
        if (i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') return fail("bad label");
        i += 2;
        std::string value;
        while (i < line.size() && line[i] != '"') {
          if (line[i] == '\\') {
            if (i + 1 >= line.size()) return fail("bad escape");
            char e = line[i + 1];
            if (e == '\\') value.push_back('\\');
            else if (e == '"') value.push_back('"');
            else if (e == 'n') value.push_back('\n');
            else return fail("bad escape");
            i += 2;
          } else {
            value.push_back(line[i++]);
          }
        }
        if (i >= line.size()) return fail("unterminated label value");
        ++i;  // closing quote
        if (sample.labels.contains(label)) return fail("repeated label");
        sample.labels[label] = value;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size()) return fail("unterminated labels");
      ++i;  // '}'
    }
    if (i >= line.size() || line[i] != ' ') return fail("no value");
    std::vector<std::string> rest = absl::StrSplit(line.substr(i + 1), ' ');
    if (rest.empty() || rest.size() > 2) return fail("bad value");
    if (!ParseValue(rest[0], &sample.value)) return fail("bad value");
    if (rest.size() == 2) {
      for (char c : rest[1])
        if (!((c >= '0' && c <= '9') || c == '-')) return fail("bad timestamp");
    }
    std::string family = FamilyOf(sample.name, types);
    if (closed.contains(family)) return fail("family appears twice");
    if (!series_seen.insert({sample.name, sample.labels}).second) return fail("duplicate series");
    PromFamily& f = family_named(family);
    if (f.type == "counter" && (sample.value < 0 || std::isnan(sample.value))) {
      return fail("negative counter");
    }
    f.samples.push_back(std::move(sample));
  }
  for (const auto& f : families) {
    if (f.type == "histogram") {
      if (auto s = CheckHistogram(f); !s.ok()) return s;
    }
  }
  return families;
}

}  // namespace lumen::test
