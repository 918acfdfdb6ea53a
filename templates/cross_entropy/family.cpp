// The two softmax cross-entropy families: spaces, constraints, rendering,
// launch plans, workloads with their CPU reference, FLOP/byte counts.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "base/error.hpp"
#include "templates/cross_entropy/cross_entropy.hpp"
#include "templates/render.hpp"

namespace ktune::templates::cross_entropy {
namespace {

constexpr const char* kTemplate = "cross_entropy/cross_entropy.cuh";
constexpr std::int64_t kMinRowThreads = 8;    // the smallest `row_threads`
constexpr std::int64_t kMaxAccessBytes = 16;  // the widest single load or store
// Defaults give each thread of a row at most this many vectors of it: rows
// of the model's vocabulary then take a few steps of a few hundred threads.
constexpr std::int64_t kDefaultVectorsPerThread = 8;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

bool is_bf16(const Problem& p) { return p.dtype == "bf16"; }
std::int64_t logit_bytes(const Problem& p) { return is_bf16(p) ? 2 : 4; }
const char* logit_type(const Problem& p) { return is_bf16(p) ? "__nv_bfloat16" : "float"; }

/// Rows of one block.
std::int64_t rows_per_block(const Config& c) { return c.at("threads") / c.at("row_threads"); }

bool reject(std::string* why, std::string reason) {
  if (why) *why = std::move(reason);
  return false;
}

/// Logits and targets as a language model's head gives them: per row, a
/// normal spread (sigma log-uniform in [0.5, 4]) around an offset uniform in
/// [-120, 120], so exp(logit) over- or underflows fp32 in a third of the rows unless
/// the row's max is subtracted first; every third row's target is its
/// largest logit by 12, more than log(vocab) for vocabularies up to ~10^5 (a
/// confident, correct prediction, loss near 0); the others' targets are
/// uniform. The logits are rounded to the problem's
/// dtype, so the reference computes on exactly what the kernel reads.
struct Batch {
  std::vector<double> logits;  // (rows, vocab), exactly representable in the dtype
  std::vector<std::int32_t> targets;
};
Batch make_batch(const Problem& p, std::uint64_t seed) {
  const std::int64_t rows = p.dim("rows"), vocab = p.dim("vocab");
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> offset(-120.0, 120.0), log_sigma(std::log(0.5), std::log(4.0));
  std::normal_distribution<double> normal;
  Batch b;
  b.logits.resize(static_cast<std::size_t>(rows * vocab));
  b.targets.resize(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) {
    const double mean = offset(rng), sigma = std::exp(log_sigma(rng));
    double* row = b.logits.data() + r * vocab;
    for (std::int64_t c = 0; c < vocab; ++c) row[c] = mean + sigma * normal(rng);
    auto& target = b.targets[static_cast<std::size_t>(r)];
    target = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(vocab));
    if (r % 3 == 0) row[target] = *std::max_element(row, row + vocab) + 12.0;
    for (std::int64_t c = 0; c < vocab; ++c)
      row[c] = is_bf16(p) ? bf16_bits_to_float(float_to_bf16_bits(static_cast<float>(row[c])))
                          : static_cast<double>(static_cast<float>(row[c]));
  }
  return b;
}

/// `values` stored as bf16 (`bf16`) or fp32, in a buffer with role `role`.
HostBuffer values_buffer(std::string name, Role role, bool bf16, const std::vector<double>& values) {
  if (bf16) {
    std::vector<std::uint16_t> bits(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) bits[i] = float_to_bf16_bits(static_cast<float>(values[i]));
    return make_buffer(std::move(name), role, DType::kBF16, bits);
  }
  return make_buffer(std::move(name), role, DType::kF32, std::vector<float>(values.begin(), values.end()));
}

/// An output buffer, bf16 or fp32, expecting `values` rounded to its dtype and
/// checked with that dtype's tolerance.
HostBuffer output_buffer(std::string name, bool bf16, const std::vector<double>& values) {
  HostBuffer b = values_buffer(name, Role::kOutput, bf16, std::vector<double>(values.size()));
  b.expected = values_buffer(name, Role::kOutput, bf16, values).bytes;
  b.tolerance = tolerance_for(bf16 ? "bf16" : "f32");
  return b;
}

void require_aligned(const std::string& family, const char* buffer, std::uint64_t address, std::int64_t align) {
  KTUNE_REQUIRE(address % static_cast<std::uint64_t>(align) == 0,
                fmt::format("{}: buffer '{}' at {:#x} is not aligned to its {}-byte elements", family, buffer,
                            address, align));
}

/// What both families share: the row layout's space, problems, constraints,
/// default and grid.
class RowFamily : public Family {
 public:
  RowFamily()
      : space_({{"threads", {64, 128, 256, 512, 1024},
                 "threads per block: more rows per block vs more blocks in flight"},
                {"row_threads", {8, 16, 32, 64, 128, 256, 512, 1024},
                 "threads per row: up to a warp merges with shuffles alone, more shorten each thread's stream"},
                {"vec", {1, 2, 4, 8}, "elements per access (up to 16 bytes): wider loads, fewer instructions"},
                // unroll stops at 4: a step's logits (at most 32) then fit in registers (ptxas: at most 74
                // over the space). The only spills, 8 to 32 bytes, are sm_90's with 1024-thread blocks, where
                // ptxas keeps kernels at 32 registers for full occupancy; the defaults never spill.
                {"unroll", {1, 2, 4},
                 "vectors per thread per step: more loads in flight and fewer rescales of the running sum, more "
                 "registers"}}) {}

