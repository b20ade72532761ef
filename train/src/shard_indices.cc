// ShardIndices: torch.utils.data.DistributedSampler's partition, pure logic.
#include <algorithm>
#include <numeric>
#include <random>

#include "lumen/train/dataset.h"

namespace lumen::train {

int64_t ShardSize(int64_t dataset_size, int world_size, bool drop_last) {
  return drop_last ? dataset_size / world_size : (dataset_size + world_size - 1) / world_size;
}

std::vector<int64_t> ShardIndices(int64_t dataset_size, int rank, int world_size, uint64_t seed,
                                  bool drop_last) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw Error("ShardIndices: rank " + std::to_string(rank) + " of " +
                std::to_string(world_size));
  }
  if (dataset_size <= 0) return {};
  const int64_t per_rank = ShardSize(dataset_size, world_size, drop_last);
  const int64_t total = per_rank * world_size;
  std::vector<int64_t> order(dataset_size);
  std::iota(order.begin(), order.end(), 0);
  // The same permutation on every rank: a fixed engine seeded by `seed`
  // (std::shuffle's distribution is implementation-defined, so swap by hand).
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull);
  for (int64_t i = dataset_size - 1; i > 0; --i) {
    int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
    std::swap(order[i], order[j]);
  }
  for (int64_t i = 0; static_cast<int64_t>(order.size()) < total; ++i) {
    order.push_back(order[i % dataset_size]);  // pad by repeating the start
  }
  order.resize(total);
  std::vector<int64_t> mine;
  mine.reserve(per_rank);
  for (int64_t i = rank; i < total; i += world_size) mine.push_back(order[i]);
  return mine;
}

}  // namespace lumen::train
