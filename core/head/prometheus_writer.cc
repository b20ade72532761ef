#include "core/head/prometheus_writer.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace lumen::head {
namespace {

// HELP text escapes backslash and newline; label values also the double quote.
void AppendEscaped(std::string* out, const std::string& text, bool quote) {
  for (char c : text) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '\n') {
      out->append("\\n");
    } else if (quote && c == '"') {
      out->append("\\\"");
    } else {
      out->push_back(c);
    }
  }
}

void AppendLabels(std::string* out, const PrometheusWriter::Labels& labels) {
  if (labels.empty()) return;
  out->push_back('{');
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i > 0) out->push_back(',');
    absl::StrAppend(out, labels[i].first, "=\"");
    AppendEscaped(out, labels[i].second, /*quote=*/true);
    out->push_back('"');
  }
  out->push_back('}');
}

}  // namespace

std::string PrometheusWriter::FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    return absl::StrFormat("%.0f", value);
  }
  // The shortest precision that reads back exactly.
  for (int precision = 6; precision < 17; ++precision) {
    std::string text = absl::StrFormat("%.*g", precision, value);
    if (std::strtod(text.c_str(), nullptr) == value) return text;
  }
  return absl::StrFormat("%.17g", value);
}

void PrometheusWriter::Family(const std::string& name, const std::string& type, const std::string& help) {
  absl::StrAppend(&out_, "# HELP ", name, " ");
  AppendEscaped(&out_, help, /*quote=*/false);
  absl::StrAppend(&out_, "\n# TYPE ", name, " ", type, "\n");
}

void PrometheusWriter::Sample(const std::string& name, const Labels& labels, double value) {
  out_.append(name);
  AppendLabels(&out_, labels);
  absl::StrAppend(&out_, " ", FormatValue(value), "\n");
}

void PrometheusWriter::Histogram(const std::string& name, const Labels& labels,
                                 const std::vector<double>& bounds,
                                 const std::vector<uint64_t>& counts, double sum) {
  uint64_t cumulative = 0;
  std::string bucket = absl::StrCat(name, "_bucket");
  for (size_t i = 0; i <= bounds.size(); ++i) {
    cumulative += i < counts.size() ? counts[i] : 0;
    Labels with_le = labels;
    with_le.emplace_back("le", i < bounds.size() ? FormatValue(bounds[i]) : "+Inf");
    Sample(bucket, with_le, static_cast<double>(cumulative));
  }
  Sample(absl::StrCat(name, "_sum"), labels, sum);
  Sample(absl::StrCat(name, "_count"), labels, static_cast<double>(cumulative));
}

}  // namespace lumen::head
