// DatasetShard: a worker's rows of a Dataset, read from blocks fetched from
// the object store on first use and cached for the shard's life.
#include <algorithm>
#include <cstring>

#include "lumen/train/dataset.h"

namespace lumen::train {

DatasetShard::DatasetShard(Dataset dataset, int rank, int world_size, bool drop_last,
                           std::shared_ptr<StepTimers> timers)
    : state_(std::make_shared<State>()), timers_(std::move(timers)) {
  state_->dataset = std::move(dataset);
  state_->rank = rank;
  state_->world_size = world_size;
  state_->drop_last = drop_last;
  int64_t start = 0;
  for (size_t i = 0; i < state_->dataset.num_blocks(); ++i) {
    state_->block_start.push_back(start);
    start += state_->dataset.block_rows(i);
  }
  absl::MutexLock lock(&state_->mu);
  state_->cache.resize(state_->dataset.num_blocks());
}

std::vector<int64_t> DatasetShard::Indices(uint64_t seed) const {
  return ShardIndices(state_->dataset.size(), state_->rank, state_->world_size, seed,
                      state_->drop_last);
}

int64_t DatasetShard::size() const {
  return ShardSize(state_->dataset.size(), state_->world_size, state_->drop_last);
}

const DataBlock& DatasetShard::BlockOf(int64_t row, int64_t* offset) const {
  const auto& starts = state_->block_start;
  size_t b = std::upper_bound(starts.begin(), starts.end(), row) - starts.begin() - 1;
  *offset = row - starts[b];
  absl::MutexLock lock(&state_->mu);
  if (state_->cache[b] == nullptr) state_->cache[b] = lumen::Get(state_->dataset.block(b));
  return *state_->cache[b];  // blocks are never replaced or freed while the shard lives
}

void DatasetShard::ReadRow(int64_t row, float* features, float* labels) const {
  int64_t offset = 0;
  const DataBlock& b = BlockOf(row, &offset);
  std::memcpy(features, b.features.data() + offset * b.feature_dim, b.feature_dim * sizeof(float));
  std::memcpy(labels, b.labels.data() + offset * b.label_dim, b.label_dim * sizeof(float));
}

std::shared_ptr<BatchStream> DatasetShard::BatchesPtr(int64_t batch_size, uint64_t seed,
                                                      int prefetch) const {
  if (batch_size < 1) throw Error("DatasetShard::Batches: batch_size must be >= 1");
  return std::make_shared<BatchStream>(*this, Indices(seed), batch_size, std::max(prefetch, 1),
                                       timers_);
}

BatchStream& DatasetShard::Batches(int64_t batch_size, uint64_t seed, int prefetch) {
  current_.reset();  // stops the previous epoch's prefetch first
  current_ = BatchesPtr(batch_size, seed, prefetch);
  return *current_;
}

}  // namespace lumen::train
