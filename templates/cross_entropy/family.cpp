// The two softmax cross-entropy families: spaces, constraints, rendering,
// launch plans, workloads with their CPU reference, FLOP/byte counts.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "base/error.hpp"
#include "templates/common/family_helpers.hpp"
#include "templates/common/row_family.hpp"
#include "templates/cross_entropy/cross_entropy.hpp"
#include "templates/render.hpp"

namespace ktune::templates::cross_entropy {
namespace {

constexpr const char* kTemplate = "cross_entropy/cross_entropy.cuh";
constexpr std::int64_t kMaxAccessBytes = 16;  // the widest single load or store
// Defaults give each thread of a row at most this many vectors of it: rows
// of the model's vocabulary then take a few steps of a few hundred threads.
constexpr std::int64_t kDefaultVectorsPerThread = 8;

constexpr const char* kElements = "its elements";

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

/// The forward on a fresh batch: losses and lse from the fp64 reference.
struct ForwardPass {
  Batch batch;
  std::vector<double> losses, lse;
};
ForwardPass forward_pass(const Problem& p, std::uint64_t seed) {
  const std::int64_t rows = p.dim("rows"), vocab = p.dim("vocab");
  ForwardPass f{make_batch(p, seed), std::vector<double>(static_cast<std::size_t>(rows)),
                std::vector<double>(static_cast<std::size_t>(rows))};
  cross_entropy_forward<double>(f.batch.logits.data(), f.batch.targets.data(), f.losses.data(), f.lse.data(), rows,
                                vocab);
  return f;
}

/// What both families share beyond the row layout: the space, problems,
/// constraints and default.
template <class ArgsT>
class CrossEntropyFamily : public RowFamily<ArgsT> {
 public:
  /// `prefetch`: the space has the forward's prefetch parameter.
  explicit CrossEntropyFamily(bool prefetch) : prefetch_(prefetch), space_(params(prefetch)) {}

  std::vector<std::string> source_files() const override { return {kTemplate}; }
  const Space& space() const override { return space_; }

  std::vector<Problem> problem_classes() const override {
    // The model's vocabulary over a few rows (every row starts 16-byte
    // aligned); a ragged 1001, where rows start at every alignment and have
    // heads and tails; a 77-logit vocabulary, many rows per block.
    return {Problem{"f32", {{"rows", 3}, {"vocab", 10000}}}, Problem{"bf16", {{"rows", 3}, {"vocab", 10000}}},
            Problem{"f32", {{"rows", 37}, {"vocab", 1001}}}, Problem{"bf16", {{"rows", 45}, {"vocab", 77}}}};
  }

  Config default_config(const Problem& p) const override {
    // The widest vector, then the fewest threads per row that leave each at
    // most kDefaultVectorsPerThread vectors (1024 for longer rows); two
    // vectors per step where the row is long enough; at least 256 threads per
    // block. Not measured on a GPU yet: the tuned cache is where the best goes.
    const DeviceLimits any = DeviceLimits::for_arch("sm_80");
    const std::int64_t vocab = p.dim("vocab"), vec = kMaxAccessBytes / activation_bytes(p);
    std::int64_t row_threads = kMinRowThreads;
    while (row_threads < 1024 && ceil_div(vocab, row_threads * vec) > kDefaultVectorsPerThread) row_threads *= 2;
    for (std::int64_t v = vec; v >= 1; v /= 2)
      for (std::int64_t unroll : {2, 1}) {
        Config c({{"threads", std::max<std::int64_t>(256, row_threads)}, {"row_threads", row_threads},
                  {"vec", v}, {"unroll", unroll}});
        if (prefetch_) c.set("prefetch", 0);
        if (this->is_valid(c, p, any, nullptr)) return c;
      }
    throw_error(ErrorKind::kInternal, this->name() + ": no valid config for " + p.key());
  }

