// The RoPE families, forward and backward: space, constraints, rendering,
// launch plans, workloads with their CPU reference, FLOP/byte counts.
#include <fmt/format.h>

#include <algorithm>
#include <random>

#include "base/error.hpp"
#include "templates/common/family_helpers.hpp"
#include "templates/render.hpp"
#include "templates/rope/rope.hpp"

namespace ktune::templates::rope {
namespace {

constexpr const char* kTemplate = "rope/rope.cuh";
constexpr std::int64_t kMaxAccessBytes = 16;       // the widest single load or store
constexpr std::int64_t kMaxIndex = (1LL << 31) - 1;  // the kernels' 32-bit item and table indices
constexpr std::int64_t kDefaultHeadsPerThread = 4;
// Registers a thread needs beside the activations and table values it holds
// (indices, addresses, the divisions of an item's index): from ptxas reports
// of the whole space (sm_80), where a kernel uses at most about this many plus
// one per held value.
constexpr std::int64_t kRegistersBesideValues = 32;

/// Threads that share one head: the template's LANES.
std::int64_t lanes(const Config& c, const Problem& p) { return p.dim("head_dim") / c.at("vec"); }
/// Work items (a token and a group of heads_per_thread heads) of a problem.
std::int64_t items(const Config& c, const Problem& p) {
  return p.dim("tokens") * ceil_div(p.dim("heads"), c.at("heads_per_thread"));
}

/// What both families share: problems, space, constraints, default, plan.
template <class ArgsT>
class RopeBase : public TypedFamily<ArgsT> {
 public:
  RopeBase()
      : space_({{"threads", {64, 128, 256, 512, 1024}, "threads per block: more hides latency, fewer frees registers"},
                {"vec", {2, 4, 8},
                 "elements per access (whole pairs, 16 bytes at most): wider accesses, fewer threads per head"},
                {"heads_per_thread", {1, 2, 4, 8, 16},
                 "heads rotated per load of the token's cos/sin: more reuse the tables and keep more loads in "
                 "flight per thread, fewer give more work items to spread over the GPU"},
                {"blocks_per_sm", {0, 1, 2, 4, 8, 16},
                 "grid cap per SM (0: no cap, one slot per work item): a persistent grid-stride loop saves block "
                 "launches, a full grid keeps more blocks in flight"}}) {}

  std::vector<std::string> source_files() const override { return {kTemplate}; }
  const Space& space() const override { return space_; }

  std::vector<Problem> problem_classes() const override {
    // Head dims of the model (64, 80) and of the attention benchmarks (16,
    // 32, 128), both dtypes; token counts that end inside a sequence; head
    // counts that leave the last head group short for most configs, and
    // enough heads (12, the small model's; 17) for 8 and 16 per thread.
    auto problem = [](const char* dtype, std::int64_t head_dim, std::int64_t heads, std::int64_t seq,
                      std::int64_t tokens) {
      return Problem{dtype, {{"head_dim", head_dim}, {"heads", heads}, {"seq", seq}, {"tokens", tokens}}};
    };
    return {problem("f32", 64, 3, 32, 77),  problem("bf16", 64, 12, 16, 24), problem("f32", 80, 5, 16, 37),
            problem("bf16", 80, 5, 16, 37), problem("f32", 16, 17, 8, 20),   problem("bf16", 32, 3, 8, 20),
            problem("bf16", 128, 2, 16, 40)};
  }

