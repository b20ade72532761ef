// Dataset construction: rows into blocks, each block Put once into the store.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "lumen/train/dataset.h"

namespace lumen::train {
namespace {

void CheckRows(size_t features, int64_t feature_dim, size_t labels, int64_t label_dim) {
  if (feature_dim < 1 || label_dim < 0) throw Error("Dataset: feature_dim must be >= 1");
  if (features % feature_dim != 0 || (label_dim > 0 && labels % label_dim != 0) ||
      features / feature_dim != (label_dim > 0 ? labels / label_dim : features / feature_dim)) {
    throw Error("Dataset: " + std::to_string(features) + " feature values (dim " +
                std::to_string(feature_dim) + ") and " + std::to_string(labels) +
                " label values (dim " + std::to_string(label_dim) +
                ") do not make the same number of rows");
  }
}

DataBlock ReadCsv(const std::filesystem::path& file, int64_t feature_dim, int64_t label_dim) {
  std::ifstream in(file);
  if (!in) throw Error("Dataset: cannot read " + file.string());
  DataBlock b{.num_rows = 0, .feature_dim = feature_dim, .label_dim = label_dim};
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    std::stringstream fields(line);
    std::string field;
    int64_t column = 0;
    while (std::getline(fields, field, ',')) {
      float v = 0;
      try {
        v = std::stof(field);
      } catch (const std::exception&) {
        throw Error("Dataset: " + file.string() + ":" + std::to_string(line_no) +
                    ": not a number: \"" + field + "\"");
      }
      (column < feature_dim ? b.features : b.labels).push_back(v);
      ++column;
    }
    if (column != feature_dim + label_dim) {
      throw Error("Dataset: " + file.string() + ":" + std::to_string(line_no) + ": " +
                  std::to_string(column) + " columns, expected " +
                  std::to_string(feature_dim + label_dim));
    }
    ++b.num_rows;
  }
  return b;
}

DataBlock ReadBinary(const std::filesystem::path& file, int64_t feature_dim, int64_t label_dim) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error("Dataset: cannot read " + file.string());
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t row_bytes = static_cast<size_t>(feature_dim + label_dim) * sizeof(float);
  if (bytes.size() % row_bytes != 0) {
    throw Error("Dataset: " + file.string() + " has " + std::to_string(bytes.size()) +
                " bytes, not a multiple of a row (" + std::to_string(row_bytes) + ")");
  }
  DataBlock b{.num_rows = static_cast<int64_t>(bytes.size() / row_bytes),
              .feature_dim = feature_dim, .label_dim = label_dim};
  b.features.resize(b.num_rows * feature_dim);
  b.labels.resize(b.num_rows * label_dim);
  for (int64_t r = 0; r < b.num_rows; ++r) {
    const char* row = bytes.data() + r * row_bytes;
    std::memcpy(&b.features[r * feature_dim], row, feature_dim * sizeof(float));
    std::memcpy(&b.labels[r * label_dim], row + feature_dim * sizeof(float),
                label_dim * sizeof(float));
  }
  return b;
}

}  // namespace

Dataset Dataset::FromBlocks(std::vector<DataBlock> blocks) {
  Dataset d;
  for (DataBlock& b : blocks) {
    if (d.blocks_.empty()) {
      d.feature_dim_ = b.feature_dim;
      d.label_dim_ = b.label_dim;
    } else if (b.feature_dim != d.feature_dim_ || b.label_dim != d.label_dim_) {
      throw Error("Dataset: blocks of different row shapes");
    }
    d.block_rows_.push_back(b.num_rows);
    d.total_rows_ += b.num_rows;
    d.blocks_.push_back(lumen::Put(b));  // once, into the store; workers Get it from there
  }
  return d;
}

Dataset Dataset::FromArrays(const std::vector<float>& features, int64_t feature_dim,
                            const std::vector<float>& labels, int64_t label_dim,
                            int64_t rows_per_block) {
  CheckRows(features.size(), feature_dim, labels.size(), label_dim);
  if (rows_per_block < 1) throw Error("Dataset: rows_per_block must be >= 1");
  const int64_t rows = static_cast<int64_t>(features.size()) / feature_dim;
  std::vector<DataBlock> blocks;
  for (int64_t start = 0; start < rows; start += rows_per_block) {
    int64_t n = std::min(rows_per_block, rows - start);
    DataBlock b{.num_rows = n, .feature_dim = feature_dim, .label_dim = label_dim};
    b.features.assign(features.begin() + start * feature_dim,
                      features.begin() + (start + n) * feature_dim);
    b.labels.assign(labels.begin() + start * label_dim, labels.begin() + (start + n) * label_dim);
    blocks.push_back(std::move(b));
  }
  return FromBlocks(std::move(blocks));
}

Dataset Dataset::FromVectors(const std::vector<float>& x, const std::vector<float>& y,
                             int64_t rows_per_block) {
  return FromArrays(x, 1, y, 1, rows_per_block);
}

Dataset Dataset::FromVectors(const std::vector<std::vector<float>>& x, const std::vector<float>& y,
                             int64_t rows_per_block) {
  const int64_t dim = x.empty() ? 1 : static_cast<int64_t>(x[0].size());
  std::vector<float> flat;
  flat.reserve(x.size() * dim);
  for (const auto& row : x) {
    if (static_cast<int64_t>(row.size()) != dim) throw Error("Dataset: rows of different sizes");
    flat.insert(flat.end(), row.begin(), row.end());
  }
  return FromArrays(flat, dim, y, 1, rows_per_block);
}

Dataset Dataset::FromDirectory(const std::string& directory, FileFormat format,
                               int64_t feature_dim, int64_t label_dim) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(directory)) throw Error("Dataset: no directory " + directory);
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(directory)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<DataBlock> blocks;
  for (const auto& f : files) {
    blocks.push_back(format == FileFormat::kCsv ? ReadCsv(f, feature_dim, label_dim)
                                                : ReadBinary(f, feature_dim, label_dim));
  }
  return FromBlocks(std::move(blocks));
}

Dataset Dataset::FromObjectRefs(const std::vector<ObjectRef<DataBlock>>& blocks) {
  Dataset d;
  for (const auto& ref : blocks) {
    std::shared_ptr<DataBlock> b = lumen::Get(ref);  // to learn its shape and row count
    if (d.blocks_.empty()) {
      d.feature_dim_ = b->feature_dim;
      d.label_dim_ = b->label_dim;
    } else if (b->feature_dim != d.feature_dim_ || b->label_dim != d.label_dim_) {
      throw Error("Dataset: blocks of different row shapes");
    }
    d.block_rows_.push_back(b->num_rows);
    d.total_rows_ += b->num_rows;
    d.blocks_.push_back(ref);
  }
  return d;
}

}  // namespace lumen::train