 protected:
  RowShape shape() const override {
    return {"vocab", "logits", kMaxVocab, "2^30", "column indices are 32-bit",
            "bf16 logits; int32 targets; fp32 losses, lse and math"};
  }
  bool is_valid_more(const Config& c, const Problem& p, const DeviceLimits&, std::string* why) const override {
    if (c.at("unroll") > 1 && c.at("row_threads") * c.at("vec") * (c.at("unroll") / 2) >= p.dim("vocab"))
      return reject(why, fmt::format("a row of {} logits ends within the first half of one step: lower unroll",
                                     p.dim("vocab")));
    return true;
  }

  /// The kernel's name expression: THREADS, ROW_THREADS, VEC, UNROLL, (PREFETCH,) T.
  std::string kernel(const char* function, const Config& c, const Problem& p) const {
    return fmt::format("cross_entropy::{}<{}, {}, {}, {}, {}{}>", function, c.at("threads"), c.at("row_threads"),
                       c.at("vec"), c.at("unroll"), prefetch_ ? (c.at("prefetch") ? "true, " : "false, ") : "",
                       activation_type(p));
  }

 private:
  static Space params(bool prefetch) {
    auto params = row_params("threads per row: up to a warp merges with shuffles alone, more shorten each thread's "
                             "stream");
    // unroll stops at 4: a step's logits (at most 32), twice with the forward's prefetch, then fit in
    // registers (ptxas: at most 74 over the spaces; the forward's, prefetch included, 67). The only
    // spills, 8 to 32 bytes, are in 1024-thread blocks, where ptxas keeps kernels at 32 registers for
    // full occupancy (of the forward's, four configs without prefetch on sm_80); the defaults never spill.
    params.push_back({"unroll", {1, 2, 4},
                      "vectors per thread per step: more loads in flight and fewer rescales of the running sum, more "
                      "registers"});
    if (prefetch)
      params.push_back({"prefetch", {0, 1},
                        "1: a step's loads issued before the previous step's exponentials, in flight while they "
                        "are computed, for twice the registers holding a step's logits"});
    return Space(std::move(params));
  }
  bool prefetch_;
  Space space_;
};

// ---- cross_entropy_fwd --------------------------------------------------------------

class Forward final : public CrossEntropyFamily<ForwardArgs> {
 public:
  Forward() : CrossEntropyFamily(true) {}
  std::string name() const override { return "cross_entropy_fwd"; }
  std::string summary() const override {
    return "softmax cross-entropy forward: loss = logsumexp(row) - row[target] per row (one online pass), lse kept";
  }

  Rendered render(const Config& c, const Problem& p) const override {
    return render_template(kTemplate, {kernel("cross_entropy_fwd", c, p)}, name());
  }

  std::vector<BufferShape> buffer_shapes(const Problem& p) const override {
    check_problem(p);
    const std::int64_t rows = p.dim("rows");
    return {buffer_shape("logits", Role::kInput, activation_dtype(p), rows * p.dim("vocab")),
            buffer_shape("targets", Role::kInput, DType::kI32, rows),
            buffer_shape("losses", Role::kOutput, DType::kF32, rows),
            buffer_shape("lse", Role::kOutput, DType::kF32, rows)};
  }

  Workload make_workload(const Problem& p, std::uint64_t seed) const override {
    check_problem(p);
    const ForwardPass f = forward_pass(p, seed);
    Workload w;
    w.buffers.push_back(input_buffer("logits", activation_dtype(p), f.batch.logits));
    w.buffers.push_back(make_buffer("targets", Role::kInput, DType::kI32, f.batch.targets));
    // A loss is lse - logit[target], a difference of two values of about |lse| (the rows' offsets put it up to
    // ~120): what rounds on its way, in fp32, rounds relative to |lse|, not to the loss. A confident row's loss is
    // ~1e-5 (its target leads by 12), so where such rows dominate (a single row) the loss's relative error is
    // |lse| / loss times lse's, and no tolerance on it holds. The losses are checked as lse is: their error as an
    // RMS may be lse's tolerance times lse's RMS, an error lse itself would pass with.
    HostBuffer losses = output_buffer("losses", DType::kF32, f.losses);
    losses.atol = losses.tolerance * std::sqrt(mean_square(f.lse));
    w.buffers.push_back(std::move(losses));
    w.buffers.push_back(output_buffer("lse", DType::kF32, f.lse));
    return w;
  }

