// The RMSNorm families, plain and after a residual add: spaces, constraints, rendering, launch plans,
// workloads with their CPU reference, FLOP/byte counts.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <type_traits>

#include "base/error.hpp"
#include "templates/common/family_helpers.hpp"
#include "templates/common/row_family.hpp"
#include "templates/render.hpp"
#include "templates/residual/reference.hpp"
#include "templates/rmsnorm/rmsnorm.hpp"

namespace ktune::templates::rmsnorm {
namespace {

constexpr const char* kTemplate = "rmsnorm/rmsnorm.cuh";
constexpr std::int64_t kMinBlocks = 64;     // the smallest `blocks` of rmsnorm_bwd
constexpr std::int64_t kDefaultElementsPerThread = 16;  // defaults stay well clear of spilling
constexpr unsigned kReduceColumns = 32;     // columns per block of rmsnorm_dw_reduce (one per lane)
// Threads of rmsnorm_dw_reduce: 32 warps share a block's 32 columns, so each
// warp's share of the partials (a chain of loads and adds) is short.
constexpr unsigned kReduceThreads = 1024;
constexpr std::int64_t kBaseRegisters = 24;  // rmsnorm_bwd's registers besides the row share
constexpr std::int64_t kPrefetchBaseRegisters = 32;  // the same with prefetch (the next group's addresses)
constexpr const char* kVectorAccesses = "the config's vector accesses";

/// Vectors of its row each thread holds: the template's ITEMS.
std::int64_t items(const Config& c, const Problem& p) { return held_items(c, p, "dim"); }

/// `rows` rows of `dim` activations: uniform in [-2, 2) times a per-row scale
/// drawn log-uniformly from [1e-3, 1], so that eps shows in the small rows
/// (mean(x^2) down to ~1e-6, against eps 1e-5).
std::vector<float> activation_rows(std::mt19937_64& rng, std::int64_t rows, std::int64_t dim) {
  auto values = random_floats(rng, static_cast<std::size_t>(rows * dim), -2.f, 2.f);
  const auto log_scales = random_floats(rng, static_cast<std::size_t>(rows), -3.f, 0.f);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float scale = std::pow(10.f, log_scales[static_cast<std::size_t>(r)]);
    for (std::int64_t c = 0; c < dim; ++c) values[static_cast<std::size_t>(r * dim + c)] *= scale;
  }
  return values;
}

/// A forward pass on fresh inputs: x and w as the kernel reads them, y and
/// rstd from the fp64 reference.
struct ForwardPass {
  std::vector<double> x, w, y, rstd;
};
/// Weights, y and rstd of a pass whose f.x is set.
ForwardPass finish_forward(const Problem& p, std::mt19937_64& rng, ForwardPass f) {
  const std::int64_t rows = p.dim("rows"), dim = p.dim("dim");
  f.w = stored_as(DType::kF32, random_floats(rng, static_cast<std::size_t>(dim), 0.5f, 1.5f));
  f.y.resize(f.x.size());
  f.rstd.resize(static_cast<std::size_t>(rows));
  rmsnorm_forward<double>(f.x.data(), f.w.data(), f.y.data(), f.rstd.data(), rows, dim, static_cast<double>(kEps));
  return f;
}
ForwardPass forward_pass(const Problem& p, std::mt19937_64& rng) {
  const std::int64_t rows = p.dim("rows"), dim = p.dim("dim");
  ForwardPass f;
  f.x = stored_as(activation_dtype(p), activation_rows(rng, rows, dim));
  return finish_forward(p, rng, std::move(f));
}
/// With the residual add: x and r as the kernel reads them, h = x + r (as
/// stored), then the forward pass of h; f.x holds h.
struct ResidualPass {
  std::vector<double> x, r, h;
  ForwardPass norm;
};
ResidualPass residual_pass(const Problem& p, std::mt19937_64& rng) {
  const std::int64_t rows = p.dim("rows"), dim = p.dim("dim");
  ResidualPass f;
  f.x = stored_as(activation_dtype(p), activation_rows(rng, rows, dim));
  f.r = stored_as(activation_dtype(p), activation_rows(rng, rows, dim));
  f.h = f.x;
  residual::residual_add<double>(f.h.data(), f.r.data(), rows * dim);
  f.norm.x = stored_as(activation_dtype(p), std::vector<float>(f.h.begin(), f.h.end()));
  f.norm = finish_forward(p, rng, std::move(f.norm));
  return f;
}

/// What both families share beyond the row layout: problems, the register
/// bound on a row, the default.
template <class ArgsT>
class NormFamily : public RowFamily<ArgsT> {
 public:
  std::vector<std::string> source_files() const override { return {kTemplate}; }

