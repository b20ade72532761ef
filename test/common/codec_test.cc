// Tests of the value codec (lumen/common/codec.h) and lumen::Buffer.
#include "lumen/common/codec.h"

#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "lumen/common/buffer.h"

namespace {

using lumen::Buffer;
using lumen::codec::DecodeValue;
using lumen::codec::EncodeValue;

enum class Color : uint16_t { kRed = 1, kGreen = 2, kBlue = 300 };
enum Plain { kZero, kOne };

struct Inner {
  int id = 0;
  std::string name;
  std::optional<double> weight;
  LUMEN_SERIALIZE(id, name, weight);
  bool operator==(const Inner&) const = default;
};

struct Outer {
  std::vector<Inner> items;
  std::map<std::string, Inner> by_name;
  Color color = Color::kRed;
  std::vector<float> values;
  Buffer blob;
  bool flag = false;
  LUMEN_SERIALIZE(items, by_name, color, values, blob, flag);
  bool operator==(const Outer&) const = default;
};

// 16 fields of mixed types.
struct Wide {
  int8_t a = 0;
  uint8_t b = 0;
  int16_t c = 0;
  uint16_t d = 0;
  int32_t e = 0;
  uint32_t f = 0;
  int64_t g = 0;
  uint64_t h = 0;
  float i = 0;
  double j = 0;
  char k = 0;
  bool l = false;
  std::string m;
  std::vector<int> n;
  std::optional<int> o;
  std::pair<int, std::string> p;
  LUMEN_SERIALIZE(a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p);
  bool operator==(const Wide&) const = default;
};

// A type with a hand-written codec (what the header documents for users).
struct Celsius {
  double degrees = 0;
  bool operator==(const Celsius&) const = default;
};

}  // namespace

template <>
struct lumen::codec::Codec<Celsius> {
  static constexpr size_t kMinEncodedSize = 8;
  static void Encode(Writer& w, const Celsius& c) { w.WriteRaw(c.degrees); }
  static void Decode(Reader& r, Celsius& c) {
    c.degrees = r.ReadRaw<double>();
    if (r.ok() && c.degrees < -273.15) r.Fail("below absolute zero");
  }
};

namespace {

template <class T>
T RoundTrip(const T& value) {
  std::string bytes = EncodeValue(value);
  absl::StatusOr<T> decoded = DecodeValue<T>(bytes);
  INFO(decoded.status().ToString());
  REQUIRE(decoded.ok());
  return *std::move(decoded);
}

template <class T>
void CheckRoundTrip(const T& value) {
  CHECK(RoundTrip(value) == value);
}

Outer SampleOuter() {
  Outer o;
  o.items = {{1, "one", 1.5}, {2, "", std::nullopt}};
  o.by_name["x"] = {3, "three", 3.25};
  o.color = Color::kBlue;
  o.values = {1.f, -2.f, 3.5f};
  o.blob = Buffer(std::string("blob bytes"));
  o.flag = true;
  return o;
}

TEST_CASE("Varints round trip at every length and reject overlong input") {
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{127}, uint64_t{128}, uint64_t{300},
                     uint64_t{1} << 35, std::numeric_limits<uint64_t>::max()}) {
    std::string s;
    lumen::codec::Writer w(&s);
    w.WriteVarint(v);
    lumen::codec::Reader r(s);
    CHECK(r.ReadVarint() == v);
    CHECK(r.ok());
    CHECK(r.Remaining() == 0);
  }
  std::string eleven(10, '\x80');
  eleven.push_back('\x01');
  lumen::codec::Reader r(eleven);
  CHECK(r.ReadVarint() == 0);
  CHECK_FALSE(r.ok());

  std::string overflow(9, '\xff');
  overflow.push_back('\x02');  // bit 64 set
  lumen::codec::Reader r2(overflow);
  r2.ReadVarint();
  CHECK_FALSE(r2.ok());
}

TEST_CASE("Reader failure is sticky and describes the problem") {
  std::string s(16, '\0');
  lumen::codec::Reader r(s);
  r.ReadBytes(12);
  CHECK(r.ok());
  CHECK(r.ReadRaw<uint64_t>() == 0);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(r.status().message()) == "truncated value: needed 8 bytes at offset 12 of 16");
  CHECK(r.ReadBytes(1) == nullptr);  // even though 4 bytes are left
  CHECK(r.ReadRaw<uint8_t>() == 0);
  CHECK(r.Remaining() == 0);
  r.Fail("second problem");
  CHECK(std::string(r.status().message()).find("offset 12") != std::string::npos);
}