  ForwardArgs args_of(const Problem&, const std::vector<std::uint64_t>& a) const override {
    require_addresses(name(), a, {"logits", "targets", "losses", "lse"});
    return {.logits = a[0], .targets = a[1], .losses = a[2], .lse = a[3]};
  }

  std::vector<Launch> plan(const Config& c, const Problem& p, const ForwardArgs& a,
                           const DeviceLimits&) const override {
    check_problem(p);
    std::vector<Launch> launches;
    launches.push_back(row_kernel_launch(name(), c, p, shape(),
                                         {{"logits", a.logits, activation_bytes(p)},
                                          {"targets", a.targets, 4},
                                          {"losses", a.losses, 4},
                                          {"lse", a.lse, 4}},
                                         kElements));
    return launches;
  }

  std::vector<Config> candidates(const Problem& p) const override {
    // A step's loads wait for the previous step's exponentials: at the
    // default (three steps a row at 4096 x 10000) an H200 took 2.1x the
    // floor at 40 % of its copy bandwidth. The next step prefetched, a whole
    // row in fewer steps (unroll 4), and both; a session skips the invalid.
    const Config def = default_config(p);
    return {with(def, {{"prefetch", 1}}), with(def, {{"unroll", 4}}), with(def, {{"unroll", 4}, {"prefetch", 1}})};
  }

  double flops(const Problem& p) const override {  // max, subtract, exp, add per logit
    return 4.0 * static_cast<double>(p.dim("rows")) * static_cast<double>(p.dim("vocab"));
  }
  double bytes(const Problem& p) const override {  // read the logits and targets; write losses and lse
    const double rows = static_cast<double>(p.dim("rows")), vocab = static_cast<double>(p.dim("vocab"));
    return static_cast<double>(activation_bytes(p)) * rows * vocab + 12.0 * rows;
  }
};

// ---- cross_entropy_bwd --------------------------------------------------------------

class Backward final : public CrossEntropyFamily<BackwardArgs> {
 public:
  Backward() : CrossEntropyFamily(false) {}
  std::string name() const override { return "cross_entropy_bwd"; }
  std::string summary() const override {
    return "softmax cross-entropy backward: dlogits = scale * (softmax - onehot(target)) from the forward's lse "
           "(scale 1/rows: the mean loss; may be in place)";
  }

  Rendered render(const Config& c, const Problem& p) const override {
    return render_template(kTemplate, {kernel("cross_entropy_bwd", c, p)}, name());
  }

  std::vector<BufferShape> buffer_shapes(const Problem& p) const override {
    check_problem(p);
    const std::int64_t rows = p.dim("rows"), n = rows * p.dim("vocab");
    return {buffer_shape("logits", Role::kInput, activation_dtype(p), n),
            buffer_shape("targets", Role::kInput, DType::kI32, rows),
            buffer_shape("lse", Role::kInput, DType::kF32, rows),
            buffer_shape("dlogits", Role::kOutput, activation_dtype(p), n)};
  }
  std::vector<std::pair<std::string, std::string>> in_place(const Problem&) const override {
    return {{"dlogits", "logits"}};
  }