  std::vector<Problem> problem_classes() const override {
    // d_model of the small, xl and 2.7B models and of the tiny test model;
    // row counts leave the last block ragged for most layouts.
    return {Problem{"f32", {{"rows", 67}, {"dim", 768}}}, Problem{"bf16", {{"rows", 67}, {"dim", 1600}}},
            Problem{"f32", {{"rows", 19}, {"dim", 2560}}}, Problem{"bf16", {{"rows", 45}, {"dim", 64}}}};
  }

  Config default_config(const Problem& p) const override {
    return this->held_default(p, kDefaultElementsPerThread, kMaxElementsPerThread);
  }

 protected:
  static std::vector<Param> norm_params() {
    return row_params("threads per row: up to a warp reduces with shuffles alone, more cut the registers each thread "
                      "holds");
  }
  /// The longest row a family holds in registers.
  virtual std::int64_t max_dim() const { return kMaxDim; }
  RowShape shape() const override {
    return {"dim",
            "elements",
            max_dim(),
            std::to_string(max_dim()),
            fmt::format("a row is held in the registers of at most 1024 threads, {} elements each", max_dim() / 1024),
            "bf16 activations; fp32 weight, rstd and math"};
  }
  bool is_valid_more(const Config& c, const Problem& p, const DeviceLimits&, std::string* why) const override {
    return held_row_valid(c, p, shape(), kMaxElementsPerThread, why);
  }

  /// The kernel's template arguments: THREADS, ROW_THREADS, VEC, ITEMS,
  /// then `more` (the backward's PREFETCH) if any, then T.
  static std::string template_args(const Config& c, const Problem& p, const std::string& more = "") {
    return fmt::format("{}, {}, {}, {}, {}{}", c.at("threads"), c.at("row_threads"), c.at("vec"), items(c, p),
                       more.empty() ? "" : more + ", ", activation_type(p));
  }
};

// ---- rmsnorm_fwd ------------------------------------------------------------------

/// rmsnorm_fwd, or with kResidual residual_rmsnorm_fwd.
template <bool kResidual>
class Forward final : public NormFamily<std::conditional_t<kResidual, ResidualForwardArgs, ForwardArgs>> {
 public:
  using Args = std::conditional_t<kResidual, ResidualForwardArgs, ForwardArgs>;
  Forward() : space_(NormFamily<Args>::norm_params()) {}

  std::string name() const override { return kResidual ? "residual_rmsnorm_fwd" : "rmsnorm_fwd"; }
  std::string summary() const override {
    return kResidual ? "residual add and RMSNorm in one pass: h = x + r (kept), y = h * rstd * w per row, rstd kept"
                     : "RMSNorm forward: y = x * rstd * w per row, rstd kept";
  }
  const Space& space() const override { return space_; }

  Rendered render(const Config& c, const Problem& p) const override {
    return render_template(kTemplate, {"rmsnorm::" + name() + "<" + this->template_args(c, p) + ">"}, name());
  }

