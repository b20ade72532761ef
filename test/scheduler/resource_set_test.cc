#include "lumen/scheduler/resource_set.h"

#include <cmath>
#include <limits>
#include <map>
#include <string>

#include <catch2/catch.hpp>

namespace lumen::scheduler {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

ResourceSet Make(const std::map<std::string, double>& m) {
  auto set = ResourceSet::FromMap(m);
  REQUIRE(set.ok());
  return *set;
}

std::string ErrorOf(const std::map<std::string, double>& m) {
  auto set = ResourceSet::FromMap(m);
  REQUIRE_FALSE(set.ok());
  CHECK(set.status().code() == absl::StatusCode::kInvalidArgument);
  return std::string(set.status().message());
}

TEST_CASE("FromMap and ToMap round trip", "[resource_set]") {
  std::map<std::string, double> in = {{"CPU", 4},
                                      {"GPU", 0.5},
                                      {"memory", 16 * kGiB},
                                      {"object_store_memory", 2.5 * kGiB},
                                      {"custom_accel", 0.0001}};
  ResourceSet set = Make(in);
  CHECK(set.ToMap() == in);
  CHECK(set.Get(kCPU) == 4);
  CHECK(set.Get(kGPU) == 0.5);
  CHECK(set.Get(kMemory) == 16 * kGiB);
  CHECK(set.Get(kObjectStoreMemory) == 2.5 * kGiB);
  CHECK(set.Get("custom_accel") == 0.0001);
  CHECK(set.Get("absent") == 0);
  CHECK_FALSE(set.IsEmpty());
  CHECK(Make(set.ToMap()) == set);
}

TEST_CASE("zero quantities are dropped", "[resource_set]") {
  ResourceSet set = Make({{"CPU", 0}, {"GPU", 1}});
  CHECK(set.ToMap() == std::map<std::string, double>{{"GPU", 1}});
  CHECK(set == Make({{"GPU", 1}}));
  CHECK(Make({{"CPU", 0}}).IsEmpty());
  CHECK(ResourceSet().IsEmpty());
  CHECK(ResourceSet() == Make({}));
}

TEST_CASE("Set adds overwrites and removes", "[resource_set]") {
  ResourceSet set;
  set.Set(kCPU, 2);
  set.Set("x", 0.25);
  CHECK(set == Make({{"CPU", 2}, {"x", 0.25}}));
  set.Set(kCPU, 3);
  CHECK(set.Get(kCPU) == 3);
  set.Set("x", 0);
  CHECK(set == Make({{"CPU", 3}}));
  // Rounded to the nearest unit.
  set.Set(kGPU, 0.1 + 0.2);
  CHECK(set.Get(kGPU) == 0.3);
}

TEST_CASE("fractional arithmetic is exact", "[resource_set]") {
  ResourceSet unit = Make({{"CPU", 0.0001}});
  ResourceSet sum;
  for (int i = 0; i < 10000; ++i) sum += unit;
  CHECK(sum == Make({{"CPU", 1}}));
  CHECK(sum.Get(kCPU) == 1.0);
  for (int i = 0; i < 10000; ++i) sum -= unit;
  CHECK(sum.IsEmpty());

  ResourceSet tenth = Make({{"GPU", 0.1}});
  ResourceSet gpus;
  for (int i = 0; i < 3; ++i) gpus += tenth;
  CHECK(gpus == Make({{"GPU", 0.3}}));  // 0.1+0.1+0.1 != 0.3 in doubles.
  CHECK(gpus.Get(kGPU) == 0.3);

  ResourceSet a = Make({{"CPU", 1.5}, {"memory", 3 * kGiB}});
  ResourceSet b = Make({{"CPU", 0.5}, {"GPU", 2}});
  CHECK(a + b == Make({{"CPU", 2}, {"memory", 3 * kGiB}, {"GPU", 2}}));
  CHECK((a + b) - b == a);
  ResourceSet c = a;
  c -= Make({{"CPU", 1.5}});
  CHECK(c == Make({{"memory", 3 * kGiB}}));  // CPU went to zero: gone.
  CHECK(c.ToMap().count("CPU") == 0);
}

TEST_CASE("decimal inputs that are multiples of 1e-4 are accepted", "[resource_set]") {
  CHECK(Make({{"CPU", 0.1 + 0.2}}).Get(kCPU) == 0.3);
  CHECK(Make({{"CPU", 1.0 / 3 * 3}}).Get(kCPU) == 1);
  CHECK(Make({{"CPU", 0.0003}}).Get(kCPU) == 0.0003);
  CHECK(Make({{"memory", 123456789012345.0}}).Get(kMemory) == 123456789012345.0);
  CHECK(Make({{"memory", 500000000000001.0}}).ToMap().at("memory") == 500000000000001.0);
  // Large whole byte counts add exactly.
  ResourceSet big = Make({{"memory", 800000000000000.0}});
  big += Make({{"memory", 1}});
  CHECK(big.Get(kMemory) == 800000000000001.0);
  CHECK(Make({{"memory", ResourceSet::kMaxQuantity}}).Get(kMemory) == ResourceSet::kMaxQuantity);
}

TEST_CASE("FromMap rejects bad input with clear messages", "[resource_set]") {
  using Catch::Matchers::Contains;
  CHECK_THAT(ErrorOf({{"CPU", -1}}), Contains("'CPU'") && Contains("negative"));
  CHECK_THAT(ErrorOf({{"GPU", std::nan("")}}), Contains("'GPU'") && Contains("NaN"));
  CHECK_THAT(ErrorOf({{"GPU", std::numeric_limits<double>::infinity()}}),
             Contains("infinite"));
  CHECK_THAT(ErrorOf({{"GPU", -std::numeric_limits<double>::infinity()}}),
             Contains("infinite"));
  CHECK_THAT(ErrorOf({{"CPU", 0.00015}}),
             Contains("'CPU'") && Contains("not a multiple of 0.0001"));
  CHECK_THAT(ErrorOf({{"CPU", 1e-5}}), Contains("not a multiple of 0.0001"));
  CHECK_THAT(ErrorOf({{"CPU", 1.23456}}), Contains("1.23456"));
  CHECK_THAT(ErrorOf({{"", 1}}), Contains("empty name"));
  CHECK_THAT(ErrorOf({{"memory", 1e15}}), Contains("'memory'") && Contains("maximum"));
  // One bad entry fails the whole map.
  CHECK_THAT(ErrorOf({{"CPU", 1}, {"GPU", -0.5}}), Contains("'GPU'"));
}

TEST_CASE("IsSubsetOf", "[resource_set]") {
  ResourceSet node = Make({{"CPU", 4}, {"GPU", 1}, {"memory", 8 * kGiB}});
  CHECK(Make({{"CPU", 4}}).IsSubsetOf(node));
  CHECK(Make({{"CPU", 2}, {"GPU", 0.5}}).IsSubsetOf(node));
  CHECK(node.IsSubsetOf(node));
  CHECK(ResourceSet().IsSubsetOf(node));
  CHECK(ResourceSet().IsSubsetOf(ResourceSet()));
  CHECK_FALSE(Make({{"CPU", 4.0001}}).IsSubsetOf(node));
  CHECK_FALSE(Make({{"CPU", 1}, {"GPU", 1.5}}).IsSubsetOf(node));
  CHECK_FALSE(Make({{"TPU", 1}}).IsSubsetOf(node));  // absent counts as 0.
  CHECK_FALSE(node.IsSubsetOf(Make({{"CPU", 4}, {"GPU", 1}})));
  CHECK_FALSE(Make({{"CPU", 0.0001}}).IsSubsetOf(ResourceSet()));
}

TEST_CASE("equality", "[resource_set]") {
  CHECK(Make({{"CPU", 1}, {"GPU", 0.5}}) == Make({{"GPU", 0.5}, {"CPU", 1}}));
  CHECK(Make({{"CPU", 1}}) != Make({{"CPU", 1.0001}}));
  CHECK(Make({{"CPU", 1}}) != Make({{"CPU", 1}, {"GPU", 1}}));
  CHECK(Make({{"CPU", 1}}) != Make({{"cpu", 1}}));
}

#ifdef NDEBUG
TEST_CASE("subtracting more than present clamps at zero in release builds",
          "[resource_set]") {
  ResourceSet set = Make({{"CPU", 1}, {"GPU", 1}});
  set -= Make({{"CPU", 2}, {"GPU", 0.5}, {"TPU", 1}});
  CHECK(set == Make({{"GPU", 0.5}}));
}
#endif

TEST_CASE("ToString", "[resource_set]") {
  ResourceSet set = Make(
      {{"CPU", 2}, {"GPU", 0.5}, {"memory", 4 * kGiB}, {"object_store_memory", 1.5 * kGiB}});
  CHECK(set.ToString() == "{CPU: 2, memory: 4.0 GiB, object_store_memory: 1.5 GiB, GPU: 0.5}");
  CHECK(ResourceSet().ToString() == "{}");
  CHECK(Make({{"zeta", 1}, {"alpha", 0.0001}, {"CPU", 12.25}}).ToString() ==
        "{CPU: 12.25, alpha: 0.0001, zeta: 1}");
  CHECK(Make({{"memory", 512}}).ToString() == "{memory: 512 B}");
  CHECK(Make({{"memory", 1536}}).ToString() == "{memory: 1.5 KiB}");
  CHECK(Make({{"memory", 100 * 1024 * 1024}}).ToString() == "{memory: 100.0 MiB}");
  CHECK(Make({{"memory", 1.25 * kGiB}}).ToString() == "{memory: 1.25 GiB}");
  CHECK(Make({{"memory", 2048 * kGiB}}).ToString() == "{memory: 2.0 TiB}");
  CHECK(Make({{"gpu_memory", 8 * kGiB}}).ToString() == "{gpu_memory: 8.0 GiB}");
  CHECK(Make({{"GPU", 1234567.8901}}).ToString() == "{GPU: 1234567.8901}");
}

TEST_CASE("LocalResourceManager starts fully available", "[local_resource_manager]") {
  ResourceSet total = Make({{"CPU", 4}, {"GPU", 2}});
  LocalResourceManager node(total);
  CHECK(node.total() == total);
  CHECK(node.available() == total);
  CHECK(node.Utilization() == 0);
}

TEST_CASE("IsFeasible compares against the total", "[local_resource_manager]") {
  LocalResourceManager node(Make({{"CPU", 4}, {"GPU", 1}}));
  CHECK(node.IsFeasible(Make({{"CPU", 4}, {"GPU", 1}})));
  CHECK(node.IsFeasible(ResourceSet()));
  CHECK_FALSE(node.IsFeasible(Make({{"CPU", 5}})));
  CHECK_FALSE(node.IsFeasible(Make({{"TPU", 1}})));
  // Feasibility ignores current use.
  REQUIRE(node.TryAcquire(Make({{"CPU", 4}})));
  CHECK(node.IsFeasible(Make({{"CPU", 4}})));
}

TEST_CASE("TryAcquire is all-or-nothing", "[local_resource_manager]") {
  LocalResourceManager node(Make({{"CPU", 4}, {"GPU", 1}}));
  REQUIRE(node.TryAcquire(Make({{"CPU", 3}, {"GPU", 0.5}})));
  CHECK(node.available() == Make({{"CPU", 1}, {"GPU", 0.5}}));

  // CPU fits, GPU does not: nothing is taken.
  CHECK_FALSE(node.TryAcquire(Make({{"CPU", 1}, {"GPU", 1}})));
  CHECK(node.available() == Make({{"CPU", 1}, {"GPU", 0.5}}));
  // A resource the node lacks: nothing is taken.
  CHECK_FALSE(node.TryAcquire(Make({{"CPU", 1}, {"TPU", 1}})));
  CHECK(node.available() == Make({{"CPU", 1}, {"GPU", 0.5}}));

  REQUIRE(node.TryAcquire(Make({{"CPU", 1}, {"GPU", 0.5}})));
  CHECK(node.available().IsEmpty());
  CHECK(node.Utilization() == 1);
  CHECK_FALSE(node.TryAcquire(Make({{"CPU", 0.0001}})));
  CHECK(node.TryAcquire(ResourceSet()));  // Nothing always fits.
}

TEST_CASE("fractional GPUs are shared exactly", "[local_resource_manager]") {
  LocalResourceManager node(Make({{"GPU", 1}}));
  ResourceSet tenth = Make({{"GPU", 0.1}});
  for (int i = 0; i < 10; ++i) REQUIRE(node.TryAcquire(tenth));
  CHECK_FALSE(node.TryAcquire(Make({{"GPU", 0.0001}})));
  for (int i = 0; i < 10; ++i) node.Release(tenth);
  CHECK(node.available() == node.total());
}

TEST_CASE("Release never exceeds the total", "[local_resource_manager]") {
  ResourceSet total = Make({{"CPU", 4}, {"GPU", 1}});
  LocalResourceManager node(total);
  ResourceSet request = Make({{"CPU", 2}, {"GPU", 1}});
  REQUIRE(node.TryAcquire(request));
  node.Release(request);
  CHECK(node.available() == total);
  node.Release(request);  // Double release.
  CHECK(node.available() == total);
  node.Release(Make({{"TPU", 3}}));  // Not part of this node.
  CHECK(node.available() == total);

  REQUIRE(node.TryAcquire(Make({{"CPU", 3}})));
  node.Release(Make({{"CPU", 5}}));  // Partial excess.
  CHECK(node.available() == total);
}

TEST_CASE("Utilization is the most used resource", "[local_resource_manager]") {
  LocalResourceManager node(Make({{"CPU", 4}, {"GPU", 2}, {"memory", 8 * kGiB}}));
  REQUIRE(node.TryAcquire(Make({{"CPU", 1}})));
  CHECK(node.Utilization() == Approx(0.25));
  REQUIRE(node.TryAcquire(Make({{"GPU", 1.5}})));
  CHECK(node.Utilization() == Approx(0.75));
  node.Release(Make({{"GPU", 1.5}}));
  CHECK(node.Utilization() == Approx(0.25));
  CHECK(LocalResourceManager(ResourceSet()).Utilization() == 0);
}

}  // namespace
}  // namespace lumen::scheduler
