// The row softmax families, forward and backward: spaces, constraints,
// rendering, launch plans, workloads with their CPU reference, FLOP/byte counts.
#include <fmt/format.h>

#include <algorithm>
#include <random>

#include "base/error.hpp"
#include "templates/common/family_helpers.hpp"
#include "templates/common/row_family.hpp"
#include "templates/render.hpp"
#include "templates/softmax/softmax.hpp"

namespace ktune::templates::softmax {
namespace {

constexpr const char* kTemplate = "softmax/softmax.cuh";
constexpr std::int64_t kDefaultElementsPerThread = 16;  // defaults stay well clear of spilling
constexpr std::int64_t kBaseRegisters = 24;             // registers besides the row share (indices, addresses)
constexpr const char* kVectorAccesses = "the config's vector accesses";

bool is_causal(const Problem& p) { return p.dim("causal") == 1; }

/// Elements the kernels read: every column, or with the causal mask the
/// lower triangle of each (cols, cols) block.
double visible_elements(const Problem& p) {
  const double rows = static_cast<double>(p.dim("rows")), cols = static_cast<double>(p.dim("cols"));
  return is_causal(p) ? rows / cols * cols * (cols + 1) / 2 : rows * cols;
}

/// Attention scores: uniform in [-20, 20), so that scale * x spans about +-2.2
/// and rows are neither flat nor one-hot. In f32, every fourth row is shifted
/// by +-800 (scale * x about +-89), whose exponentials overflow or vanish
/// unless the row's max is taken off first (the kernels are one template over
/// the dtype). Not in bf16, whose 0.5 apart near 89 would leave such a row's
/// scaled scores (eager's, scaled in bf16 as PyTorch's) no spread to check.
std::vector<double> scores(const Problem& p, std::mt19937_64& rng) {
  const std::int64_t rows = p.dim("rows"), cols = p.dim("cols");
  auto x = random_floats(rng, static_cast<std::size_t>(rows * cols), -20.f, 20.f);
  if (activation_dtype(p) == DType::kF32)
    for (std::int64_t r = 3; r < rows; r += 4) {
      const float shift = r % 8 == 3 ? 800.f : -800.f;
      for (std::int64_t c = 0; c < cols; ++c) x[static_cast<std::size_t>(r * cols + c)] += shift;
    }
  return stored_as(activation_dtype(p), x);
}

/// What both families share: problems, the register bound on a row, the default.
template <class ArgsT>
class SoftmaxFamily : public RowFamily<ArgsT> {
 public:
  /// The scale applied to x before the softmax (the forward's, in the backward).
  Scalars scalars(const Problem&) const override { return {{"scale", shortest(kWorkloadScale)}}; }
  void set_scalars(ArgsT& args, const Problem&, const Scalars& s) const override {
    args.scale = f32_scalar(this->name(), "scale", s.at("scale"));
  }
  SoftmaxFamily()
      : space_(row_params("threads per row: up to a warp reduces with shuffles alone, more cut the registers each "
                          "thread holds")) {}

  std::vector<std::string> source_files() const override { return {kTemplate}; }
  const Space& space() const override { return space_; }

  std::vector<Problem> problem_classes() const override {
    // Ragged rows and columns: 1000 and 77 columns end inside a thread's last
    // vector, 37 and 45 rows leave the last block short; causal blocks of 37
    // (odd: vec 1 only) and 100 keys over 3 heads.
    return {Problem{"f32", {{"rows", 37}, {"cols", 1000}, {"causal", 0}}},
            Problem{"bf16", {{"rows", 45}, {"cols", 77}, {"causal", 0}}},
            Problem{"f32", {{"rows", 111}, {"cols", 37}, {"causal", 1}}},
            Problem{"bf16", {{"rows", 300}, {"cols", 100}, {"causal", 1}}}};
  }

  void check_problem(const Problem& p) const override {
    check_row_problem(this->name(), p, shape(), {"causal"});
    KTUNE_REQUIRE(p.dims.count("causal") && (p.dim("causal") == 0 || p.dim("causal") == 1),
                  this->name() + ": dimension 'causal' must be given, 0 (every column) or 1 (row r sees columns "
                                 "j <= r % cols)");
    KTUNE_REQUIRE(!is_causal(p) || p.dim("rows") % p.dim("cols") == 0,
                  fmt::format("{}: a causal problem stacks (seq, seq) score blocks, so rows ({}) must be a multiple "
                              "of cols ({})",
                              this->name(), p.dim("rows"), p.dim("cols")));
  }