  std::vector<BufferShape> buffer_shapes(const Problem& p) const override {
    this->check_problem(p);
    const std::int64_t rows = p.dim("rows"), dim = p.dim("dim"), n = rows * dim;
    const DType a = activation_dtype(p);
    std::vector<BufferShape> b{buffer_shape("x", Role::kInput, a, n)};
    if constexpr (kResidual) b.push_back(buffer_shape("r", Role::kInput, a, n));
    b.push_back(buffer_shape("w", Role::kInput, DType::kF32, dim));
    if constexpr (kResidual) b.push_back(buffer_shape("h", Role::kOutput, a, n));
    b.push_back(buffer_shape("y", Role::kOutput, a, n));
    b.push_back(buffer_shape("rstd", Role::kOutput, DType::kF32, rows));
    return b;
  }
  std::vector<std::pair<std::string, std::string>> in_place(const Problem&) const override {
    if constexpr (kResidual) return {{"h", "x"}, {"h", "r"}};  // the residual stream, or the branch's output
    return {};
  }

  Workload make_workload(const Problem& p, std::uint64_t seed) const override {
    this->check_problem(p);
    std::mt19937_64 rng(seed);
    Workload wl;
    ForwardPass f;
    if constexpr (kResidual) {
      ResidualPass rp = residual_pass(p, rng);
      wl.buffers.push_back(input_buffer("x", activation_dtype(p), rp.x));
      wl.buffers.push_back(input_buffer("r", activation_dtype(p), rp.r));
      f = std::move(rp.norm);
      wl.buffers.push_back(input_buffer("w", DType::kF32, f.w));
      wl.buffers.push_back(output_buffer("h", activation_dtype(p), rp.h));
    } else {
      f = forward_pass(p, rng);
      wl.buffers.push_back(input_buffer("x", activation_dtype(p), f.x));
      wl.buffers.push_back(input_buffer("w", DType::kF32, f.w));
    }
    wl.buffers.push_back(output_buffer("y", activation_dtype(p), f.y));
    wl.buffers.push_back(output_buffer("rstd", DType::kF32, f.rstd));
    return wl;
  }

  Args args_of(const Problem&, const std::vector<std::uint64_t>& a) const override {
    if constexpr (kResidual) {
      require_addresses(name(), a, {"x", "r", "w", "h", "y", "rstd"});
      return {.x = a[0], .r = a[1], .w = a[2], .h = a[3], .y = a[4], .rstd = a[5]};
    } else {
      require_addresses(name(), a, {"x", "w", "y", "rstd"});
      return {.x = a[0], .w = a[1], .y = a[2], .rstd = a[3]};
    }
  }

  std::vector<Launch> plan(const Config& c, const Problem& p, const Args& a, const DeviceLimits&) const override {
    this->check_problem(p);
    const std::int64_t vec = c.at("vec");
    require_aligned(name(), "x", a.x, vec * activation_bytes(p), kVectorAccesses);
    require_aligned(name(), "w", a.w, std::min<std::int64_t>(16, 4 * vec), kVectorAccesses);
    require_aligned(name(), "y", a.y, vec * activation_bytes(p), kVectorAccesses);
    Launch l = row_launch(c, p);
    if constexpr (kResidual) {
      require_aligned(name(), "r", a.r, vec * activation_bytes(p), kVectorAccesses);
      require_aligned(name(), "h", a.h, vec * activation_bytes(p), kVectorAccesses);
      l.args.add(a.x).add(a.r).add(a.w).add(a.h).add(a.y).add(a.rstd);
    } else {
      l.args.add(a.x).add(a.w).add(a.y).add(a.rstd);
    }
    l.args.add(static_cast<long long>(p.dim("rows"))).add(static_cast<int>(p.dim("dim"))).add(kEps);
    std::vector<Launch> launches;
    launches.push_back(std::move(l));
    return launches;
  }

