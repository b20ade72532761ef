// Datasets for DataParallelTrainer: rows of float features and labels, stored
// as blocks in the object store (Put once by the driver; every worker reads
// the blocks it needs straight from the store), and each worker's shard of
// them, reshuffled per epoch like PyTorch's DistributedSampler.
//
//   auto ds = lumen::train::Dataset::FromVectors(x, y);       // 1 feature, 1 label per row
//   // in the train loop:
//   auto shard = ctx.GetDatasetShard("train");
//   for (const lumen::train::Batch& b : shard.Batches(16, /*seed=*/epoch)) { ... b.x(i)[0] ... }
//
// Dataset is a value (it holds ObjectRefs): copy it, pass it to tasks.
// Thread-safety: Dataset is immutable; a DatasetShard and its batch streams
// are used by the train loop's thread; each BatchStream has one prefetch
// thread of its own (its queue is guarded by a mutex), and a shard's block
// cache is guarded by a mutex shared by its copies.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "lumen/lumen.h"
#include "lumen/train/step_timers.h"

namespace lumen::train {

// One block of rows, row-major: num_rows × feature_dim features and
// num_rows × label_dim labels.
struct DataBlock {
  int64_t num_rows = 0;
  int64_t feature_dim = 0;
  int64_t label_dim = 0;
  std::vector<float> features;
  std::vector<float> labels;
  LUMEN_SERIALIZE(num_rows, feature_dim, label_dim, features, labels);
};

enum class FileFormat {
  kCsv,     // one row per line: feature_dim features, then label_dim labels, comma-separated
  kBinary,  // raw little-endian float32 rows of feature_dim + label_dim values
};

// The indices (into a dataset of `dataset_size` rows) that `rank` of
// `world_size` gets for one epoch, as torch's DistributedSampler does: a
// permutation seeded by `seed`, padded by repeating its start to a multiple
// of world_size (or with the remainder dropped when `drop_last`), then every
// world_size-th index from `rank`. Over all ranks: each row exactly once
// (drop_last: at most once; pad: the few repeated rows twice).
std::vector<int64_t> ShardIndices(int64_t dataset_size, int rank, int world_size, uint64_t seed,
                                  bool drop_last);
// How many rows ShardIndices gives each rank: dataset_size / world_size,
// rounded up (padded) or down (drop_last).
int64_t ShardSize(int64_t dataset_size, int world_size, bool drop_last);

class Dataset {
 public:
  Dataset() = default;
  // Rows of one feature and one label each.
  static Dataset FromVectors(const std::vector<float>& x, const std::vector<float>& y,
                             int64_t rows_per_block = 4096);
  // Rows of x[i].size() features (all the same) and one label.
  static Dataset FromVectors(const std::vector<std::vector<float>>& x, const std::vector<float>& y,
                             int64_t rows_per_block = 4096);
  // Row-major flat arrays.
  static Dataset FromArrays(const std::vector<float>& features, int64_t feature_dim,
                            const std::vector<float>& labels, int64_t label_dim,
                            int64_t rows_per_block = 4096);
  // Every regular file of `directory` (sorted by name) becomes one block.
  static Dataset FromDirectory(const std::string& directory, FileFormat format,
                               int64_t feature_dim, int64_t label_dim = 1);
  // Blocks already in the object store (the driver reads each once to count rows).
  static Dataset FromObjectRefs(const std::vector<ObjectRef<DataBlock>>& blocks);

  int64_t size() const { return total_rows_; }
  int64_t feature_dim() const { return feature_dim_; }
  int64_t label_dim() const { return label_dim_; }
  size_t num_blocks() const { return blocks_.size(); }
  const ObjectRef<DataBlock>& block(size_t i) const { return blocks_.at(i); }
  int64_t block_rows(size_t i) const { return block_rows_.at(i); }

  LUMEN_SERIALIZE(blocks_, block_rows_, total_rows_, feature_dim_, label_dim_);