  Config default_config(const Problem& p) const override {
    return this->held_default(p, kDefaultElementsPerThread, kMaxElementsPerThread);
  }

 protected:
  RowShape shape() const override {
    return {"cols",  "scores", kMaxCols, std::to_string(kMaxCols),
            fmt::format("a row is held in registers, at most {} elements a thread; the longest attention context "
                        "benchmarked",
                        kMaxElementsPerThread),
            "bf16 scores and probabilities; fp32 math"};
  }
  bool is_valid_more(const Config& c, const Problem& p, const DeviceLimits& d, std::string* why) const override {
    if (!held_row_valid(c, p, shape(), kMaxElementsPerThread, why)) return false;
    const std::int64_t held = c.at("vec") * items(c, p);
    // Each thread keeps its share of the row as fp32 (the backward: y and dy)
    // beside ~24 registers of indices and addresses, and about one more per
    // vector of each array (its column and mask): fitted to ptxas, where f32
    // rows of 1000 at vec 1 with 32 threads a row spill in 1024-thread blocks
    // forward and 512-thread blocks backward.
    const std::int64_t registers = kBaseRegisters + arrays() * (held + items(c, p));
    const std::int64_t budget = std::min<std::int64_t>(d.max_regs_per_thread, d.regs_per_sm / c.at("threads"));
    if (registers > budget)
      return reject(why, fmt::format("each thread would need about {} registers for its share of the row, over the "
                                     "{} a block of {} threads allows: it would spill",
                                     registers, budget, c.at("threads")));
    return true;
  }
  /// fp32 arrays of its row share each thread holds.
  virtual std::int64_t arrays() const = 0;
  /// Vectors of its row each thread holds: the template's ITEMS.
  std::int64_t items(const Config& c, const Problem& p) const { return held_items(c, p, "cols"); }

  /// The kernel's name expression: THREADS, ROW_THREADS, VEC, ITEMS, CAUSAL, T.
  std::string kernel(const char* function, const Config& c, const Problem& p) const {
    return fmt::format("softmax::{}<{}, {}, {}, {}, {}, {}>", function, c.at("threads"), c.at("row_threads"),
                       c.at("vec"), items(c, p), is_causal(p) ? "true" : "false", activation_type(p));
  }
  /// The launch over the rows: the kernel's buffers (each accessed in the
  /// config's vectors, so aligned to one), rows, cols and the scale.
  Launch launch(const Config& c, const Problem& p, std::initializer_list<std::pair<const char*, std::uint64_t>> buffers,
                float scale) const {
    this->check_problem(p);
    std::vector<RowBuffer> checked;
    for (const auto& [name, address] : buffers) checked.push_back({name, address, c.at("vec") * activation_bytes(p)});
    Launch l = row_kernel_launch(this->name(), c, p, shape(), checked, kVectorAccesses);
    l.args.add(scale);
    return l;
  }

 private:
  Space space_;
};

// ---- softmax_fwd ------------------------------------------------------------------

class Forward final : public SoftmaxFamily<ForwardArgs> {
 public:
  std::string name() const override { return "softmax_fwd"; }
  std::string summary() const override {
    return "row softmax forward: y = softmax(scale * x), optional causal mask (eager attention)";
  }

  Rendered render(const Config& c, const Problem& p) const override {
    return render_template(kTemplate, {kernel("softmax_fwd", c, p)}, name());
  }

  std::vector<BufferShape> buffer_shapes(const Problem& p) const override {
    check_problem(p);
    const DType t = activation_dtype(p);
    const std::int64_t n = p.dim("rows") * p.dim("cols");
    return {buffer_shape("x", Role::kInput, t, n), buffer_shape("y", Role::kOutput, t, n)};
  }
  std::vector<std::pair<std::string, std::string>> in_place(const Problem&) const override { return {{"y", "x"}}; }

  Workload make_workload(const Problem& p, std::uint64_t seed) const override { return make_workload(p, seed, {}); }
  Workload make_workload(const Problem& p, std::uint64_t seed, const Scalars& given) const override {
    check_problem(p);
    const float scale = args_with_scalars(p, given).scale;
    std::mt19937_64 rng(seed);
    const auto x = scores(p, rng);
    std::vector<double> y(x.size());
    softmax_forward<double>(x.data(), y.data(), p.dim("rows"), p.dim("cols"), scale, is_causal(p));
    Workload w;
    w.buffers.push_back(input_buffer("x", activation_dtype(p), x));
    w.buffers.push_back(output_buffer("y", activation_dtype(p), y));
    return w;
  }