  double flops(const Problem& p) const override {  // (x + r); x*x + sum; x*rstd*w
    return (kResidual ? 5.0 : 4.0) * static_cast<double>(p.dim("rows")) * static_cast<double>(p.dim("dim"));
  }
  double bytes(const Problem& p) const override {  // read x (and r), write y (and h); w once; rstd
    const double rows = static_cast<double>(p.dim("rows")), dim = static_cast<double>(p.dim("dim"));
    return (kResidual ? 4.0 : 2.0) * static_cast<double>(activation_bytes(p)) * rows * dim + 4.0 * dim + 4.0 * rows;
  }

 private:
  Space space_;
};

// ---- rmsnorm_bwd ------------------------------------------------------------------

/// rmsnorm_bwd, or with kResidual residual_rmsnorm_bwd.
template <bool kResidual>
class Backward final : public NormFamily<std::conditional_t<kResidual, ResidualBackwardArgs, BackwardArgs>> {
 public:
  using Args = std::conditional_t<kResidual, ResidualBackwardArgs, BackwardArgs>;
  using Base = NormFamily<Args>;
  Backward() : space_(with_blocks(Base::norm_params())) {}

  std::string name() const override { return kResidual ? "residual_rmsnorm_bwd" : "rmsnorm_bwd"; }
  std::string summary() const override {
    return kResidual ? "residual_rmsnorm backward: dh = dstream + RMSNorm's dx per row (in place allowed), dw as "
                       "per-block partials reduced by a second launch"
                     : "RMSNorm backward: dx per row, dw as per-block partials reduced by a second launch "
                       "(deterministic)";
  }
  const Space& space() const override { return space_; }

  Rendered render(const Config& c, const Problem& p) const override {
    return render_template(kTemplate,
                           {"rmsnorm::" + name() + "<" +
                                this->template_args(c, p, std::to_string(c.at("prefetch"))) + ">",
                            fmt::format("rmsnorm::rmsnorm_dw_reduce<{}>", kReduceThreads)},
                           name());
  }

  std::vector<BufferShape> buffer_shapes(const Problem& p) const override {
    this->check_problem(p);
    const std::int64_t rows = p.dim("rows"), dim = p.dim("dim"), n = rows * dim;
    const DType a = activation_dtype(p);
    std::vector<BufferShape> b{buffer_shape(kResidual ? "h" : "x", Role::kInput, a, n),
                               buffer_shape("w", Role::kInput, DType::kF32, dim),
                               buffer_shape("rstd", Role::kInput, DType::kF32, rows),
                               buffer_shape("dy", Role::kInput, a, n)};
    if constexpr (kResidual) {
      b.push_back(buffer_shape("dstream", Role::kInput, a, n));
      b.push_back(buffer_shape("dh", Role::kOutput, a, n));
    } else {
      b.push_back(buffer_shape("dx", Role::kOutput, a, n));
    }
    b.push_back(buffer_shape("dw", Role::kOutput, DType::kF32, dim));
    b.push_back(buffer_shape("scratch", Role::kScratch, DType::kF32, scratch_floats(p)));
    return b;
  }
  std::vector<std::pair<std::string, std::string>> in_place(const Problem&) const override {
    if constexpr (kResidual) return {{"dh", "dstream"}};
    return {};
  }