 private:
  static Dataset FromBlocks(std::vector<DataBlock> blocks);
  std::vector<ObjectRef<DataBlock>> blocks_;
  std::vector<int64_t> block_rows_;
  int64_t total_rows_ = 0;
  int64_t feature_dim_ = 0;
  int64_t label_dim_ = 0;
};

// A batch of rows, copied out of the blocks (row-major).
struct Batch {
  int64_t size = 0;
  int64_t feature_dim = 0;
  int64_t label_dim = 0;
  std::vector<float> features;
  std::vector<float> labels;
  std::span<const float> x(int64_t row) const {
    return {features.data() + row * feature_dim, static_cast<size_t>(feature_dim)};
  }
  std::span<const float> y(int64_t row) const {
    return {labels.data() + row * label_dim, static_cast<size_t>(label_dim)};
  }
};

class BatchStream;

// This worker's part of a dataset: for each seed, the rows ShardIndices gives
// its rank. Cheap to copy (shares its block cache).
class DatasetShard {
 public:
  DatasetShard(Dataset dataset, int rank, int world_size, bool drop_last = false,
               std::shared_ptr<StepTimers> timers = nullptr);
  // This epoch's rows, in the order of the permutation for `seed`, in batches
  // of `batch_size` (the last one may be smaller); `prefetch` batches ahead.
  std::shared_ptr<BatchStream> BatchesPtr(int64_t batch_size, uint64_t seed, int prefetch = 2) const;
  // For range-for: `for (const Batch& b : shard.Batches(16, epoch))`.
  BatchStream& Batches(int64_t batch_size, uint64_t seed, int prefetch = 2);
  // The rows of this shard for `seed` (what Batches iterates).
  std::vector<int64_t> Indices(uint64_t seed) const;
  int64_t size() const;  // rows per epoch
  const Dataset& dataset() const { return state_->dataset; }
  // Copies row `row` of the dataset into `features` / `labels`.
  void ReadRow(int64_t row, float* features, float* labels) const;

 private:
  struct State {
    Dataset dataset;
    int rank, world_size;
    bool drop_last;
    std::vector<int64_t> block_start;  // first row of each block
    absl::Mutex mu;
    std::vector<std::shared_ptr<DataBlock>> cache ABSL_GUARDED_BY(mu);  // fetched on first use
  };
  const DataBlock& BlockOf(int64_t row, int64_t* offset) const;
  std::shared_ptr<State> state_;
  std::shared_ptr<StepTimers> timers_;
  std::shared_ptr<BatchStream> current_;  // the stream Batches() returned last
};

// One epoch's batches of a shard, made ahead by a prefetch thread (at least
// one batch ahead) so that loading overlaps the loop's compute. An input range:
// `for (const Batch& b : shard.Batches(...))`. Owned by the loop's thread.
class BatchStream {
 public:
  BatchStream(DatasetShard shard, std::vector<int64_t> indices,
              int64_t batch_size, int prefetch, std::shared_ptr<StepTimers> timers);
  ~BatchStream();
  BatchStream(const BatchStream&) = delete;
  BatchStream& operator=(const BatchStream&) = delete;

  class Iterator {
   public:
    Iterator() = default;
    explicit Iterator(BatchStream* stream) : stream_(stream) { Advance(); }
    const Batch& operator*() const { return current_; }
    const Batch* operator->() const { return &current_; }
    Iterator& operator++() {
      Advance();
      return *this;
    }
    bool operator==(const Iterator& other) const { return stream_ == other.stream_; }

   private:
    void Advance();
    BatchStream* stream_ = nullptr;  // null: the end
    Batch current_;
  };
  Iterator begin() { return Iterator(this); }
  Iterator end() { return Iterator(); }
  // The number of batches this stream yields.
  int64_t num_batches() const;
  // Batches made ahead and not yet taken (at most the prefetch depth).
  size_t buffered();

 private:
  bool Next(Batch* out);  // false at the end
  void Produce();

  DatasetShard shard_;
  std::vector<int64_t> indices_;
  int64_t batch_size_;
  size_t prefetch_;
  std::shared_ptr<StepTimers> timers_;  // may be null
  absl::Mutex mu_;
  std::deque<Batch> ready_ ABSL_GUARDED_BY(mu_);
  bool produced_all_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::exception_ptr error_ ABSL_GUARDED_BY(mu_);
  std::thread producer_;  // runs Produce
};

}  // namespace lumen::train