TEST_CASE("Writer and Reader align relative to the origin") {
  std::string s = "abc";
  lumen::codec::Writer w(&s, 3);
  w.WriteRaw<uint8_t>(7);
  w.AlignTo(8);
  CHECK(w.Position() == 8);
  CHECK(s.size() == 11);
  lumen::codec::Reader r(std::string_view(s).substr(3));
  CHECK(r.ReadRaw<uint8_t>() == 7);
  r.AlignTo(8);
  CHECK(r.ok());
  CHECK(r.Position() == 8);

  std::string bad = s.substr(3);
  bad[5] = 1;  // nonzero padding
  lumen::codec::Reader r2(bad);
  r2.ReadRaw<uint8_t>();
  r2.AlignTo(8);
  CHECK_FALSE(r2.ok());
}

TEST_CASE("Scalars round trip") {
  CheckRoundTrip(int8_t{-5});
  CheckRoundTrip(uint8_t{250});
  CheckRoundTrip(int16_t{-30000});
  CheckRoundTrip(uint16_t{60000});
  CheckRoundTrip(int32_t{-2000000000});
  CheckRoundTrip(uint32_t{4000000000u});
  CheckRoundTrip(std::numeric_limits<int64_t>::min());
  CheckRoundTrip(std::numeric_limits<uint64_t>::max());
  CheckRoundTrip(3.25f);
  CheckRoundTrip(-1e300);
  CheckRoundTrip(static_cast<long double>(1.5));
  CheckRoundTrip('x');
  CheckRoundTrip(true);
  CheckRoundTrip(false);
  CheckRoundTrip(Color::kBlue);
  CheckRoundTrip(kOne);
  CheckRoundTrip(Celsius{21.5});
}

TEST_CASE("Strings buffers and containers round trip") {
  CheckRoundTrip(std::string());
  CheckRoundTrip(std::string("hello\0world", 11));
  CheckRoundTrip(std::string(1000, 'z'));
  CheckRoundTrip(std::vector<int>{});
  CheckRoundTrip(std::vector<int>{1, -2, 3});
  CheckRoundTrip(std::vector<double>{0.5});
  CheckRoundTrip(std::vector<bool>{});
  CheckRoundTrip(std::vector<bool>{true, false, true, true});
  CheckRoundTrip(std::vector<std::string>{"a", "", "ccc"});
  CheckRoundTrip(std::array<int, 3>{4, 5, 6});
  CheckRoundTrip(std::array<std::string, 2>{"p", "q"});
  CheckRoundTrip(std::array<bool, 2>{true, false});
  CheckRoundTrip(std::map<int, std::string>{});
  CheckRoundTrip(std::map<int, std::string>{{1, "a"}, {2, "b"}});
  CheckRoundTrip(std::unordered_map<std::string, int>{{"x", 1}, {"y", 2}});
  CheckRoundTrip(std::set<std::string>{"b", "a"});
  CheckRoundTrip(std::unordered_set<int64_t>{});
  CheckRoundTrip(std::unordered_set<int64_t>{7, 8, 9});
  CheckRoundTrip(std::pair<int, std::string>{1, "one"});
  CheckRoundTrip(std::tuple<>{});
  CheckRoundTrip(std::tuple<int, std::string, bool>{1, "t", true});
  CheckRoundTrip(std::optional<int>{});
  CheckRoundTrip(std::optional<int>{42});
  CheckRoundTrip(std::optional<std::vector<float>>{std::vector<float>{1.f}});
  CheckRoundTrip(Buffer());
  CheckRoundTrip(Buffer(std::vector<uint8_t>{1, 2, 3}));
  CheckRoundTrip(std::vector<Celsius>{{1}, {2}});
}