  Workload make_workload(const Problem& p, std::uint64_t seed) const override {
    this->check_problem(p);
    const std::int64_t rows = p.dim("rows"), dim = p.dim("dim");
    std::mt19937_64 rng(seed);
    ForwardPass f = kResidual ? residual_pass(p, rng).norm : forward_pass(p, rng);
    f.rstd = stored_as(DType::kF32, std::vector<float>(f.rstd.begin(), f.rstd.end()));  // as the forward leaves it
    const auto dy = stored_as(activation_dtype(p), random_floats(rng, f.x.size(), -1.f, 1.f));
    std::vector<double> dx(f.x.size()), dw(static_cast<std::size_t>(dim), 0.0);
    rmsnorm_backward<double>(f.x.data(), f.w.data(), f.rstd.data(), dy.data(), dx.data(), dw.data(), rows, dim);
    Workload wl;
    wl.buffers.push_back(input_buffer(kResidual ? "h" : "x", activation_dtype(p), f.x));
    wl.buffers.push_back(input_buffer("w", DType::kF32, f.w));
    wl.buffers.push_back(input_buffer("rstd", DType::kF32, f.rstd));
    wl.buffers.push_back(input_buffer("dy", activation_dtype(p), dy));
    if constexpr (kResidual) {
      // dh = dstream + dx: the residual path's gradient plus the norm's.
      auto dh = stored_as(activation_dtype(p), random_floats(rng, f.x.size(), -1.f, 1.f));
      wl.buffers.push_back(input_buffer("dstream", activation_dtype(p), dh));
      residual::residual_backward<double>(dh.data(), dx.data(), rows * dim);
      wl.buffers.push_back(output_buffer("dh", activation_dtype(p), dh));
    } else {
      wl.buffers.push_back(output_buffer("dx", activation_dtype(p), dx));
    }
    wl.buffers.push_back(output_buffer("dw", DType::kF32, dw));
    wl.buffers.push_back(make_buffer("scratch", Role::kScratch, DType::kF32,
                                     std::vector<float>(static_cast<std::size_t>(scratch_floats(p)))));
    return wl;
  }

  Args args_of(const Problem&, const std::vector<std::uint64_t>& a) const override {
    if constexpr (kResidual) {
      require_addresses(name(), a, {"h", "w", "rstd", "dy", "dstream", "dh", "dw", "scratch"});
      return {.h = a[0], .w = a[1], .rstd = a[2], .dy = a[3], .dstream = a[4], .dh = a[5], .dw = a[6],
              .workspace = a[7]};
    } else {
      require_addresses(name(), a, {"x", "w", "rstd", "dy", "dx", "dw", "scratch"});
      return {.x = a[0], .w = a[1], .rstd = a[2], .dy = a[3], .dx = a[4], .dw = a[5], .workspace = a[6]};
    }
  }

  /// The partial dw rows: one per block of the dx launch.
  std::size_t workspace_bytes(const Config& c, const Problem& p) const override {
    return static_cast<std::size_t>(blocks(c, p) * p.dim("dim")) * sizeof(float);
  }

  std::vector<Launch> plan(const Config& c, const Problem& p, const Args& a, const DeviceLimits&) const override {
    this->check_problem(p);
    const std::int64_t vec = c.at("vec");
    std::uint64_t x = 0, dx = 0;
    if constexpr (kResidual) {
      x = a.h, dx = a.dh;
      require_aligned(name(), "dstream", a.dstream, vec * activation_bytes(p), kVectorAccesses);
    } else {
      x = a.x, dx = a.dx;
    }
    require_aligned(name(), kResidual ? "h" : "x", x, vec * activation_bytes(p), kVectorAccesses);
    require_aligned(name(), "w", a.w, std::min<std::int64_t>(16, 4 * vec), kVectorAccesses);
    require_aligned(name(), "dy", a.dy, vec * activation_bytes(p), kVectorAccesses);
    require_aligned(name(), kResidual ? "dh" : "dx", dx, vec * activation_bytes(p), kVectorAccesses);
    KTUNE_REQUIRE(a.workspace != 0, fmt::format("{}: no workspace given; the config needs {} bytes (workspace_bytes)",
                                                name(), workspace_bytes(c, p)));
    require_aligned(name(), "workspace", a.workspace, std::min<std::int64_t>(16, 4 * vec), kVectorAccesses);
    const std::int64_t dim = p.dim("dim");
    const std::int64_t grid = blocks(c, p);
    const auto threads = static_cast<unsigned>(c.at("threads"));
    std::vector<Launch> launches(2);
    launches[0].kernel = 0;
    launches[0].grid = {static_cast<unsigned>(grid), 1, 1};
    launches[0].block = {threads, 1, 1};
    launches[0].args.add(x).add(a.w).add(a.rstd).add(a.dy);
    if constexpr (kResidual) launches[0].args.add(a.dstream);
    launches[0].args.add(dx).add(a.workspace);
    launches[0].args.add(static_cast<long long>(p.dim("rows"))).add(static_cast<int>(dim));
    launches[1].kernel = 1;
    launches[1].grid = {static_cast<unsigned>(ceil_div(dim, kReduceColumns)), 1, 1};
    launches[1].block = {kReduceThreads, 1, 1};
    launches[1].args.add(a.workspace).add(a.dw).add(static_cast<int>(grid)).add(static_cast<int>(dim));
    return launches;
  }