  Workload make_workload(const Problem& p, std::uint64_t seed) const override { return make_workload(p, seed, {}); }
  Workload make_workload(const Problem& p, std::uint64_t seed, const Scalars& given) const override {
    check_problem(p);
    const float scale = args_with_scalars(p, given).scale;
    const ForwardPass f = forward_pass(p, seed);
    const auto& b = f.batch;
    // lse as the forward leaves it: fp32.
    const auto lse = stored_as(DType::kF32, std::vector<float>(f.lse.begin(), f.lse.end()));
    std::vector<double> dlogits(b.logits.size());
    cross_entropy_backward<double>(b.logits.data(), b.targets.data(), lse.data(), static_cast<double>(scale),
                                   dlogits.data(), p.dim("rows"), p.dim("vocab"));
    Workload w;
    w.buffers.push_back(input_buffer("logits", activation_dtype(p), b.logits));
    w.buffers.push_back(make_buffer("targets", Role::kInput, DType::kI32, b.targets));
    w.buffers.push_back(input_buffer("lse", DType::kF32, lse));
    w.buffers.push_back(output_buffer("dlogits", activation_dtype(p), dlogits));
    return w;
  }

  /// d total loss / d row loss: 1 / rows for the mean loss (mean_scale), 1 / (rows x K) for K accumulated batches.
  Scalars scalars(const Problem& p) const override { return {{"scale", shortest(mean_scale(p))}}; }
  void set_scalars(BackwardArgs& args, const Problem&, const Scalars& s) const override {
    args.scale = f32_scalar(name(), "scale", s.at("scale"));
  }

  BackwardArgs args_of(const Problem& p, const std::vector<std::uint64_t>& a) const override {
    require_addresses(name(), a, {"logits", "targets", "lse", "dlogits"});
    return {.logits = a[0], .targets = a[1], .lse = a[2], .dlogits = a[3], .scale = mean_scale(p)};
  }

  std::vector<Launch> plan(const Config& c, const Problem& p, const BackwardArgs& a,
                           const DeviceLimits&) const override {
    check_problem(p);
    KTUNE_REQUIRE(std::isfinite(a.scale) && a.scale > 0.0f,
                  fmt::format("{}: scale {} (d loss / d row loss) must be finite and positive", name(), a.scale));
    std::vector<Launch> launches;
    launches.push_back(row_kernel_launch(name(), c, p, shape(),
                                         {{"logits", a.logits, activation_bytes(p)},
                                          {"targets", a.targets, 4},
                                          {"lse", a.lse, 4},
                                          {"dlogits", a.dlogits, activation_bytes(p)}},
                                         kElements));
    launches.back().args.add(a.scale);
    return launches;
  }

  std::vector<Config> candidates(const Problem& p) const override {
    // Not measured on a GPU yet. A row too long for the default's steps (vocab 50257: 1024 threads a row and a
    // block, one block an SM at its registers) at a quarter of the threads, four blocks an SM; a whole row in
    // fewer steps (unroll 4); both. A session skips the invalid.
    const Config def = default_config(p);
    std::vector<Config> out{with(def, {{"unroll", 4}})};
    if (def.at("row_threads") > 256) {
      out.push_back(with(def, {{"row_threads", 256}, {"threads", 256}}));
      out.push_back(with(def, {{"row_threads", 256}, {"threads", 256}, {"unroll", 4}}));
    }
    return out;
  }

  double flops(const Problem& p) const override {  // subtract, exp, multiply per logit
    return 3.0 * static_cast<double>(p.dim("rows")) * static_cast<double>(p.dim("vocab"));
  }
  double bytes(const Problem& p) const override {  // read the logits, write dlogits; targets and lse
    const double rows = static_cast<double>(p.dim("rows")), vocab = static_cast<double>(p.dim("vocab"));
    return 2.0 * static_cast<double>(activation_bytes(p)) * rows * vocab + 8.0 * rows;
  }
};

}  // namespace

float mean_scale(const Problem& p) { return 1.0f / static_cast<float>(p.dim("rows")); }

const ForwardFamily& forward_family() {
  static const Forward f;
  return f;
}
const BackwardFamily& backward_family() {
  static const Backward f;
  return f;
}

}  // namespace ktune::templates::cross_entropy