TEST_CASE("Nested types round trip") {
  using Nested = std::map<std::string, std::vector<std::optional<std::pair<int, double>>>>;
  Nested n = {{"a", {std::pair{1, 1.5}, std::nullopt, std::pair{-3, 0.0}}}, {"empty", {}}};
  CheckRoundTrip(n);

  std::vector<std::vector<std::vector<int>>> deep = {{{1}, {}, {2, 3}}, {}};
  CheckRoundTrip(deep);
  std::unordered_map<int, std::set<std::tuple<int, std::string>>> um = {{1, {{2, "x"}, {1, "y"}}}};
  CheckRoundTrip(um);
  std::vector<std::map<Color, std::array<std::optional<Buffer>, 2>>> mix(2);
  mix[1][Color::kGreen] = {Buffer(std::string("g")), std::nullopt};
  CheckRoundTrip(mix);
}

TEST_CASE("LUMEN_SERIALIZE structs round trip nested and with 16 fields") {
  CheckRoundTrip(Inner{});
  CheckRoundTrip(Inner{7, "seven", 0.5});
  CheckRoundTrip(Outer{});
  CheckRoundTrip(SampleOuter());
  CheckRoundTrip(std::vector<Outer>{SampleOuter(), Outer{}});
  Wide w;
  w.a = -1, w.b = 2, w.c = -3, w.d = 4, w.e = -5, w.f = 6, w.g = -7, w.h = 8;
  w.i = 9.5f, w.j = 10.25, w.k = 'k', w.l = true, w.m = "m", w.n = {13}, w.o = 14;
  w.p = {15, "p"};
  CheckRoundTrip(w);
  static_assert(lumen::codec::kMinEncodedSize<Inner> == 4 + 1 + 1);
}

TEST_CASE("Header layout and type names") {
  std::string bytes = EncodeValue(int32_t{5});
  REQUIRE(bytes.size() >= 8);
  CHECK(bytes.substr(0, 4) == "LMNV");
  CHECK(bytes[4] == 1);
  CHECK(lumen::codec::DemangledTypeName<std::vector<int>>() == "std::vector<int>");
  CHECK(lumen::codec::DemangledTypeName<std::string>() == "std::string");
  CHECK(lumen::codec::DemangledTypeName<std::map<std::string, std::vector<int>>>() ==
        "std::map<std::string, std::vector<int>>");
  CHECK(lumen::codec::DemangledTypeName<std::unordered_map<int, std::set<double>>>() ==
        "std::unordered_map<int, std::set<double>>");
  CHECK(lumen::codec::Demangle("i") == "int");
  CHECK(lumen::codec::Demangle("not a name!") == "not a name!");
  auto stored = lumen::codec::StoredTypeName(EncodeValue(std::vector<int>{1}));
  REQUIRE(stored.ok());
  CHECK(*stored == "std::vector<int>");
  CHECK_FALSE(lumen::codec::StoredTypeName("LMN").ok());
}

TEST_CASE("Reading as the wrong type names both types") {
  std::string bytes = EncodeValue(std::vector<int>{1, 2});
  absl::StatusOr<std::string> s = DecodeValue<std::string>(bytes);
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(s.status().message()) ==
        "object holds std::vector<int> but was read as std::string");

  absl::StatusOr<Inner> st = DecodeValue<Inner>(EncodeValue(Outer{}));
  REQUIRE_FALSE(st.ok());
  std::string msg(st.status().message());
  CHECK(msg.find(lumen::codec::DemangledTypeName<Outer>()) != std::string::npos);
  CHECK(msg.find(lumen::codec::DemangledTypeName<Inner>()) != std::string::npos);
}