  double flops(const Problem& p) const override {  // dot (3), dx (4), dw (3) per element, (+ dstream)
    return (kResidual ? 11.0 : 10.0) * static_cast<double>(p.dim("rows")) * static_cast<double>(p.dim("dim"));
  }
  double bytes(const Problem& p) const override {  // read x, dy (and dstream), write dx; w, dw once; rstd
    const double rows = static_cast<double>(p.dim("rows")), dim = static_cast<double>(p.dim("dim"));
    return (kResidual ? 4.0 : 3.0) * static_cast<double>(activation_bytes(p)) * rows * dim + 8.0 * dim + 4.0 * rows;
  }

 protected:
  std::int64_t max_dim() const override { return kMaxBackwardDim; }
  bool is_valid_more(const Config& c, const Problem& p, const DeviceLimits& d, std::string* why) const override {
    if (!Base::is_valid_more(c, p, d, why)) return false;
    // Each thread keeps its share of x and dy (packed as T) and of the dw
    // sums (fp32) in registers, beside ~24 for addresses and indices (fitted
    // to ptxas's counts); beyond the block's register budget the share
    // spills. With prefetch it holds the next group's x and dy (and
    // dstream) too, a 16-bit element alone in its vector (vec 1) taking a
    // register of its own, and ptxas keeps about 30 % more besides (fitted
    // to `ktune compile --all` at sm_90: of the 387 prefetching configs the
    // first estimate admitted, this admits 345, of which 1 spilled, by 4
    // bytes; 14 of the 42 it rejects spilled, the 28 others took 55 to 255
    // registers, 21 of them within 4 of their block's limit).
    const std::int64_t held = c.at("vec") * items(c, p);
    // Prefetch 2 holds dstream beside x and dy, and ptxas about 35 % more besides (fitted to `ktune compile
    // --all` at sm_90: of the 204 configs of residual_rmsnorm_bwd's problem classes admitted without it, 5
    // spilled, 8 to 164 bytes; of the 190 it admits, 1 spills, 16 bytes).
    std::int64_t registers = kBaseRegisters + held * (activation_bytes(p) / 2 + 1);
    if (c.at("prefetch") == 2) {
      registers = kBaseRegisters + ceil_div(27 * held * (ceil_div(3 * activation_bytes(p), 4) + 1), 20);
    } else if (c.at("prefetch") == 1) {
      const std::int64_t rows_held = kResidual ? 6 : 4;  // x and dy (and dstream), this group's and the next's
      const std::int64_t element_bytes = std::max<std::int64_t>(activation_bytes(p), 4 / c.at("vec"));
      registers = kPrefetchBaseRegisters + ceil_div(13 * held * (rows_held * element_bytes + 4), 40);
    }
    const std::int64_t budget = std::min<std::int64_t>(d.max_regs_per_thread, d.regs_per_sm / c.at("threads"));
    if (registers > budget)
      return reject(why, fmt::format("each thread would need about {} registers for its share of x, dy and dw, over "
                                     "the {} a block of {} threads allows: it would spill",
                                     registers, budget, c.at("threads")));
    const std::int64_t groups = ceil_div(p.dim("rows"), rows_per_block(c));
    if (c.at("blocks") > kMinBlocks && c.at("blocks") / 2 >= groups)
      return reject(why, fmt::format("only {} row groups: a smaller `blocks` already gives each its own block",
                                     groups));
    return true;
  }
  std::vector<Config> candidates(const Problem& p) const override {
    // The default with the next row group prefetched: the xl step's
    // rmsnorm_bwd took 47 % of an H100's copy bandwidth without. Then more
    // blocks, four and eight an SM of an H100 or H200, with and without:
    // at the default's two, a block's next loads wait for its row group's
    // barrier and stores, and at the defaults an H200 took 2.1-2.6x the
    // floor at every model size. Then four and two times the default's rows
    // a block at a time, as many blocks and dw partials: more bytes in
    // flight per block, no more partials to reduce. The session skips those
    // the rows leave no group for, or the registers do not fit.
    const Config def = this->default_config(p);
    std::vector<Config> out = {with(def, {{"prefetch", 1}}), with(def, {{"prefetch", 1}, {"blocks", 512}}),
                               with(def, {{"blocks", 512}}), with(def, {{"prefetch", 1}, {"blocks", kMaxBlocks}})};
    for (const std::int64_t times : {4, 2})
      if (times * def.at("threads") <= 1024) out.push_back(with(def, {{"threads", times * def.at("threads")}}));
    // The residual's dstream loaded with x and dy, where it waited for the reduction: at the defaults an H200
    // took 12.5 us more than rmsnorm_bwd at 4096 x 2560 for 5 us more of copy time. Not measured on a GPU yet.
    if (kResidual) out.push_back(with(def, {{"prefetch", 2}}));
    return out;
  }
  Config default_more(Config c, const Problem& p) const override {
    c.set("prefetch", 0);
    // About two blocks per SM, fewer when the rows run out.
    const std::int64_t groups = ceil_div(p.dim("rows"), rows_per_block(c));
    std::int64_t blocks = 256;
    while (blocks > kMinBlocks && blocks / 2 >= groups) blocks /= 2;
    c.set("blocks", blocks);
    return c;
  }