  std::vector<std::string> source_files() const override { return {kTemplate}; }
  const Space& space() const override { return space_; }

  std::vector<Problem> problem_classes() const override {
    // The model's vocabulary over a few rows (every row starts 16-byte
    // aligned); a ragged 1001, where rows start at every alignment and have
    // heads and tails; a 77-logit vocabulary, many rows per block.
    return {Problem{"f32", {{"rows", 3}, {"vocab", 10000}}}, Problem{"bf16", {{"rows", 3}, {"vocab", 10000}}},
            Problem{"f32", {{"rows", 37}, {"vocab", 1001}}}, Problem{"bf16", {{"rows", 45}, {"vocab", 77}}}};
  }

  void check_problem(const Problem& p) const override {
    KTUNE_REQUIRE(p.dtype == "f32" || p.dtype == "bf16",
                  name() + ": dtype '" + p.dtype + "' is not supported; accepted: f32, bf16 (bf16 logits; int32 "
                  "targets; fp32 losses, lse and math)");
    for (const auto& [k, v] : p.dims)
      KTUNE_REQUIRE(k == "rows" || k == "vocab", name() + ": unknown dimension '" + k + "'; accepted: rows, vocab");
    KTUNE_REQUIRE(p.dims.count("rows") && p.dim("rows") >= 1 && p.dim("rows") <= kMaxRows,
                  name() + ": dimension 'rows' (tokens) must be in 1..2^31-1");
    KTUNE_REQUIRE(p.dims.count("vocab") && p.dim("vocab") >= 1 && p.dim("vocab") <= kMaxVocab,
                  name() + ": dimension 'vocab' must be in 1..2^30 (column indices are 32-bit)");
  }

  bool is_valid(const Config& c, const Problem& p, const DeviceLimits& d, std::string* why) const override {
    const std::int64_t threads = c.at("threads"), row_threads = c.at("row_threads"), vec = c.at("vec"),
                       unroll = c.at("unroll");
    const std::int64_t vocab = p.dim("vocab");
    if (threads > d.max_threads_per_block) return reject(why, "threads exceed the device's block limit");
    if (row_threads > threads) return reject(why, "a row's threads must fit in one block (row_threads <= threads)");
    if (vec * logit_bytes(p) > kMaxAccessBytes)
      return reject(why, fmt::format("a vector access is at most 16 bytes: vec <= {} for {}",
                                     kMaxAccessBytes / logit_bytes(p), p.dtype));
    if (row_threads > kMinRowThreads && row_threads / 2 * vec >= vocab)
      return reject(why, fmt::format("half of each row's threads or more would get no vector of the {} logits: lower "
                                     "row_threads or vec",
                                     vocab));
    if (unroll > 1 && row_threads * vec * (unroll / 2) >= vocab)
      return reject(why, fmt::format("a row of {} logits ends within the first half of one step: lower unroll", vocab));
    return true;
  }