  void check_problem(const Problem& p) const override {
    KTUNE_REQUIRE(p.dtype == "f32" || p.dtype == "bf16",
                  this->name() + ": dtype '" + p.dtype +
                      "' is not supported; accepted: f32, bf16 (bf16 activations; fp32 tables and math)");
    for (const auto& [k, v] : p.dims)
      KTUNE_REQUIRE(k == "tokens" || k == "heads" || k == "head_dim" || k == "seq",
                    this->name() + ": unknown dimension '" + k + "'; accepted: tokens, heads, head_dim, seq");
    for (const char* d : {"tokens", "heads", "head_dim", "seq"})
      KTUNE_REQUIRE(p.dims.count(d) && p.dim(d) >= 1,
                    fmt::format("{}: dimension '{}' must be given, at least 1 (dims: tokens, heads, head_dim, seq)",
                                this->name(), d));
    const std::int64_t head_dim = p.dim("head_dim");
    KTUNE_REQUIRE(head_dim % 2 == 0 && head_dim <= kMaxHeadDim,
                  fmt::format("{}: head_dim {} is not supported; accepted: even values in 2..{} (RoPE rotates pairs)",
                              this->name(), head_dim, kMaxHeadDim));
    KTUNE_REQUIRE(p.dim("tokens") <= kMaxIndex / p.dim("heads"),
                  fmt::format("{}: tokens * heads must be at most 2^31-1, got {} * {}", this->name(), p.dim("tokens"),
                              p.dim("heads")));
    KTUNE_REQUIRE(p.dim("seq") <= kMaxIndex / (head_dim / 2),
                  fmt::format("{}: seq * head_dim / 2 (the table size) must be at most 2^31-1, got {} * {}",
                              this->name(), p.dim("seq"), head_dim / 2));
  }

  Config default_config(const Problem& p) const override {
    // The widest access that divides the head, a few heads per table load,
    // one slot per work item; 256 threads unless a head's lanes fit it badly.
    // Not measured on a GPU yet: the tuned cache is where the best one goes.
    std::int64_t heads_per_thread = 1;
    while (heads_per_thread * 2 <= std::min(kDefaultHeadsPerThread, p.dim("heads"))) heads_per_thread *= 2;
    const DeviceLimits any = DeviceLimits::for_arch("sm_80");
    for (std::int64_t vec : {8, 4, 2}) {
      if (vec * activation_bytes(p) > kMaxAccessBytes) continue;
      for (std::int64_t threads : {256, 512, 128, 1024, 64}) {
        const Config c(
            {{"threads", threads}, {"vec", vec}, {"heads_per_thread", heads_per_thread}, {"blocks_per_sm", 0}});
        if (is_valid(c, p, any, nullptr)) return c;
      }
    }
    throw_error(ErrorKind::kInternal, this->name() + ": no valid config for " + p.key());
  }

  bool is_valid(const Config& c, const Problem& p, const DeviceLimits& d, std::string* why) const override {
    const std::int64_t threads = c.at("threads"), vec = c.at("vec"), head_dim = p.dim("head_dim");
    if (threads > d.max_threads_per_block) return reject(why, "threads exceed the device's block limit");
    if (vec * activation_bytes(p) > kMaxAccessBytes)
      return reject(why, fmt::format("vec x element size exceeds 16 bytes, the widest single access: vec <= {} for {}",
                                     kMaxAccessBytes / activation_bytes(p), p.dtype));
    if (head_dim % vec != 0)
      return reject(why, fmt::format("head_dim {} is not a multiple of vec {}: a vector would straddle two heads",
                                     head_dim, vec));
    const std::int64_t head_lanes = lanes(c, p);
    if (head_lanes > threads)
      return reject(why, fmt::format("a head's {} threads (head_dim / vec) do not fit in a block of {}", head_lanes,
                                     threads));
    if (threads % head_lanes * 4 > threads)
      return reject(why, fmt::format("{} of the block's {} threads would idle: threads is far from a multiple of "
                                     "the {} threads of a head (head_dim / vec)",
                                     threads % head_lanes, threads, head_lanes));
    if (c.at("heads_per_thread") > 1 && c.at("heads_per_thread") / 2 >= p.dim("heads"))
      return reject(why, fmt::format("heads_per_thread {} is at least twice the problem's {} heads: a smaller value "
                                     "runs the same work with fewer registers",
                                     c.at("heads_per_thread"), p.dim("heads")));
    // Each thread holds its vec activations of heads_per_thread heads and its
    // vec cos/sin values at once: about a register each, bf16 included
    // (ptxas converts the bf16 to fp32 as the loads arrive).
    const std::int64_t held = c.at("heads_per_thread") * vec + vec;
    const std::int64_t budget = std::min<std::int64_t>(d.max_regs_per_thread, d.regs_per_sm / threads);
    if (held + kRegistersBesideValues > budget)
      return reject(why, fmt::format("each thread would hold {} values in registers, beside about {} others, over the "
                                     "{} a block of {} threads allows: it would spill",
                                     held, kRegistersBesideValues, budget, threads));
    if (c.at("blocks_per_sm") * threads > 4 * d.max_threads_per_sm)
      return reject(why,
                    "grid larger than four waves of resident threads only adds scheduling; 0 gives one slot per item");
    return true;
  }