TEST_CASE("Malformed values are rejected") {
  SECTION("bad magic") {
    std::string bytes = EncodeValue(1);
    bytes[0] = 'X';
    auto r = DecodeValue<int>(bytes);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(r.status().message()).find("magic") != std::string::npos);
  }
  SECTION("bad version") {
    std::string bytes = EncodeValue(1);
    bytes[4] = 2;
    auto r = DecodeValue<int>(bytes);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
  }
  SECTION("bool byte 2") {
    std::string bytes = EncodeValue(true);
    REQUIRE(bytes.back() == 1);
    bytes.back() = 2;
    auto r = DecodeValue<bool>(bytes);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
    bytes.back() = 0;
    CHECK(DecodeValue<bool>(bytes).value() == false);
  }
  SECTION("trailing bytes") {
    std::string bytes = EncodeValue(std::string("abc"));
    bytes.push_back('\0');
    auto r = DecodeValue<std::string>(bytes);
    REQUIRE_FALSE(r.ok());
    CHECK(std::string(r.status().message()).find("trailing") != std::string::npos);
  }
  SECTION("duplicate map key") {
    // Two entries with key 1: take an encoding of {1,2} and patch the second key.
    std::string bytes = EncodeValue(std::map<int32_t, uint8_t>{{1, 10}, {2, 20}});
    int32_t one = 1;
    std::memcpy(&bytes[bytes.size() - 5], &one, 4);
    CHECK_FALSE(DecodeValue<std::map<int32_t, uint8_t>>(bytes).ok());
  }
  SECTION("huge counts fail before allocating") {
    std::string bytes = EncodeValue(std::vector<std::string>{});
    bytes.pop_back();  // the count 0
    std::string s;
    lumen::codec::Writer w(&s);
    w.WriteVarint(uint64_t{1} << 60);
    auto r = DecodeValue<std::vector<std::string>>(bytes + s);
    REQUIRE_FALSE(r.ok());
    auto rf = DecodeValue<std::vector<float>>(
        EncodeValue(std::vector<float>{}).substr(0, bytes.size()) + s);
    CHECK_FALSE(rf.ok());
  }
  SECTION("user codec errors propagate") {
    auto r = DecodeValue<Celsius>(EncodeValue(Celsius{-300}));
    REQUIRE_FALSE(r.ok());
    CHECK(std::string(r.status().message()) == "below absolute zero");
  }
}

TEST_CASE("Big arrays: round trip 64-byte alignment and zero-copy views") {
  std::vector<float> big(1 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i) * 0.5f;
  std::string bytes = EncodeValue(big);
  CHECK(bytes.size() < big.size() * sizeof(float) + 128);
  CHECK(RoundTrip(big) == big);

  absl::StatusOr<std::span<const float>> view = lumen::codec::DecodeArrayView<float>(bytes);
  REQUIRE(view.ok());
  REQUIRE(view->size() == big.size());
  const char* p = reinterpret_cast<const char*>(view->data());
  CHECK(p >= bytes.data());
  CHECK(p + view->size_bytes() == bytes.data() + bytes.size());  // inside, no copy
  CHECK((p - bytes.data()) % 64 == 0);
  CHECK((*view)[12345] == big[12345]);

  static_assert(lumen::codec::kIsZeroCopyArray<std::vector<float>>);
  static_assert(!lumen::codec::kIsZeroCopyArray<std::vector<bool>>);
  static_assert(!lumen::codec::kIsZeroCopyArray<std::vector<std::string>>);
  static_assert(!lumen::codec::kIsZeroCopyArray<float>);

  // Empty arrays have an empty view.
  auto empty = lumen::codec::DecodeArrayView<double>(EncodeValue(std::vector<double>{}));
  REQUIRE(empty.ok());
  CHECK(empty->empty());
  // Wrong element type.
  CHECK(lumen::codec::DecodeArrayView<int32_t>(bytes).status().code() ==
        absl::StatusCode::kFailedPrecondition);
  // Truncated.
  CHECK_FALSE(lumen::codec::DecodeArrayView<float>(bytes.substr(0, bytes.size() - 1)).ok());
}

TEST_CASE("Views of values at misaligned addresses are refused decoding still works") {
  std::vector<double> v = {1, 2, 3};
  std::string bytes = EncodeValue(v);
  std::string shifted = "x" + bytes;
  std::string_view at_odd = std::string_view(shifted).substr(1);
  auto view = lumen::codec::DecodeArrayView<double>(at_odd);
  if (reinterpret_cast<uintptr_t>(at_odd.data()) % alignof(double) != 0) {
    CHECK(view.status().code() == absl::StatusCode::kFailedPrecondition);
  }
  auto copy = DecodeValue<std::vector<double>>(at_odd);
  REQUIRE(copy.ok());
  CHECK(*copy == v);
}

TEST_CASE("EncodeValueTo appends a self-contained value") {
  std::string out = "prefix!";
  lumen::codec::EncodeValueTo(&out, std::vector<int16_t>{1, 2, 3});
  auto back = DecodeValue<std::vector<int16_t>>(std::string_view(out).substr(7));
  REQUIRE(back.ok());
  CHECK(*back == std::vector<int16_t>{1, 2, 3});
}