  Config default_config(const Problem& p) const override {
    // The widest vector, then the fewest threads per row that leave each at
    // most kDefaultVectorsPerThread vectors (1024 for longer rows); two
    // vectors per step where the row is long enough; at least 256 threads per
    // block. Not measured on a GPU yet: the tuned cache is where the best goes.
    const DeviceLimits any = DeviceLimits::for_arch("sm_80");
    const std::int64_t vocab = p.dim("vocab"), vec = kMaxAccessBytes / logit_bytes(p);
    std::int64_t row_threads = kMinRowThreads;
    while (row_threads < 1024 && ceil_div(vocab, row_threads * vec) > kDefaultVectorsPerThread) row_threads *= 2;
    for (std::int64_t v = vec; v >= 1; v /= 2)
      for (std::int64_t unroll : {2, 1}) {
        const Config c({{"threads", std::max<std::int64_t>(256, row_threads)}, {"row_threads", row_threads},
                        {"vec", v}, {"unroll", unroll}});
        if (is_valid(c, p, any, nullptr)) return c;
      }
    throw_error(ErrorKind::kInternal, name() + ": no valid config for " + p.key());
  }

 protected:
  /// The kernel's name expression: THREADS, ROW_THREADS, VEC, UNROLL, T.
  std::string kernel(const char* function, const Config& c, const Problem& p) const {
    return fmt::format("cross_entropy::{}<{}, {}, {}, {}, {}>", function, c.at("threads"), c.at("row_threads"),
                       c.at("vec"), c.at("unroll"), logit_type(p));
  }
  /// One launch of `c`'s row layout over the problem's rows.
  static Launch row_launch(const Config& c, const Problem& p) {
    Launch l;
    l.grid = {static_cast<unsigned>(ceil_div(p.dim("rows"), rows_per_block(c))), 1, 1};
    l.block = {static_cast<unsigned>(c.at("threads")), 1, 1};
    return l;
  }

 private:
  Space space_;
};

// ---- cross_entropy_fwd --------------------------------------------------------------

class Forward final : public RowFamily {
 public:
  std::string name() const override { return "cross_entropy_fwd"; }
  std::string summary() const override {
    return "softmax cross-entropy forward: loss = logsumexp(row) - row[target] per row (one online pass), lse kept";
  }

  Rendered render(const Config& c, const Problem& p) const override {
    return render_template(kTemplate, {kernel("cross_entropy_fwd", c, p)}, name());
  }

  Workload make_workload(const Problem& p, std::uint64_t seed) const override {
    check_problem(p);
    const std::int64_t rows = p.dim("rows"), vocab = p.dim("vocab");
    const Batch b = make_batch(p, seed);
    std::vector<double> losses(static_cast<std::size_t>(rows)), lse(static_cast<std::size_t>(rows));
    cross_entropy_forward<double>(b.logits.data(), b.targets.data(), losses.data(), lse.data(), rows, vocab);
    Workload w;
    w.buffers.push_back(values_buffer("logits", Role::kInput, is_bf16(p), b.logits));
    w.buffers.push_back(make_buffer("targets", Role::kInput, DType::kI32, b.targets));
    w.buffers.push_back(output_buffer("losses", false, losses));
    w.buffers.push_back(output_buffer("lse", false, lse));
    return w;
  }

  std::vector<Launch> plan(const Config& c, const Problem& p, const std::vector<std::uint64_t>& a,
                           const DeviceLimits&) const override {
    check_problem(p);
    KTUNE_REQUIRE(a.size() == 4, name() + ": expects the addresses of logits, targets, losses, lse");
    require_aligned(name(), "logits", a[0], logit_bytes(p));
    require_aligned(name(), "targets", a[1], 4);
    require_aligned(name(), "losses", a[2], 4);
    require_aligned(name(), "lse", a[3], 4);
    Launch l = row_launch(c, p);
    l.args.add(a[0]).add(a[1]).add(a[2]).add(a[3]);
    l.args.add(static_cast<long long>(p.dim("rows"))).add(static_cast<int>(p.dim("vocab")));
    std::vector<Launch> launches;
    launches.push_back(std::move(l));
    return launches;
  }