  Rendered render(const Config& c, const Problem& p) const override {
    return render_template(kTemplate,
                           {fmt::format("rope::{}<{}, {}, {}, {}, {}>", kernel(), c.at("threads"), c.at("vec"),
                                        c.at("heads_per_thread"), p.dim("head_dim"), activation_type(p))},
                           this->name());
  }

  std::vector<BufferShape> buffer_shapes(const Problem& p) const override {
    check_problem(p);
    const std::int64_t n = p.dim("tokens") * p.dim("heads") * p.dim("head_dim");
    const std::int64_t table = p.dim("seq") * p.dim("head_dim") / 2;
    const auto names = buffer_name_list();
    return {buffer_shape(names[0], Role::kInput, activation_dtype(p), n),
            buffer_shape(names[1], Role::kInput, DType::kF32, table),
            buffer_shape(names[2], Role::kInput, DType::kF32, table),
            buffer_shape(names[3], Role::kOutput, activation_dtype(p), n)};
  }
  std::vector<std::pair<std::string, std::string>> in_place(const Problem&) const override {
    const auto names = buffer_name_list();
    return {{names[3], names[0]}};
  }

  Workload make_workload(const Problem& p, std::uint64_t seed) const override {
    check_problem(p);
    const std::int64_t tokens = p.dim("tokens"), heads = p.dim("heads"), head_dim = p.dim("head_dim");
    const std::int64_t seq = p.dim("seq");
    const auto n = static_cast<std::size_t>(tokens * heads * head_dim);
    const auto table = static_cast<std::size_t>(seq * head_dim / 2);
    const DType dtype = activation_dtype(p);
    std::mt19937_64 rng(seed);
    const auto x = stored_as(dtype, random_floats(rng, n, -2.f, 2.f));  // as the kernel reads them
    std::vector<float> cos32(table), sin32(table);
    rope_tables<float>(seq, head_dim, kTheta, cos32.data(), sin32.data());
    // The reference in fp64 on exactly what the kernel reads: fp32 tables.
    const std::vector<double> cos64(cos32.begin(), cos32.end()), sin64(sin32.begin(), sin32.end());
    std::vector<double> y(n);
    reference(x.data(), y.data(), cos64.data(), sin64.data(), seq, heads, head_dim, tokens);
    const auto names = buffer_name_list();
    Workload w;
    w.buffers.push_back(input_buffer(names[0], dtype, x));
    w.buffers.push_back(make_buffer(names[1], Role::kInput, DType::kF32, cos32));
    w.buffers.push_back(make_buffer(names[2], Role::kInput, DType::kF32, sin32));
    w.buffers.push_back(output_buffer(names[3], dtype, y));
    return w;
  }

  // Per pair: four products and two sums.
  double flops(const Problem& p) const override {
    return 3.0 * static_cast<double>(p.dim("tokens") * p.dim("heads") * p.dim("head_dim"));
  }
  // Activations read and written once; the cos/sin rows of the positions used, once.
  double bytes(const Problem& p) const override {
    const double activations = static_cast<double>(p.dim("tokens") * p.dim("heads") * p.dim("head_dim"));
    const double positions = static_cast<double>(std::min(p.dim("tokens"), p.dim("seq")));
    const double head_dim = static_cast<double>(p.dim("head_dim"));
    return 2.0 * static_cast<double>(activation_bytes(p)) * activations + 4.0 * positions * head_dim;
  }