 private:
  /// Blocks of the dx launch, each writing one partial dw row.
  static std::int64_t blocks(const Config& c, const Problem& p) {
    return std::min(c.at("blocks"), ceil_div(p.dim("rows"), rows_per_block(c)));
  }
  static std::vector<Param> with_blocks(std::vector<Param> params) {
    params.push_back({"blocks", {kMinBlocks, 128, 256, 512, kMaxBlocks},
                      "blocks (and dw partials) of the dx launch: more fill the GPU, fewer shorten the dw reduction"});
    if (kResidual)
      params.push_back({"prefetch", {0, 1, 2},
                        "1: a block's next row group's x, dy and dstream loaded before this group's reduction, in "
                        "flight across its barrier and stores, for twice the registers holding them; 2: dstream "
                        "loaded with this group's x and dy, in flight across the reduction, for a third row held"});
    else
      params.push_back({"prefetch", {0, 1},
                        "1: a block's next row group's x and dy loaded before this group's reduction, in flight "
                        "across its barrier and stores, for twice the registers holding them"});
    return params;
  }
  Space space_;
};

}  // namespace

std::int64_t scratch_floats(const Problem& p) { return kMaxBlocks * p.dim("dim"); }

const ForwardFamily& forward_family() {
  static const Forward<false> f;
  return f;
}
const BackwardFamily& backward_family() {
  static const Backward<false> f;
  return f;
}
const ResidualForwardFamily& residual_forward_family() {
  static const Forward<true> f;
  return f;
}
const ResidualBackwardFamily& residual_backward_family() {
  static const Backward<true> f;
  return f;
}

}  // namespace ktune::templates::rmsnorm