  double flops(const Problem& p) const override {  // max, subtract, exp, add per logit
    return 4.0 * static_cast<double>(p.dim("rows")) * static_cast<double>(p.dim("vocab"));
  }
  double bytes(const Problem& p) const override {  // read the logits and targets; write losses and lse
    const double rows = static_cast<double>(p.dim("rows")), vocab = static_cast<double>(p.dim("vocab"));
    return static_cast<double>(logit_bytes(p)) * rows * vocab + 12.0 * rows;
  }
};

// ---- cross_entropy_bwd --------------------------------------------------------------

class Backward final : public RowFamily {
 public:
  std::string name() const override { return "cross_entropy_bwd"; }
  std::string summary() const override {
    return "softmax cross-entropy backward: dlogits = (softmax - onehot(target)) / rows from the forward's lse "
           "(may be in place)";
  }

  Rendered render(const Config& c, const Problem& p) const override {
    return render_template(kTemplate, {kernel("cross_entropy_bwd", c, p)}, name());
  }

  Workload make_workload(const Problem& p, std::uint64_t seed) const override {
    check_problem(p);
    const std::int64_t rows = p.dim("rows"), vocab = p.dim("vocab");
    const Batch b = make_batch(p, seed);
    std::vector<double> losses(static_cast<std::size_t>(rows)), lse(static_cast<std::size_t>(rows));
    cross_entropy_forward<double>(b.logits.data(), b.targets.data(), losses.data(), lse.data(), rows, vocab);
    // lse as the forward leaves it: fp32.
    const std::vector<float> lse32(lse.begin(), lse.end());
    std::copy(lse32.begin(), lse32.end(), lse.begin());
    std::vector<double> dlogits(b.logits.size());
    cross_entropy_backward<double>(b.logits.data(), b.targets.data(), lse.data(), static_cast<double>(mean_scale(p)),
                                   dlogits.data(), rows, vocab);
    Workload w;
    w.buffers.push_back(values_buffer("logits", Role::kInput, is_bf16(p), b.logits));
    w.buffers.push_back(make_buffer("targets", Role::kInput, DType::kI32, b.targets));
    w.buffers.push_back(make_buffer("lse", Role::kInput, DType::kF32, lse32));
    w.buffers.push_back(output_buffer("dlogits", is_bf16(p), dlogits));
    return w;
  }

  std::vector<Launch> plan(const Config& c, const Problem& p, const std::vector<std::uint64_t>& a,
                           const DeviceLimits&) const override {
    check_problem(p);
    KTUNE_REQUIRE(a.size() == 4, name() + ": expects the addresses of logits, targets, lse, dlogits");
    require_aligned(name(), "logits", a[0], logit_bytes(p));
    require_aligned(name(), "targets", a[1], 4);
    require_aligned(name(), "lse", a[2], 4);
    require_aligned(name(), "dlogits", a[3], logit_bytes(p));
    Launch l = row_launch(c, p);
    l.args.add(a[0]).add(a[1]).add(a[2]).add(mean_scale(p)).add(a[3]);
    l.args.add(static_cast<long long>(p.dim("rows"))).add(static_cast<int>(p.dim("vocab")));
    std::vector<Launch> launches;
    launches.push_back(std::move(l));
    return launches;
  }

  double flops(const Problem& p) const override {  // subtract, exp, multiply per logit
    return 3.0 * static_cast<double>(p.dim("rows")) * static_cast<double>(p.dim("vocab"));
  }
  double bytes(const Problem& p) const override {  // read the logits, write dlogits; targets and lse
    const double rows = static_cast<double>(p.dim("rows")), vocab = static_cast<double>(p.dim("vocab"));
    return 2.0 * static_cast<double>(logit_bytes(p)) * rows * vocab + 8.0 * rows;
  }
};

}  // namespace

float mean_scale(const Problem& p) { return 1.0f / static_cast<float>(p.dim("rows")); }

const Family& forward_family() {
  static const Forward f;
  return f;
}
const Family& backward_family() {
  static const Backward f;
  return f;
}

}  // namespace ktune::templates::cross_entropy