 protected:
  /// The launch rotating `in` into `out` with the tables `cos` and `sin`,
  /// tokens' rows `row_stride` elements apart (0: contiguous).
  std::vector<Launch> rotation_plan(const Config& c, const Problem& p, std::uint64_t in, std::uint64_t cos,
                                    std::uint64_t sin, std::uint64_t out, std::int64_t row_stride,
                                    const DeviceLimits& device) const {
    this->check_problem(p);
    const std::int64_t row = p.dim("heads") * p.dim("head_dim");
    if (row_stride == 0) row_stride = row;
    KTUNE_REQUIRE(row_stride >= row,
                  fmt::format("{}: row_stride {} is shorter than a token's heads x head_dim = {}: rows would overlap",
                              this->name(), row_stride, row));
    const std::int64_t slots = c.at("threads") / lanes(c, p);
    KTUNE_REQUIRE(slots >= 1, this->name() + ": invalid config " + c.str() + " for " + p.key());
    Launch l;
    l.kernel = 0;
    l.grid = {grid_stride_blocks(ceil_div(items(c, p), slots), c.at("blocks_per_sm"), device), 1, 1};
    l.block = {static_cast<unsigned>(c.at("threads")), 1, 1};
    l.args.add(in).add(cos).add(sin).add(out);
    l.args.add(static_cast<int>(p.dim("tokens"))).add(static_cast<int>(p.dim("heads"))).add(
        static_cast<int>(p.dim("seq")));
    l.args.add(static_cast<long long>(row_stride));
    return {std::move(l)};
  }
  /// The kernel's name in the template.
  virtual const char* kernel() const = 0;
  /// The four buffers, in plan() address order.
  virtual std::vector<std::string> buffer_name_list() const = 0;
  /// The CPU reference over tokens [0, tokens).
  virtual void reference(const double* in, double* out, const double* cos_table, const double* sin_table,
                         std::int64_t seq, std::int64_t heads, std::int64_t head_dim, std::int64_t tokens) const = 0;

 private:
  Space space_;
};

// ---- rope_fwd ------------------------------------------------------------------

class Forward final : public RopeBase<ForwardArgs> {
 public:
  std::string name() const override { return "rope_fwd"; }
  std::string summary() const override {
    return "RoPE forward: rotates interleaved pairs of q or k (tokens, heads, head_dim) by position angles";
  }

  ForwardArgs args_of(const Problem&, const std::vector<std::uint64_t>& a) const override {
    require_addresses(name(), a, buffer_name_list());
    return {.x = a[0], .cos = a[1], .sin = a[2], .y = a[3]};
  }
  std::vector<Launch> plan(const Config& c, const Problem& p, const ForwardArgs& a,
                           const DeviceLimits& device) const override {
    return rotation_plan(c, p, a.x, a.cos, a.sin, a.y, a.row_stride, device);
  }

 protected:
  const char* kernel() const override { return "rope_forward"; }
  std::vector<std::string> buffer_name_list() const override { return {"x", "cos", "sin", "y"}; }
  void reference(const double* in, double* out, const double* cos_table, const double* sin_table, std::int64_t seq,
                 std::int64_t heads, std::int64_t head_dim, std::int64_t tokens) const override {
    rope_forward<double>(in, out, cos_table, sin_table, seq, heads, head_dim, 0, tokens);
  }
};

// ---- rope_bwd ------------------------------------------------------------------

class Backward final : public RopeBase<BackwardArgs> {
 public:
  std::string name() const override { return "rope_bwd"; }
  std::string summary() const override {
    return "RoPE backward: dx = dy rotated by the opposite angles (tokens, heads, head_dim)";
  }

  BackwardArgs args_of(const Problem&, const std::vector<std::uint64_t>& a) const override {
    require_addresses(name(), a, buffer_name_list());
    return {.dy = a[0], .cos = a[1], .sin = a[2], .dx = a[3]};
  }
  std::vector<Launch> plan(const Config& c, const Problem& p, const BackwardArgs& a,
                           const DeviceLimits& device) const override {
    return rotation_plan(c, p, a.dy, a.cos, a.sin, a.dx, a.row_stride, device);
  }

 protected:
  const char* kernel() const override { return "rope_backward"; }
  std::vector<std::string> buffer_name_list() const override { return {"dy", "cos", "sin", "dx"}; }
  void reference(const double* in, double* out, const double* cos_table, const double* sin_table, std::int64_t seq,
                 std::int64_t heads, std::int64_t head_dim, std::int64_t tokens) const override {
    rope_backward<double>(in, out, cos_table, sin_table, seq, heads, head_dim, 0, tokens);
  }
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

}  // namespace ktune::templates::rope