TEST_CASE("Buffers: views copies and keepalive decoding") {
  auto storage = std::make_shared<std::string>("0123456789");
  Buffer view = Buffer::View(reinterpret_cast<const uint8_t*>(storage->data()), 4, storage);
  CHECK(view.size() == 4);
  CHECK(view.view() == "0123");
  CHECK(view == Buffer::Copy("0123", 4));
  CHECK_FALSE(view == Buffer::Copy("0124", 4));
  CHECK(Buffer() == Buffer::Copy(nullptr, 0));
  Buffer copy = view;  // shares
  CHECK(copy.data() == view.data());

  Buffer payload(std::string(1000, 'q'));
  auto bytes = std::make_shared<const std::string>(EncodeValue(payload));
  auto raw = lumen::codec::DecodeBufferView(*bytes);
  REQUIRE(raw.ok());
  CHECK(raw->size() == 1000);
  CHECK((reinterpret_cast<const char*>(raw->data()) - bytes->data()) % 64 == 0);

  // Without keepalive: a copy. With: a view into the bytes.
  auto copied = DecodeValue<Buffer>(*bytes);
  REQUIRE(copied.ok());
  CHECK(*copied == payload);
  const char* begin = bytes->data();
  const char* end = begin + bytes->size();
  auto c = reinterpret_cast<const char*>(copied->data());
  CHECK((c < begin || c >= end));

  Outer o = SampleOuter();
  auto outer_bytes = std::make_shared<const std::string>(EncodeValue(o));
  std::weak_ptr<const std::string> weak = outer_bytes;
  absl::StatusOr<Outer> viewed = DecodeValue<Outer>(*outer_bytes, outer_bytes);
  REQUIRE(viewed.ok());
  CHECK(*viewed == o);
  auto vp = reinterpret_cast<const char*>(viewed->blob.data());
  CHECK(vp >= outer_bytes->data());
  CHECK(vp < outer_bytes->data() + outer_bytes->size());
  CHECK((vp - outer_bytes->data()) % 64 == 0);
  outer_bytes.reset();
  CHECK_FALSE(weak.expired());  // the decoded Buffer keeps the bytes alive
  CHECK(viewed->blob.view() == "blob bytes");
  viewed = Outer{};
  CHECK(weak.expired());
}

// --- Fuzz-style robustness -------------------------------------------------

using FuzzType = std::tuple<Outer, std::map<std::string, std::vector<std::optional<std::pair<int, double>>>>,
                            std::vector<bool>, std::unordered_set<std::string>, std::array<Color, 2>,
                            std::vector<double>, Wide>;

FuzzType SampleFuzzValue() {
  FuzzType v;
  std::get<0>(v) = SampleOuter();
  std::get<1>(v) = {{"k", {std::pair{1, 2.0}, std::nullopt}}, {"", {}}};
  std::get<2>(v) = {true, false, true};
  std::get<3>(v) = {"s1", "s2"};
  std::get<4>(v) = {Color::kRed, Color::kBlue};
  std::get<5>(v) = {1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0};
  std::get<6>(v).m = "wide";
  std::get<6>(v).n = {1, 2};
  return v;
}

// Decodes as several types; only checks that nothing crashes and reports are sane.
void DecodeAllWays(std::string_view bytes) {
  (void)DecodeValue<FuzzType>(bytes);
  (void)DecodeValue<FuzzType>(bytes, std::make_shared<int>(0));
  (void)DecodeValue<std::vector<std::string>>(bytes);
  (void)DecodeValue<std::vector<float>>(bytes);
  (void)lumen::codec::DecodeArrayView<double>(bytes);
  (void)lumen::codec::DecodeBufferView(bytes);
  (void)lumen::codec::StoredTypeName(bytes);
}

template <class T>
void CheckEveryPrefixFails(const T& value) {
  std::string bytes = EncodeValue(value);
  REQUIRE(DecodeValue<T>(bytes).ok());
  for (size_t n = 0; n < bytes.size(); ++n) {
    // Copy so that ASan would see reads past the prefix.
    std::string prefix = bytes.substr(0, n);
    INFO("prefix length " << n << " of " << bytes.size());
    CHECK_FALSE(DecodeValue<T>(prefix).ok());
  }
}

