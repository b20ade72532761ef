#include "lumen/common/fault_injector.h"

#include <capnp/schema.h>

#include <cstdlib>
#include <random>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "lumen/common/logging.h"

namespace lumen {
namespace {

struct Rule {
  std::string message;  // lower case; "*" for any
  InjectedFault fault = InjectedFault::kNone;
  double probability = 0;
  uint64_t max = UINT64_MAX;
  uint64_t fired = 0;
};

struct Rules {
  absl::Mutex mu;
  bool loaded ABSL_GUARDED_BY(mu) = false;  // the environment was read
  std::vector<Rule> rules ABSL_GUARDED_BY(mu);
  std::mt19937_64 engine ABSL_GUARDED_BY(mu);
  uint64_t fired ABSL_GUARDED_BY(mu) = 0;
};

Rules& TheRules() {
  static auto* rules = new Rules();  // never destroyed: used until exit
  return *rules;
}

bool EnvSet() {
  const char* spec = std::getenv("LUMEN_FAULT_INJECT");
  return spec != nullptr && *spec != '\0';
}

absl::StatusOr<std::vector<Rule>> Parse(absl::string_view spec) {
  std::vector<Rule> out;
  for (absl::string_view item : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    std::vector<absl::string_view> parts = absl::StrSplit(item, ':');
    if (parts.size() < 3 || parts.size() > 4) {
      return absl::InvalidArgumentError(
          absl::StrCat("fault rule '", item, "': want MESSAGE:MODE:PROBABILITY[:MAX]"));
    }
    Rule rule;
    rule.message = absl::AsciiStrToLower(std::string(absl::StripAsciiWhitespace(parts[0])));
    std::string mode = absl::AsciiStrToLower(std::string(absl::StripAsciiWhitespace(parts[1])));
    if (mode == "fail_before_send") {
      rule.fault = InjectedFault::kFailBeforeSend;
    } else if (mode == "fail_in_flight") {
      rule.fault = InjectedFault::kFailInFlight;
    } else if (mode == "drop_reply") {
      rule.fault = InjectedFault::kDropReply;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "fault rule '", item, "': mode '", mode,
          "' is not fail_before_send, fail_in_flight or drop_reply"));
    }
    if (!absl::SimpleAtod(parts[2], &rule.probability) || rule.probability < 0 ||
        rule.probability > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("fault rule '", item, "': probability '", parts[2], "' is not in [0, 1]"));
    }
    if (parts.size() == 4 && !absl::SimpleAtoi(parts[3], &rule.max)) {
      return absl::InvalidArgumentError(
          absl::StrCat("fault rule '", item, "': MAX '", parts[3], "' is not a count"));
    }
    if (rule.message.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("fault rule '", item, "': no message name"));
    }
    out.push_back(std::move(rule));
  }
  return out;
}

// Reads LUMEN_FAULT_INJECT and LUMEN_FAULT_SEED once.
void LoadFromEnv(Rules& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r.mu) {
  if (r.loaded) return;
  r.loaded = true;
  const char* spec = std::getenv("LUMEN_FAULT_INJECT");
  if (spec == nullptr) return;
  auto rules = Parse(spec);
  if (!rules.ok()) {
    LUMEN_LOG(ERROR) << "LUMEN_FAULT_INJECT ignored: " << rules.status().message();
    return;
  }
  uint64_t seed = std::random_device{}();
  const char* seed_text = std::getenv("LUMEN_FAULT_SEED");
  if (seed_text != nullptr && !absl::SimpleAtoi(seed_text, &seed)) {
    LUMEN_LOG(ERROR) << "LUMEN_FAULT_SEED '" << seed_text << "' is not a number; using " << seed;
  }
  LUMEN_LOG(WARNING) << "fault injection on: LUMEN_FAULT_INJECT=\"" << spec
                     << "\" LUMEN_FAULT_SEED=" << seed;
  r.rules = std::move(*rules);
  r.engine.seed(seed);
}

}  // namespace

std::atomic<bool> FaultInjector::active_{EnvSet()};

InjectedFault FaultInjector::Draw(proto::Envelope::Reader request) {
  if (!Active()) return InjectedFault::kNone;
  return Draw(MessageName(request));
}

InjectedFault FaultInjector::Draw(std::string_view message) {
  if (!Active()) return InjectedFault::kNone;
  Rules& r = TheRules();
  absl::MutexLock lock(&r.mu);
  LoadFromEnv(r);
  std::string name = absl::AsciiStrToLower(std::string(message));
  for (Rule& rule : r.rules) {
    if (rule.message != "*" && rule.message != name) continue;
    if (rule.fired >= rule.max) continue;
    if (std::uniform_real_distribution<double>(0, 1)(r.engine) >= rule.probability) continue;
    ++rule.fired;
    ++r.fired;
    return rule.fault;
  }
  return InjectedFault::kNone;
}

absl::Status FaultInjector::Configure(std::string_view spec, uint64_t seed) {
  auto rules = Parse(absl::string_view(spec.data(), spec.size()));
  if (!rules.ok()) return rules.status();
  Rules& r = TheRules();
  absl::MutexLock lock(&r.mu);
  r.loaded = true;
  r.rules = std::move(*rules);
  r.engine.seed(seed);
  r.fired = 0;
  active_.store(!r.rules.empty(), std::memory_order_relaxed);
  return absl::OkStatus();
}

uint64_t FaultInjector::Fired() {
  Rules& r = TheRules();
  absl::MutexLock lock(&r.mu);
  return r.fired;
}

uint64_t FaultInjector::Fired(std::string_view message) {
  std::string name = absl::AsciiStrToLower(std::string(message));
  Rules& r = TheRules();
  absl::MutexLock lock(&r.mu);
  uint64_t n = 0;
  for (const Rule& rule : r.rules)
    if (rule.message == name) n += rule.fired;
  return n;
}

const char* FaultInjector::Name(InjectedFault fault) {
  switch (fault) {
    case InjectedFault::kFailBeforeSend: return "fail_before_send";
    case InjectedFault::kFailInFlight: return "fail_in_flight";
    case InjectedFault::kDropReply: return "drop_reply";
    case InjectedFault::kNone: break;
  }
  return "none";
}

std::string FaultInjector::MessageName(proto::Envelope::Reader request) {
  auto schema = capnp::Schema::from<proto::Envelope>();
  KJ_IF_MAYBE(field, schema.getFieldByDiscriminant(static_cast<uint16_t>(request.which()))) {
    return field->getProto().getName().cStr();
  }
  return "unknown";
}

}  // namespace lumen
