// Tests of the collective binaries' shared pieces (collectives/): option validation through
// parse_options with argv arrays, the size sweep, element encoding (reference bit patterns
// from numpy float16 and torch bfloat16), the check inputs, and count_wrong. The per-collective
// specs (bus factors, byte-count rules) are tested in spec_test.cpp; end to end through
// the binaries' HDF5 output in tests/mpi/.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "data.hpp"
#include "options.hpp"

namespace meshbench::collectives {
namespace {

using comm::DType;
using comm::RedOp;

// ---- parse_options -------------------------------------------------------------------------

// Builds a mutable argv from strings; argv[0] is the binary.
struct Argv {
  explicit Argv(std::vector<std::string> a) : store(std::move(a)) {
    store.insert(store.begin(), "all_reduce_bench");
    for (auto& s : store) ptrs.push_back(s.data());
    ptrs.push_back(nullptr);
  }
  int argc() const { return static_cast<int>(store.size()); }
  char** argv() { return ptrs.data(); }
  std::vector<std::string> store;
  std::vector<char*> ptrs;
};

Options parse(std::vector<std::string> args, bool reduces = true, bool rooted = false) {
  Argv a(std::move(args));
  auto o = parse_options("all_reduce_bench", reduces, rooted, a.argc(), a.argv(), false);
  if (!o) throw std::runtime_error("parse_options returned nullopt (help)");
  return *o;
}

// Expects core::UsageError whose message contains every one of `parts`.
void expect_usage(std::vector<std::string> args, std::initializer_list<std::string> parts) {
  std::string joined;
  for (auto& s : args) joined += s + " ";
  try {
    parse(args);
    ADD_FAILURE() << "expected core::UsageError for: " << joined;
  } catch (const core::UsageError& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

TEST(Options, DefaultsAreNcclTests) {
  Options o = parse({});
  EXPECT_EQ(o.min_bytes, 8u);
  EXPECT_EQ(o.max_bytes, 128u << 20);
  EXPECT_EQ(o.step_factor, 2u);
  EXPECT_EQ(o.check, 1);
  ASSERT_EQ(o.dtypes.size(), 1u);
  EXPECT_EQ(o.dtypes[0], DType::kFloat);
  ASSERT_EQ(o.ops.size(), 1u);
  EXPECT_EQ(o.ops[0], RedOp::kSum);
  EXPECT_EQ(o.backend, comm::Backend::kMpi);
  EXPECT_EQ(o.mem, compute::MemKind::kHost);
  EXPECT_EQ(o.inplace, InplaceMode::kBoth);
  EXPECT_EQ(o.timing, Timing::kIsolated);
  EXPECT_FALSE(o.append);
  EXPECT_EQ(o.inject_fault, -1);
}

TEST(Options, ParsesTheNcclTestsFlags) {
  Options o = parse({"-b", "64K", "-e", "1G", "-f", "4", "-n", "7", "-w", "0", "-c", "0", "-d", "int8,double",
                     "-o", "max,prod", "--inplace", "no", "--timing", "pipelined", "-O", "x.h5", "--append",
                     "--tag", "shm", "--time-limit", "2.5", "-q", "--inject-fault", "1"});
  EXPECT_EQ(o.min_bytes, 64u << 10);
  EXPECT_EQ(o.max_bytes, 1u << 30);
  EXPECT_EQ(o.step_factor, 4u);
  EXPECT_EQ(o.iters, 7);
  EXPECT_EQ(o.warmup, 0);
  EXPECT_EQ(o.check, 0);
  EXPECT_EQ(o.dtypes, (std::vector<DType>{DType::kInt8, DType::kDouble}));
  EXPECT_EQ(o.ops, (std::vector<RedOp>{RedOp::kMax, RedOp::kProd}));
  EXPECT_FALSE(o.all_dtypes);
  EXPECT_EQ(o.inplace, InplaceMode::kNo);
  EXPECT_EQ(o.timing, Timing::kPipelined);
  EXPECT_EQ(o.output, "x.h5");
  EXPECT_TRUE(o.append);
  EXPECT_EQ(o.tag, "shm");
  EXPECT_DOUBLE_EQ(o.time_limit, 2.5);
  EXPECT_TRUE(o.quiet);
  EXPECT_EQ(o.inject_fault, 1);
}

TEST(Options, AllDtypesAndOps) {
  Options o = parse({"-d", "all", "-o", "all"});
  EXPECT_TRUE(o.all_dtypes);
  EXPECT_TRUE(o.all_ops);
  EXPECT_EQ(o.dtypes.size(), comm::kAllDTypes.size());
  EXPECT_EQ(o.ops.size(), comm::kAllRedOps.size());
}

TEST(Options, RootIsParsedForRootedCollectives) {
  Options o = parse({"-r", "3"}, false, true);
  EXPECT_EQ(o.root, 3);
  EXPECT_EQ(parse({"--root", "1"}, false, true).root, 1);
}

TEST(Options, HelpReturnsNothing) {
  Argv a({"--help"});
  EXPECT_FALSE(parse_options("all_reduce_bench", true, false, a.argc(), a.argv(), false).has_value());
}

TEST(Options, SizeRules) {
  expect_usage({"-b", "1M", "-e", "64K"}, {"-b/--min-bytes", "must not exceed", "-e/--max-bytes"});
  expect_usage({"-b", "12Q"}, {"-b/--min-bytes", "'12Q' is not a size"});
  expect_usage({"-e", "1.5M"}, {"-e/--max-bytes", "'1.5M'"});
  expect_usage({"-e", "-8"}, {"-e/--max-bytes"});
  EXPECT_EQ(parse({"-b", "64K", "-e", "64K"}).min_bytes, 64u << 10);  // equal is fine
}

TEST(Options, SizesListInsteadOfTheSweep) {
  const Options o = parse({"--sizes", "3K,8,24,1K,8"});  // sorted, repeats dropped
  EXPECT_EQ(o.sizes, (std::vector<std::uint64_t>{8, 24, 1024, 3072}));
  EXPECT_EQ(size_sweep(o), o.sizes);
  EXPECT_EQ(o.min_bytes, 8u);
  EXPECT_EQ(o.max_bytes, 3072u);
  EXPECT_TRUE(parse({}).sizes.empty());
  expect_usage({"--sizes", "8,x"}, {"--sizes", "'x' is not a size"});
  expect_usage({"--sizes", ","}, {"--sizes", "at least one size"});
  expect_usage({"--sizes", "8,16", "-b", "8"}, {"--sizes and --min-bytes are alternatives"});
  expect_usage({"--sizes", "8,16", "-e", "1M"}, {"--sizes and --max-bytes are alternatives"});
  expect_usage({"--sizes", "8,16", "-f", "4"}, {"--sizes and --step-factor are alternatives"});
  {  // a sweep bound from the environment gives way to --sizes on the command line
    ScopedEnv cap("MESHBENCH_MAX_BYTES", "64K");
    EXPECT_EQ(parse({"--sizes", "8,192K"}).sizes, (std::vector<std::uint64_t>{8, 196608}));
    ScopedEnv list("MESHBENCH_SIZES", "8,16");  // both from the environment: refused
    expect_usage({}, {"--sizes and --max-bytes are alternatives", "MESHBENCH_MAX_BYTES=64K"});
  }
}

TEST(Options, LoopRules) {
  expect_usage({"-f", "1"}, {"-f/--step-factor", "at least 2"});
  expect_usage({"-f", "0"}, {"-f/--step-factor"});
  expect_usage({"-n", "0"}, {"-n/--iters", "at least 1"});
  expect_usage({"-n", "-3"}, {"-n/--iters"});
  expect_usage({"-w", "-1"}, {"-w/--warmup"});
  expect_usage({"-c", "2"}, {"-c/--check", "0 or 1"});
  expect_usage({"--time-limit", "-1"}, {"--time-limit"});
  expect_usage({"-n", "many"}, {"many"});
}

TEST(Options, VocabularyRules) {
  expect_usage({"-d", "float128"}, {"-d/--dtype", "unknown type 'float128'"});
  expect_usage({"-d", "float,bogus"}, {"-d/--dtype", "'bogus'"});
  expect_usage({"-d", ","}, {"-d/--dtype", "no type"});
  expect_usage({"-o", "mean"}, {"-o/--op", "unknown op 'mean'"});
  expect_usage({"--backend", "gloo"}, {"--backend", "unknown backend 'gloo'"});
  expect_usage({"--mem", "disk"}, {"--mem", "'disk'"});
  expect_usage({"--inplace", "maybe"}, {"--inplace", "'maybe'"});
  expect_usage({"--timing", "fast"}, {"--timing", "'fast'"});
  expect_usage({"--timing", "window", "--backend", "nccl"}, {"--timing window", "--backend mpi"});
  EXPECT_EQ(parse({"--timing", "window"}).timing, Timing::kWindow);
  expect_usage({"--bogus"}, {"--bogus"});
}

TEST(Options, CombinationRules) {
  expect_usage({"--append"}, {"--append", "-O/--output"});
  expect_usage({"--backend", "nccl", "--mem", "host"}, {"--mem host", "nccl"});
  expect_usage({"-r", "-1"}, {"-r/--root"});
  // nccl defaults to device memory; mpi to host.
  EXPECT_EQ(parse({"--backend", "nccl"}).mem, compute::MemKind::kDevice);
  EXPECT_EQ(parse({"--mem", "device"}).mem, compute::MemKind::kDevice);
}

TEST(Options, EnvironmentSetsDefaults) {
  {
    ScopedEnv iters("MESHBENCH_ITERS", "50");
    ScopedEnv max("MESHBENCH_MAX_BYTES", "4M");
    ScopedEnv dtype("MESHBENCH_DTYPE", "int32");
    Options o = parse({});
    EXPECT_EQ(o.iters, 50);
    EXPECT_EQ(o.max_bytes, 4u << 20);
    EXPECT_EQ(o.dtypes, std::vector<DType>{DType::kInt32});
    EXPECT_EQ(parse({"-n", "3"}).iters, 3);  // the command line wins over the environment
  }
  EXPECT_EQ(parse({}).iters, 20);  // and the variable is gone again
  {
    ScopedEnv iters("MESHBENCH_ITERS", "0");  // validated like the flag
    expect_usage({}, {"-n/--iters"});
  }
  {
    ScopedEnv append("MESHBENCH_APPEND", "1");
    expect_usage({}, {"--append"});
  }
}

TEST(Options, WarmupAndIterationDefaultsAreAdaptiveUntilGiven) {
  Options d = parse({});
  EXPECT_EQ(d.warmup, -1);
  EXPECT_FALSE(d.iters_fixed);
  EXPECT_EQ(d.iters, 20);
  Options o = parse({"-w", "7", "-n", "20"});
  EXPECT_EQ(o.warmup, 7);
  EXPECT_TRUE(o.iters_fixed);  // -n given, even at its default value: exactly 20
  EXPECT_EQ(parse({"-w", "auto"}).warmup, -1);
  EXPECT_EQ(parse({"-w", "0"}).warmup, 0);
  {
    ScopedEnv iters("MESHBENCH_ITERS", "30");  // the environment counts as given
    EXPECT_TRUE(parse({}).iters_fixed);
  }
  Options w = parse({"--warmup-tolerance", "0.1", "--warmup-max", "50", "--warmup-time", "2"});
  EXPECT_DOUBLE_EQ(w.warmup_policy.tolerance, 0.1);
  EXPECT_EQ(w.warmup_policy.max_calls, 50);
  EXPECT_DOUBLE_EQ(w.warmup_policy.max_seconds, 2);
  EXPECT_DOUBLE_EQ(w.warmup_policy.floor_seconds, 0.5);
}

TEST(Options, WarmupRankStatAndTimeoutRules) {
  expect_usage({"-w", "soon"}, {"-w/--warmup", "'soon'", "auto"});
  expect_usage({"-w", "5x"}, {"-w/--warmup", "'5x'"});
  expect_usage({"--warmup-tolerance", "0"}, {"--warmup-tolerance", "between 0 and 1"});
  expect_usage({"--warmup-max", "0"}, {"--warmup-max", "at least 1"});
  expect_usage({"--warmup-time", "0"}, {"--warmup-time", "positive"});
  expect_usage({"--min-time", "-1"}, {"--min-time", "negative"});
  expect_usage({"--max-iters", "5"}, {"--max-iters (5)", "-n/--iters (20)"});
  expect_usage({"--rank-stat", "median"}, {"--rank-stat", "'median'", "max, avg, min or rank0"});
  expect_usage({"--op-timeout", "-1"}, {"--op-timeout -1", "must be a finite number of seconds >= 0"});
  expect_usage({"--op-timeout", "nan"}, {"--op-timeout nan", "must be a finite number of seconds >= 0"});
  expect_usage({"--time-limit", "inf"}, {"--time-limit inf", "must be a finite number of seconds >= 0"});
  EXPECT_EQ(parse({"--rank-stat", "avg"}).rank_stat, core::RankStat::kAvg);
  EXPECT_EQ(parse({"--rank-stat", "rank0"}).rank_stat, core::RankStat::kRank0);
  EXPECT_DOUBLE_EQ(parse({}).op_timeout, 300);
  EXPECT_DOUBLE_EQ(parse({"--op-timeout", "0"}).op_timeout, 0);
}

// ---- size_sweep ----------------------------------------------------------------------------

std::vector<std::uint64_t> sweep(std::uint64_t lo, std::uint64_t hi, std::uint64_t f) {
  Options o;
  o.min_bytes = lo;
  o.max_bytes = hi;
  o.step_factor = f;
  return size_sweep(o);
}

using V = std::vector<std::uint64_t>;

TEST(SizeSweep, PowersOfTheFactorUpToMax) {
  EXPECT_EQ(sweep(8, 128, 2), (V{8, 16, 32, 64, 128}));
  EXPECT_EQ(sweep(8, 100, 2), (V{8, 16, 32, 64}));  // max is a bound, not a point
  EXPECT_EQ(sweep(1, 3u << 20, 7), (V{1, 7, 49, 343, 2401, 16807, 117649, 823543}));
  EXPECT_EQ(sweep(64, 64, 2), (V{64}));
  EXPECT_EQ(sweep(3, 1000, 10), (V{3, 30, 300}));
}

TEST(SizeSweep, ZeroStartThenOne) {
  EXPECT_EQ(sweep(0, 8, 2), (V{0, 1, 2, 4, 8}));
  EXPECT_EQ(sweep(0, 0, 2), (V{0}));
  EXPECT_EQ(sweep(0, 100, 10), (V{0, 1, 10, 100}));
}

TEST(SizeSweep, NoOverflowNearTheTop) {
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  EXPECT_EQ(sweep(kMax, kMax, 2), (V{kMax}));
  EXPECT_EQ(sweep(1ull << 63, kMax, 2), (V{1ull << 63}));
  V all = sweep(1, kMax, 2);
  ASSERT_EQ(all.size(), 64u);
  EXPECT_EQ(all.back(), 1ull << 63);
  V big = sweep(1ull << 62, kMax, 3);  // 3 * 2^62 still fits, 9 * 2^62 would not
  EXPECT_EQ(big, (V{1ull << 62, 3ull << 62}));
}

// ---- encode / decode -----------------------------------------------------------------------

TEST(Encode, SmallIntegersRoundTripInEveryDtype) {
  for (DType t : comm::kAllDTypes) {
    for (int v = -32; v <= 31; ++v) {
      std::byte buf[8] = {};
      encode(t, v, buf);
      EXPECT_EQ(decode(t, buf), static_cast<double>(v)) << comm::name(t) << " " << v;
    }
  }
}

TEST(Encode, WidthsAndLittleEndianBytes) {
  std::byte buf[9];
  for (DType t : comm::kAllDTypes) {
    std::memset(buf, 0xEE, sizeof buf);
    encode(t, 1.0, buf);
    for (std::size_t i = comm::size_of(t); i < sizeof buf; ++i)
      EXPECT_EQ(buf[i], std::byte{0xEE}) << comm::name(t) << " wrote past its width";
  }
  std::int32_t i32;
  encode(DType::kInt32, -7, &i32);
  EXPECT_EQ(i32, -7);
  double d;
  encode(DType::kDouble, 0.1, &d);
  EXPECT_EQ(d, 0.1);
}

TEST(Encode, IntegersWrapLikeHardware) {
  std::int8_t i8;
  encode(DType::kInt8, 130, &i8);
  EXPECT_EQ(i8, -126);
  encode(DType::kInt8, -129, &i8);
  EXPECT_EQ(i8, 127);
  encode(DType::kInt8, 256, &i8);
  EXPECT_EQ(i8, 0);
  EXPECT_EQ(decode(DType::kInt8, &i8), 0.0);
  std::int32_t i32;
  encode(DType::kInt32, 2147483648.0, &i32);  // 2^31
  EXPECT_EQ(i32, std::numeric_limits<std::int32_t>::min());
  encode(DType::kInt32, -2147483649.0, &i32);
  EXPECT_EQ(i32, std::numeric_limits<std::int32_t>::max());
}

std::uint16_t bits16(DType t, double v) {
  std::uint16_t x;
  encode(t, v, &x);
  return x;
}

TEST(Encode, HalfMatchesIeeeBinary16) {  // references: numpy.float16(v).view(uint16)
  EXPECT_EQ(bits16(DType::kHalf, 1.0), 0x3C00);
  EXPECT_EQ(bits16(DType::kHalf, -2.0), 0xC000);
  EXPECT_EQ(bits16(DType::kHalf, 0.5), 0x3800);
  EXPECT_EQ(bits16(DType::kHalf, -32.0), 0xD000);
  EXPECT_EQ(bits16(DType::kHalf, 31.0), 0x4FC0);
  EXPECT_EQ(bits16(DType::kHalf, 65504.0), 0x7BFF);                 // largest finite
  EXPECT_EQ(bits16(DType::kHalf, 70000.0), 0x7C00);                 // overflows to inf
  EXPECT_EQ(bits16(DType::kHalf, 2049.0), 0x6800);                  // tie to even: 2048
  EXPECT_EQ(bits16(DType::kHalf, 2051.0), 0x6802);                  // tie to even: 2052
  EXPECT_EQ(bits16(DType::kHalf, 0.1), 0x2E66);
  EXPECT_EQ(bits16(DType::kHalf, 5.9604644775390625e-08), 0x0001);  // smallest subnormal
  EXPECT_EQ(bits16(DType::kHalf, 1e-8), 0x0000);                    // underflows to 0
  std::uint16_t h = 0x0001;
  EXPECT_EQ(decode(DType::kHalf, &h), std::ldexp(1.0, -24));
  h = 0x7BFF;
  EXPECT_EQ(decode(DType::kHalf, &h), 65504.0);
  h = 0x7C00;
  EXPECT_TRUE(std::isinf(decode(DType::kHalf, &h)));
  EXPECT_TRUE(std::isnan(decode(DType::kHalf, (h = 0x7E00, &h))));
}

TEST(Encode, Bf16MatchesTorch) {  // references: torch.tensor(v).bfloat16().view(int16)
  EXPECT_EQ(bits16(DType::kBf16, 1.0), 0x3F80);
  EXPECT_EQ(bits16(DType::kBf16, -2.0), 0xC000);
  EXPECT_EQ(bits16(DType::kBf16, -32.0), 0xC200);
  EXPECT_EQ(bits16(DType::kBf16, 31.0), 0x41F8);
  EXPECT_EQ(bits16(DType::kBf16, 257.0), 0x4380);  // tie to even: 256
  EXPECT_EQ(bits16(DType::kBf16, 259.0), 0x4382);  // tie to even: 260
  EXPECT_EQ(bits16(DType::kBf16, 65504.0), 0x4780);
  EXPECT_EQ(bits16(DType::kBf16, 70000.0), 0x4789);
  EXPECT_EQ(bits16(DType::kBf16, 0.1), 0x3DCD);
  std::uint16_t b = 0x4382;
  EXPECT_EQ(decode(DType::kBf16, &b), 260.0);
  EXPECT_TRUE(std::isnan(decode(DType::kBf16, (b = bits16(DType::kBf16, std::nan("")), &b))));
}

// ---- check inputs --------------------------------------------------------------------------

TEST(Inputs, ReductionsAreExactSmallIntegers) {
  for (int ranks : {1, 2, 3, 4, 8, 128}) {
    for (RedOp op : comm::kAllRedOps) {
      for (DType t : comm::kAllDTypes) {
        Inputs in{t, op, ranks, 0, {64, 64}};
        for (std::size_t i = 0; i < 64; ++i) {
          double r = in.reduce(i);
          if (op == RedOp::kProd) EXPECT_EQ(std::fabs(r), 2.0) << ranks << " ranks, element " << i;
          if (op == RedOp::kSum) {
            EXPECT_EQ(r, std::round(r));
            EXPECT_LE(std::fabs(r), 2.0 * ranks);
          }
          if (op == RedOp::kMin || op == RedOp::kMax) EXPECT_TRUE(r >= -1 && r <= 2);
          // Exact in the narrowest float type (half: integers up to 2048).
          if (op != RedOp::kAvg) EXPECT_LE(std::fabs(r), 2048.0);
        }
      }
    }
  }
}

TEST(Inputs, RanksGetDifferentData) {
  Inputs in{DType::kFloat, RedOp::kSum, 4, 0, {256, 256}};
  int differ = 0;
  for (std::size_t i = 0; i < 256; ++i) differ += in.value(0, i) != in.value(1, i);
  EXPECT_GT(differ, 100);  // a swapped rank would be caught
  Inputs copy{DType::kInt8, std::nullopt, 4, 0, {256, 256}};
  for (std::size_t i = 0; i < 256; ++i) {
    EXPECT_GE(copy.value(3, i), -32);
    EXPECT_LE(copy.value(3, i), 31);
  }
}

// ---- count_wrong ---------------------------------------------------------------------------

// The real plug-ins: all-reduce (element j is the reduction of element j on every rank)
// and send/recv (rank r receives rank r-1's input).
const Spec& kReduceSpec = all_reduce_spec();
const Spec& kShiftSpec = sendrecv_spec();

// What a correct all-reduce leaves in every rank's buffer.
std::vector<std::byte> reduced(const Inputs& in, std::size_t count) {
  std::size_t elt = comm::size_of(in.dtype);
  std::vector<std::byte> out(count * elt);
  for (std::size_t j = 0; j < count; ++j) encode(in.dtype, in.reduce(j), out.data() + j * elt);
  return out;
}

TEST(CountWrong, CorrectResultsPassAndOneFlippedElementIsCaught) {
  constexpr std::size_t kCount = 1000;
  for (DType t : comm::kAllDTypes) {
    for (RedOp op : comm::kAllRedOps) {
      Inputs in{t, op, 4, 0, {kCount, kCount}};
      auto got = reduced(in, kCount);
      EXPECT_EQ(count_wrong(kReduceSpec, in, 2, got.data(), kCount), 0u) << comm::name(t) << " " << comm::name(op);
      std::size_t elt = comm::size_of(t);
      // Exact ops: any bit counts, so flip the low byte as --inject-fault does. avg is
      // compared within a tolerance: flip the top exponent bit, which no rounding explains.
      if (op != RedOp::kAvg) got[617 * elt] ^= std::byte{0x5A};
      else got[617 * elt + elt - 1] ^= std::byte{0x40};
      EXPECT_EQ(count_wrong(kReduceSpec, in, 2, got.data(), kCount), 1u) << comm::name(t) << " " << comm::name(op);
      got[elt - 1] ^= std::byte{0x40};                   // first element
      got[(kCount - 1) * elt + elt - 1] ^= std::byte{0x40};  // last element
      EXPECT_EQ(count_wrong(kReduceSpec, in, 2, got.data(), kCount), 3u) << comm::name(t) << " " << comm::name(op);
      EXPECT_EQ(count_wrong(kReduceSpec, in, 2, got.data(), kCount - 1), 2u);  // count bounds the check
    }
  }
}

// --inject-fault (driver.cpp) flips bit 6 of element 0's most significant byte. That must be
// caught for every dtype and op wherever the element sits, including avg (compared within a
// tolerance) and elements whose expected value is 0. A low-byte flip was not: it was missed
// for every double avg element and for the zeros of float/half/bf16 avg.
TEST(CountWrong, InjectedFaultPatternIsCaughtForEveryDtypeAndOp) {
  constexpr std::size_t kCount = 200;
  for (DType t : comm::kAllDTypes) {
    for (RedOp op : comm::kAllRedOps) {
      for (int ranks : {2, 4}) {
        Inputs in{t, op, ranks, 0, {kCount, kCount}};
        auto got = reduced(in, kCount);
        std::size_t elt = comm::size_of(t);
        int missed = 0;
        for (std::size_t j = 0; j < kCount; ++j) {
          got[j * elt + elt - 1] ^= std::byte{0x40};
          missed += count_wrong(kReduceSpec, in, 0, got.data(), kCount) != 1;
          got[j * elt + elt - 1] ^= std::byte{0x40};
        }
        EXPECT_EQ(missed, 0) << comm::name(t) << " " << comm::name(op) << " at " << ranks << " ranks";
      }
    }
  }
}

TEST(CountWrong, SentinelIsNeverExpected) {
  // An untouched receive buffer (the driver fills it with a sentinel) counts every element.
  for (DType t : comm::kAllDTypes) {
    Inputs in{t, RedOp::kSum, 2, 0, {64, 64}};
    std::vector<std::byte> buf(64 * comm::size_of(t));
    fill_sentinel(t, buf.data(), 64);
    EXPECT_EQ(count_wrong(kReduceSpec, in, 0, buf.data(), 64), 64u) << comm::name(t);
    Inputs copy{t, std::nullopt, 2, 0, {64, 64}};
    EXPECT_EQ(count_wrong(kShiftSpec, copy, 0, buf.data(), 64), 64u) << comm::name(t);
  }
}

TEST(CountWrong, CopiesAreCheckedAgainstTheRightRank) {
  constexpr std::size_t kCount = 300;
  Inputs in{DType::kInt32, std::nullopt, 4, 0, {kCount, kCount}};
  std::vector<std::byte> buf(kCount * 4);
  fill_inputs(in, 1, buf.data(), 0, kCount);  // rank 2 should receive rank 1's input
  EXPECT_EQ(count_wrong(kShiftSpec, in, 2, buf.data(), kCount), 0u);
  EXPECT_GT(count_wrong(kShiftSpec, in, 3, buf.data(), kCount), kCount / 2);  // rank 3 wants rank 2's
  // fill_inputs with an offset continues the same sequence.
  std::vector<std::byte> tail(100 * 4);
  fill_inputs(in, 1, tail.data(), 200, 100);
  EXPECT_EQ(std::memcmp(tail.data(), buf.data() + 200 * 4, tail.size()), 0);
}

TEST(CountWrong, AvgToleratesRoundingButNotAWrongValue) {
  constexpr std::size_t kCount = 64;
  Inputs in{DType::kFloat, RedOp::kAvg, 3, 0, {kCount, kCount}};
  std::vector<std::byte> got(kCount * 4);
  for (std::size_t j = 0; j < kCount; ++j) {
    // A backend may compute sum * (1/n) instead of sum / n: off by an ulp.
    float v = static_cast<float>(in.reduce(j) * 3.0) * (1.0f / 3.0f);
    encode(DType::kFloat, v, got.data() + j * 4);
  }
  EXPECT_EQ(count_wrong(kReduceSpec, in, 0, got.data(), kCount), 0u);
  encode(DType::kFloat, in.reduce(5) + 1.0 / 3.0, got.data() + 5 * 4);
  EXPECT_EQ(count_wrong(kReduceSpec, in, 0, got.data(), kCount), 1u);
}

}  // namespace
}  // namespace meshbench::collectives