  ForwardArgs args_of(const Problem&, const std::vector<std::uint64_t>& a) const override {
    require_addresses(name(), a, {"x", "y"});
    return {.x = a[0], .y = a[1], .scale = kWorkloadScale};
  }

  std::vector<Launch> plan(const Config& c, const Problem& p, const ForwardArgs& a,
                           const DeviceLimits&) const override {
    std::vector<Launch> launches;
    launches.push_back(launch(c, p, {{"x", a.x}, {"y", a.y}}, a.scale));
    return launches;
  }

  // scale, max, subtract, exp, sum, normalise per element seen (exp counted as one).
  double flops(const Problem& p) const override { return 6.0 * visible_elements(p); }
  double bytes(const Problem& p) const override {  // read what is seen, write every element
    const double all = static_cast<double>(p.dim("rows")) * static_cast<double>(p.dim("cols"));
    return static_cast<double>(activation_bytes(p)) * (visible_elements(p) + all);
  }

 protected:
  std::int64_t arrays() const override { return 1; }
};

// ---- softmax_bwd ------------------------------------------------------------------

class Backward final : public SoftmaxFamily<BackwardArgs> {
 public:
  std::string name() const override { return "softmax_bwd"; }
  std::string summary() const override {
    return "row softmax backward: dx = scale * y * (dy - sum(dy * y)), optional causal mask; dx may be dy";
  }

  Rendered render(const Config& c, const Problem& p) const override {
    return render_template(kTemplate, {kernel("softmax_bwd", c, p)}, name());
  }

  std::vector<BufferShape> buffer_shapes(const Problem& p) const override {
    check_problem(p);
    const DType t = activation_dtype(p);
    const std::int64_t n = p.dim("rows") * p.dim("cols");
    return {buffer_shape("y", Role::kInput, t, n), buffer_shape("dy", Role::kInput, t, n),
            buffer_shape("dx", Role::kOutput, t, n)};
  }
  std::vector<std::pair<std::string, std::string>> in_place(const Problem&) const override { return {{"dx", "dy"}}; }

  Workload make_workload(const Problem& p, std::uint64_t seed) const override { return make_workload(p, seed, {}); }
  Workload make_workload(const Problem& p, std::uint64_t seed, const Scalars& given) const override {
    check_problem(p);
    const float scale = args_with_scalars(p, given).scale;
    const std::int64_t rows = p.dim("rows"), cols = p.dim("cols");
    const DType dtype = activation_dtype(p);
    std::mt19937_64 rng(seed);
    const auto x = scores(p, rng);
    std::vector<double> exact(x.size());
    softmax_forward<double>(x.data(), exact.data(), rows, cols, scale, is_causal(p));
    const auto y = stored_as(dtype, std::vector<float>(exact.begin(), exact.end()));  // as the forward leaves it
    const auto dy = stored_as(dtype, random_floats(rng, x.size(), -1.f, 1.f));
    std::vector<double> dx(x.size());
    softmax_backward<double>(y.data(), dy.data(), dx.data(), rows, cols, scale, is_causal(p));
    Workload w;
    w.buffers.push_back(input_buffer("y", dtype, y));
    w.buffers.push_back(input_buffer("dy", dtype, dy));
    w.buffers.push_back(output_buffer("dx", dtype, dx));
    return w;
  }

  BackwardArgs args_of(const Problem&, const std::vector<std::uint64_t>& a) const override {
    require_addresses(name(), a, {"y", "dy", "dx"});
    return {.y = a[0], .dy = a[1], .dx = a[2], .scale = kWorkloadScale};
  }

  std::vector<Launch> plan(const Config& c, const Problem& p, const BackwardArgs& a,
                           const DeviceLimits&) const override {
    std::vector<Launch> launches;
    launches.push_back(launch(c, p, {{"y", a.y}, {"dy", a.dy}, {"dx", a.dx}}, a.scale));
    return launches;
  }

  // dot (2), subtract, two products per element seen.
  double flops(const Problem& p) const override { return 5.0 * visible_elements(p); }
  double bytes(const Problem& p) const override {  // read y and dy where seen, write every dx
    const double all = static_cast<double>(p.dim("rows")) * static_cast<double>(p.dim("cols"));
    return static_cast<double>(activation_bytes(p)) * (2.0 * visible_elements(p) + all);
  }

 protected:
  std::int64_t arrays() const override { return 2; }
};

}  // namespace

const ForwardFamily& forward_family() {
  static const Forward f;
  return f;
}
const BackwardFamily& backward_family() {
  static const Backward f;
  return f;
}

}  // namespace ktune::templates::softmax