TEST_CASE("Every truncation of a valid value is an error") {
  CheckEveryPrefixFails(SampleFuzzValue());
  CheckEveryPrefixFails(std::string("abc"));
  CheckEveryPrefixFails(std::vector<float>{1, 2, 3});
  CheckEveryPrefixFails(Buffer(std::string("xyz")));
  CheckEveryPrefixFails(std::map<int, std::vector<bool>>{{1, {true}}, {2, {}}});
  CheckEveryPrefixFails(std::optional<std::string>("o"));
}

TEST_CASE("Random bytes and mutations never crash") {
  const uint32_t seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  auto byte = [&] { return static_cast<char>(rng() & 0xff); };

  const std::string valid = EncodeValue(SampleFuzzValue());
  const std::vector<std::string> seeds = {
      valid, EncodeValue(std::vector<std::string>{"a", "bb"}),
      EncodeValue(std::vector<float>{1, 2, 3}), EncodeValue(Buffer(std::string(70, 'b')))};

  // (a) random strings: pure noise, or a valid header followed by noise.
  for (int i = 0; i < 10000; ++i) {
    std::string s;
    if (i % 2 == 1) {
      const std::string& base = seeds[rng() % seeds.size()];
      size_t keep = rng() % (base.size() + 1);
      s = base.substr(0, keep);
    }
    size_t extra = rng() % 64;
    for (size_t k = 0; k < extra; ++k) s.push_back(byte());
    DecodeAllWays(s);
  }
  // (b) single-byte mutations of valid encodings.
  for (int i = 0; i < 10000; ++i) {
    std::string s = seeds[rng() % seeds.size()];
    s[rng() % s.size()] = byte();
    DecodeAllWays(s);
    if (s == seeds[0]) CHECK(DecodeValue<FuzzType>(s).ok());
  }
  SUCCEED();
}

}  // namespace

TEST_CASE("EncodeArrayPrefix plus raw bytes equals the vector's encoding") {
  for (size_t n : {size_t{0}, size_t{1}, size_t{1000}}) {
    std::vector<double> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = 0.5 * static_cast<double>(i);
    std::string manual = lumen::codec::EncodeArrayPrefix<double>(n);
    manual.append(reinterpret_cast<const char*>(v.data()), n * sizeof(double));
    REQUIRE(manual == lumen::codec::EncodeValue(v));
  }
}

TEST_CASE("EncodedValueSize measures and EncodeValueInto writes exactly EncodeValue's bytes") {
  // Invariant: a large value can be measured first and then written straight
  // into a buffer of that size (the object store), byte for byte the same as
  // encoding it into a string.
  auto check = [](const auto& value) {
    std::string expected = EncodeValue(value);
    REQUIRE(lumen::codec::EncodedValueSize(value) == expected.size());
    // 64-byte aligned, as the store places objects.
    std::vector<uint64_t> storage(expected.size() / 8 + 9);
    auto* out = reinterpret_cast<uint8_t*>(
        (reinterpret_cast<uintptr_t>(storage.data()) + 63) & ~uintptr_t{63});
    REQUIRE(lumen::codec::EncodeValueInto(out, expected.size(), value).ok());
    REQUIRE(std::string(reinterpret_cast<const char*>(out), expected.size()) == expected);
    // A buffer one byte short is refused, not overrun.
    if (!expected.empty()) {
      std::memset(out, 0xee, expected.size());
      auto status = lumen::codec::EncodeValueInto(out, expected.size() - 1, value);
      REQUIRE(status.code() == absl::StatusCode::kInternal);
      REQUIRE(out[expected.size() - 1] == 0xee);
    }
  };
  check(42);
  check(std::string(1000, 'x'));
  check(std::vector<float>(12345, 1.5f));
  check(std::vector<std::string>{"a", "", std::string(300, 'b')});
  check(Buffer(std::string(777, 'q')));
  check(SampleOuter());
  check(std::map<int, std::vector<double>>{{1, {1.0, 2.0}}, {7, {}}});
  // Measuring counts bytes without reading them.
  lumen::codec::Writer w = lumen::codec::Writer::Measuring();
  REQUIRE(w.measuring());
  w.WriteBytes(nullptr, size_t{1} << 40);  // counted, never read
  REQUIRE(w.Position() == size_t{1} << 40);
}
