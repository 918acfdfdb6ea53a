// The primitive families: one class, one op per registered family. Spaces
// of one point, problems, rendering, launch plans, workloads with the fp64
// reference of each op.
#include "templates/eager/primitive.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <random>

#include "base/error.hpp"
#include "templates/common/family_helpers.hpp"
#include "templates/render.hpp"

namespace ktune::templates::eager {
namespace {

constexpr const char* kTemplate = "eager/primitive.cuh";
constexpr std::int64_t kThreads = 256;
constexpr std::int64_t kMaxCols = (std::int64_t{1} << 31) - 1;  // column indices are 32-bit

enum class Kind {
  kUnary, kBinary, kRowReduce, kColSum, kGather, kScatterAdd, kCausalMask, kStridedBinary, kStridedCopy,
  kFill, kGatherRows, kIndexAdd
};
bool is_table(Kind k) { return k == Kind::kGatherRows || k == Kind::kIndexAdd; }
constexpr std::int64_t kMaxExtent = std::int64_t{1} << 40;  // sizes, offsets and strides of the strided views

bool is_strided(Kind k) { return k == Kind::kStridedBinary || k == Kind::kStridedCopy; }

/// The views' dims: d0..d3, then per operand its offset and strides.
std::vector<std::string> strided_dims(Kind k) {
  std::vector<std::string> dims = {"d0", "d1", "d2", "d3"};
  for (const char* o : k == Kind::kStridedCopy ? std::vector<const char*>{"a", "y"}
                                                : std::vector<const char*>{"a", "b", "y"}) {
    dims.push_back(fmt::format("{}_offset", o));
    for (int i = 0; i < 4; ++i) dims.push_back(fmt::format("{}{}", o, i));
  }
  return dims;
}

/// Operand `o`'s view in problem `p`.
View view_of(const Problem& p, const char* o) {
  View v{p.dim(fmt::format("{}_offset", o)), {}};
  for (int i = 0; i < 4; ++i) v.strides[static_cast<std::size_t>(i)] = p.dim(fmt::format("{}{}", o, i));
  return v;
}
std::array<std::int64_t, 4> sizes_of(const Problem& p) { return {p.dim("d0"), p.dim("d1"), p.dim("d2"), p.dim("d3")}; }
std::int64_t element_count(const std::array<std::int64_t, 4>& sizes) {
  return sizes[0] * sizes[1] * sizes[2] * sizes[3];
}
/// Elements a buffer needs to hold the view: one past its last element.
std::int64_t extent(const std::array<std::int64_t, 4>& sizes, const View& v) {
  std::int64_t last = v.offset;
  for (std::size_t i = 0; i < 4; ++i) last += (sizes[i] - 1) * v.strides[i];
  return last + 1;
}
/// extent(), or nothing where it overflows int64 (sizes at least 1, offset and strides at least 0).
std::optional<std::int64_t> checked_extent(const std::array<std::int64_t, 4>& sizes, const View& v) {
  std::int64_t last = v.offset;
  for (std::size_t i = 0; i < 4; ++i) {
    const auto step = checked_product({sizes[i] - 1, v.strides[i]});
    if (!step || __builtin_add_overflow(last, *step, &last)) return std::nullopt;
  }
  return last + 1;
}
std::int64_t element_at(const std::array<std::int64_t, 4>& index, const View& v) {
  std::int64_t at = v.offset;
  for (std::size_t i = 0; i < 4; ++i) at += index[i] * v.strides[i];
  return at;
}

constexpr std::array<const char*, 10> kUnaryNames = {"neg",  "exp",     "log",    "rsqrt", "sqrt",
                                                     "silu", "sigmoid", "square", "scale", "add_scalar"};
constexpr std::array<const char*, 6> kBinaryNames = {"add", "sub", "mul", "div", "silu_backward", "rsqrt_backward"};
constexpr std::array<const char*, 3> kReduceNames = {"sum", "max", "mean"};

/// Workload scalars: what args_of passes for the workload's expected values.
constexpr float kWorkloadAlpha = 0.75f;
constexpr float kScatterAlpha = -1.0f;

class Primitive final : public PrimitiveFamily {
 public:
  /// alpha, where the kernel takes one: scale's factor, add_scalar's addend, scatter_add's, the value fill and
  /// causal_mask write.
  Scalars scalars(const Problem&) const override {
    const std::string n = name();
    if (n == "prim_scatter_add") return {{"alpha", shortest(kScatterAlpha)}};
    if (n == "prim_scale" || n == "prim_add_scalar" || n == "prim_fill" || n == "prim_causal_mask")
      return {{"alpha", shortest(kWorkloadAlpha)}};
    return {};
  }
  void set_scalars(PrimArgs& args, const Problem&, const Scalars& s) const override {
    args.alpha = f32_scalar(name(), "alpha", s.at("alpha"));
  }
  Primitive(Kind kind, int op) : kind_(kind), op_(op), space_({{"threads", {kThreads}, "one config: untuned"}}) {}

  std::string name() const override {
    switch (kind_) {
      case Kind::kUnary: return fmt::format("prim_{}", kUnaryNames[op_]);
      case Kind::kBinary: return fmt::format("prim_{}", kBinaryNames[op_]);
      case Kind::kRowReduce: return fmt::format("prim_row_{}", kReduceNames[op_]);
      case Kind::kColSum: return "prim_col_sum";
      case Kind::kGather: return "prim_gather";
      case Kind::kScatterAdd: return "prim_scatter_add";
      case Kind::kCausalMask: return "prim_causal_mask";
      case Kind::kStridedBinary: return fmt::format("prim_strided_{}", kBinaryNames[op_]);
      case Kind::kStridedCopy: return "prim_strided_copy";
      case Kind::kFill: return "prim_fill";
      case Kind::kGatherRows: return "prim_gather_rows";
      case Kind::kIndexAdd: return "prim_index_add";
    }
    return "";
  }
  std::string summary() const override {
    switch (kind_) {
      case Kind::kUnary: return fmt::format("eager primitive: y = {}(x), elementwise", kUnaryNames[op_]);
      case Kind::kBinary:
        return fmt::format("eager primitive: y = {}(a, b), b broadcast over rows and/or columns", kBinaryNames[op_]);
      case Kind::kRowReduce: return fmt::format("eager primitive: the {} of each row", kReduceNames[op_]);
      case Kind::kColSum: return "eager primitive: the sum of each column";
      case Kind::kGather: return "eager primitive: y[r] = x[r, idx[r]]";
      case Kind::kScatterAdd: return "eager primitive: y[r, idx[r]] += alpha, in place";
      case Kind::kCausalMask:
        return "eager primitive: y = alpha above the diagonal of each (cols, cols) block, in place (masked_fill)";
      case Kind::kStridedBinary:
        return fmt::format("eager primitive: y = {}(a, b) over strided 4-d views of each operand", kBinaryNames[op_]);
      case Kind::kStridedCopy: return "eager primitive: y = a over strided 4-d views (a strided copy, stack)";
      case Kind::kFill: return "eager primitive: y = alpha (zeros, full)";
      case Kind::kGatherRows: return "eager primitive: y[r, :] = x[idx[r], :] (index_select of table rows)";
      case Kind::kIndexAdd: return "eager primitive: y[idx[r], :] += x[r, :] (index_add_, fp32 atomics)";
    }
    return "";
  }
  std::vector<std::string> source_files() const override { return {kTemplate}; }
  const Space& space() const override { return space_; }
  /// Elementwise ops read each element before they write it, by the same thread: y may be x, or a, or a b
  /// that is not broadcast. (Strided views of one buffer are not told apart by their addresses: none.)
  bool deterministic(const Config&) const override { return kind_ != Kind::kIndexAdd; }  // index_add_: atomics
  std::vector<std::pair<std::string, std::string>> in_place(const Problem& p) const override {
    switch (kind_) {
      case Kind::kUnary: return {{"y", "x"}};
      case Kind::kBinary:
        if (p.dim("b_rows") == p.dim("rows") && p.dim("b_cols") == p.dim("cols"))
          return {{"y", "a"}, {"y", "b"}};
        return {{"y", "a"}};
      default: return {};
    }
  }

  std::vector<Problem> problem_classes() const override {
    // Ragged sizes: no multiple of the block or of a warp.
    if (kind_ == Kind::kUnary || kind_ == Kind::kFill)
      return {Problem{"f32", {{"n", 4999}}}, Problem{"bf16", {{"n", 1001}}}};
    if (kind_ == Kind::kGatherRows)  // ids repeat: 45 rows over 7
      return {Problem{"f32", {{"rows", 37}, {"cols", 100}, {"table_rows", 50}}},
              Problem{"bf16", {{"rows", 45}, {"cols", 77}, {"table_rows", 7}}}};
    if (kind_ == Kind::kIndexAdd)  // fp32 only; long runs of one id, and ids never drawn
      return {Problem{"f32", {{"rows", 300}, {"cols", 36}, {"table_rows", 7}}},
              Problem{"f32", {{"rows", 45}, {"cols", 77}, {"table_rows", 1000}}}};
    if (kind_ == Kind::kBinary)
      return {Problem{"f32", {{"rows", 37}, {"cols", 101}, {"b_rows", 1}, {"b_cols", 101}}},
              Problem{"bf16", {{"rows", 37}, {"cols", 101}, {"b_rows", 37}, {"b_cols", 1}}}};
    if (kind_ == Kind::kStridedBinary)  // x[..., 1::2] * a table broadcast over dims 0 and 2; a row into odd elements
      return {strided_problem("f32", {2, 5, 3, 7}, {1, {210, 42, 14, 2}}, View{0, {0, 7, 0, 1}}, {0, {105, 21, 7, 1}}),
              strided_problem("bf16", {1, 1, 3, 333}, {0, {0, 0, 333, 1}}, View{5, {0, 0, 0, 1}}, {1, {0, 0, 666, 2}})};
    if (kind_ == Kind::kStridedCopy)  // two rows interleaved (stack); a (3, 4, 5, 7) permutation
      return {strided_problem("f32", {1, 1, 2, 105}, {0, {0, 0, 105, 1}}, std::nullopt, {0, {0, 0, 1, 2}}),
              strided_problem("bf16", {3, 4, 5, 7}, {0, {140, 35, 7, 1}}, std::nullopt, {3, {7, 105, 21, 1}})};
    if (kind_ == Kind::kCausalMask)  // stacked (cols, cols) blocks
      return {Problem{"f32", {{"rows", 111}, {"cols", 37}}}, Problem{"bf16", {{"rows", 300}, {"cols", 100}}}};
    return {Problem{"f32", {{"rows", 37}, {"cols", 1001}}}, Problem{"bf16", {{"rows", 19}, {"cols", 333}}}};
  }

  void check_problem(const Problem& p) const override {
    KTUNE_REQUIRE(p.dtype == "f32" || p.dtype == "bf16",
                  fmt::format("{}: dtype '{}' is not supported; accepted: f32, bf16", name(), p.dtype));
    KTUNE_REQUIRE(kind_ != Kind::kIndexAdd || p.dtype == "f32",
                  fmt::format("{}: dtype '{}' is not supported; accepted: f32 (fp32 atomics)", name(), p.dtype));
    const std::vector<std::string> dims = kind_ == Kind::kUnary || kind_ == Kind::kFill ? std::vector<std::string>{"n"}
                                          : is_table(kind_) ? std::vector<std::string>{"rows", "cols", "table_rows"}
                                          : kind_ == Kind::kBinary ? std::vector<std::string>{"rows", "cols", "b_rows",
                                                                                              "b_cols"}
                                          : is_strided(kind_)      ? strided_dims(kind_)
                                                                   : std::vector<std::string>{"rows", "cols"};
    std::string accepted;
    for (const auto& d : dims) accepted += (accepted.empty() ? "" : ", ") + d;
    for (const auto& [k, v] : p.dims)
      KTUNE_REQUIRE(std::find(dims.begin(), dims.end(), k) != dims.end(),
                    fmt::format("{}: unknown dimension '{}'; accepted: {}", name(), k, accepted));
    if (is_strided(kind_)) {
      check_views(p, dims);
      return;
    }
    for (const auto& d : dims) {
      const bool int32 = d == "cols" || d == "table_rows";  // column indices and table ids are int32
      KTUNE_REQUIRE(p.dims.count(d) && p.dim(d) >= 1 && p.dim(d) <= (int32 ? kMaxCols : kMaxTensorElements),
                    fmt::format("{}: dimension '{}' must be in 1..{}{}", name(), d, int32 ? "2^31-1" : "2^40",
                                d == "table_rows" ? " (ids are int32)" : ""));
    }
    // row_reduce walks a row's columns with an int index that steps a block's vectors past the last.
    KTUNE_REQUIRE(kind_ != Kind::kRowReduce || p.dim("cols") <= kMaxCols - 16 * kThreads,
                  fmt::format("{}: dimension 'cols' must be in 1..{} (the row's int index steps past it)", name(),
                              kMaxCols - 16 * kThreads));
    if (kind_ != Kind::kUnary && kind_ != Kind::kFill) {  // b (binary) holds at most a's elements
      const bool y = kind_ == Kind::kScatterAdd || kind_ == Kind::kCausalMask || kind_ == Kind::kGatherRows;
      require_elements_within(name(), p, {"rows", "cols"}, kind_ == Kind::kBinary ? "a and y" : y ? "y" : "x");
      if (is_table(kind_))
        require_elements_within(name(), p, {"table_rows", "cols"},
                                kind_ == Kind::kGatherRows ? "the table x" : "the table y");
    }
    if (kind_ == Kind::kBinary) {
      KTUNE_REQUIRE(p.dim("b_rows") == 1 || p.dim("b_rows") == p.dim("rows"),
                    name() + ": 'b_rows' must be 1 (b repeated over the rows) or 'rows'");
      KTUNE_REQUIRE(p.dim("b_cols") == 1 || p.dim("b_cols") == p.dim("cols"),
                    name() + ": 'b_cols' must be 1 (b repeated across the columns) or 'cols'");
    }
    if (kind_ == Kind::kCausalMask)
      KTUNE_REQUIRE(p.dim("rows") % p.dim("cols") == 0,
                    fmt::format("{}: rows ({}) stack (cols, cols) blocks, so they must be a multiple of cols ({})",
                                name(), p.dim("rows"), p.dim("cols")));
  }

  Config default_config(const Problem&) const override { return Config({{"threads", kThreads}}); }
  bool is_valid(const Config& c, const Problem& p, const DeviceLimits& d, std::string* why) const override {
    check_problem(p);
    if (c.at("threads") > d.max_threads_per_block)
      return reject(why, fmt::format("{} threads per block; the device allows {}", c.at("threads"),
                                     d.max_threads_per_block));
    if (kind_ == Kind::kRowReduce && p.dim("rows") > 0x7fffffff)
      return reject(why, "a block per row: more rows than a grid holds (2^31-1)");
    return true;
  }

  Rendered render(const Config& c, const Problem& p) const override {
    const auto t = c.at("threads");
    const char* T = activation_type(p);
    std::string kernel;
    switch (kind_) {
      case Kind::kUnary: kernel = fmt::format("prim::unary<{}, {}, {}>", t, op_, T); break;
      case Kind::kBinary: kernel = fmt::format("prim::binary<{}, {}, {}>", t, op_, T); break;
      case Kind::kRowReduce: kernel = fmt::format("prim::row_reduce<{}, {}, {}>", t, op_, T); break;
      case Kind::kColSum: kernel = fmt::format("prim::col_sum<{}, {}>", t, T); break;
      case Kind::kGather: kernel = fmt::format("prim::gather<{}, {}>", t, T); break;
      case Kind::kScatterAdd: kernel = fmt::format("prim::scatter_add<{}, {}>", t, T); break;
      case Kind::kCausalMask: kernel = fmt::format("prim::causal_mask<{}, {}>", t, T); break;
      case Kind::kStridedBinary: kernel = fmt::format("prim::strided_binary<{}, {}, {}>", t, op_, T); break;
      case Kind::kStridedCopy: kernel = fmt::format("prim::strided_copy<{}, {}>", t, T); break;
      case Kind::kFill: kernel = fmt::format("prim::fill<{}, {}>", t, T); break;
      case Kind::kGatherRows: kernel = fmt::format("prim::gather_rows<{}, {}>", t, T); break;
      case Kind::kIndexAdd: kernel = fmt::format("prim::index_add<{}>", t); break;
    }
    return render_template(kTemplate, {kernel}, name());
  }

  std::vector<BufferShape> buffer_shapes(const Problem& p) const override {
    check_problem(p);
    const DType dt = activation_dtype(p);
    const auto shape = [&](const char* name, Role role, std::int64_t n) { return buffer_shape(name, role, dt, n); };
    const auto ids = [](std::int64_t n) { return buffer_shape("idx", Role::kInput, DType::kI32, n); };
    switch (kind_) {
      case Kind::kUnary: return {shape("x", Role::kInput, p.dim("n")), shape("y", Role::kOutput, p.dim("n"))};
      case Kind::kFill: return {shape("y", Role::kOutput, p.dim("n"))};
      case Kind::kStridedBinary:
      case Kind::kStridedCopy: {
        const auto sizes = sizes_of(p);
        std::vector<BufferShape> b{shape("a", Role::kInput, extent(sizes, view_of(p, "a")))};
        if (kind_ == Kind::kStridedBinary) b.push_back(shape("b", Role::kInput, extent(sizes, view_of(p, "b"))));
        b.push_back(shape("y", Role::kInOut, extent(sizes, view_of(p, "y"))));
        return b;
      }
      case Kind::kGatherRows:
        return {shape("x", Role::kInput, p.dim("table_rows") * p.dim("cols")), ids(p.dim("rows")),
                shape("y", Role::kOutput, p.dim("rows") * p.dim("cols"))};
      case Kind::kIndexAdd:
        return {shape("x", Role::kInput, p.dim("rows") * p.dim("cols")), ids(p.dim("rows")),
                shape("y", Role::kInOut, p.dim("table_rows") * p.dim("cols"))};
      case Kind::kBinary:
        return {shape("a", Role::kInput, p.dim("rows") * p.dim("cols")),
                shape("b", Role::kInput, p.dim("b_rows") * p.dim("b_cols")),
                shape("y", Role::kOutput, p.dim("rows") * p.dim("cols"))};
      case Kind::kScatterAdd: return {shape("y", Role::kInOut, p.dim("rows") * p.dim("cols")), ids(p.dim("rows"))};
      case Kind::kCausalMask: return {shape("y", Role::kInOut, p.dim("rows") * p.dim("cols"))};
      default: {  // the row reductions, the column sum, the gather
        std::vector<BufferShape> b{shape("x", Role::kInput, p.dim("rows") * p.dim("cols"))};
        if (kind_ == Kind::kGather) b.push_back(ids(p.dim("rows")));
        b.push_back(shape("y", Role::kOutput, kind_ == Kind::kColSum ? p.dim("cols") : p.dim("rows")));
        return b;
      }
    }
  }

  Workload make_workload(const Problem& p, std::uint64_t seed) const override { return make_workload(p, seed, {}); }
  Workload make_workload(const Problem& p, std::uint64_t seed, const Scalars& given) const override {
    check_problem(p);
    const double alpha = args_with_scalars(p, given).alpha;  // the f32 the kernel takes
    std::mt19937_64 rng(seed);
    const DType dt = activation_dtype(p);
    // Inputs where every op is defined and well conditioned: positive for log, rsqrt, sqrt, and a divisor.
    const bool positive = (kind_ == Kind::kUnary && (op_ == static_cast<int>(Unary::kLog) ||
                                                     op_ == static_cast<int>(Unary::kRsqrt) ||
                                                     op_ == static_cast<int>(Unary::kSqrt)));
    auto values = [&](std::int64_t n, bool pos) {
      return stored_as(dt, random_floats(rng, static_cast<std::size_t>(n), pos ? 0.5f : -2.f, 2.f));
    };
    Workload w;
    if (kind_ == Kind::kUnary) {
      const auto x = values(p.dim("n"), positive);
      std::vector<double> y(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) y[i] = unary_reference(static_cast<Unary>(op_), x[i], alpha);
      w.buffers.push_back(input_buffer("x", dt, x));
      w.buffers.push_back(output_buffer("y", dt, y));
      return w;
    }
    if (is_strided(kind_)) return strided_workload(p, rng, dt);
    if (kind_ == Kind::kFill) {
      w.buffers.push_back(output_buffer("y", dt, std::vector<double>(static_cast<std::size_t>(p.dim("n")), alpha)));
      return w;
    }
    if (is_table(kind_)) return table_workload(p, rng, dt);
    const std::int64_t rows = p.dim("rows"), cols = p.dim("cols");
    if (kind_ == Kind::kBinary) {
      const std::int64_t br = p.dim("b_rows"), bc = p.dim("b_cols");
      const auto a = values(rows * cols, false);
      const auto b = values(br * bc, op_ == static_cast<int>(Binary::kDiv));
      std::vector<double> y(a.size());
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c)
          y[static_cast<std::size_t>(r * cols + c)] =
              binary_reference(static_cast<Binary>(op_), a[static_cast<std::size_t>(r * cols + c)],
                               b[static_cast<std::size_t>((br == 1 ? 0 : r) * bc + (bc == 1 ? 0 : c))]);
      w.buffers.push_back(input_buffer("a", dt, a));
      w.buffers.push_back(input_buffer("b", dt, b));
      w.buffers.push_back(output_buffer("y", dt, y));
      return w;
    }
    auto x = values(rows * cols, false);
    if (kind_ == Kind::kRowReduce) {
      // Rows of scales 0.01 to 10, every other one all negative: a max that starts at 0, or any one answer for
      // every row, is wrong.
      const auto log_scales = random_floats(rng, static_cast<std::size_t>(rows), -2.f, 1.f);
      std::vector<float> spread(x.size());
      for (std::int64_t r = 0; r < rows; ++r) {
        const double scale = std::pow(10.0, log_scales[static_cast<std::size_t>(r)]);
        for (std::int64_t c = 0; c < cols; ++c) {
          const auto i = static_cast<std::size_t>(r * cols + c);
          spread[i] = static_cast<float>(x[i] * scale - (r % 2 ? 3 * scale : 0));
        }
      }
      x = stored_as(dt, spread);
    }
    auto at = [&](std::int64_t r, std::int64_t c) { return x[static_cast<std::size_t>(r * cols + c)]; };
    std::vector<std::int32_t> idx(static_cast<std::size_t>(rows));
    for (auto& i : idx) i = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(cols));
    if (kind_ == Kind::kScatterAdd || kind_ == Kind::kCausalMask) {
      std::vector<double> y = x;
      if (kind_ == Kind::kScatterAdd)
        for (std::int64_t r = 0; r < rows; ++r)
          y[static_cast<std::size_t>(r * cols + idx[static_cast<std::size_t>(r)])] += alpha;
      else
        for (std::int64_t r = 0; r < rows; ++r)
          for (std::int64_t c = r % cols + 1; c < cols; ++c) y[static_cast<std::size_t>(r * cols + c)] = alpha;
      HostBuffer b = input_buffer("y", dt, x);
      b.role = Role::kInOut;
      b.expected = output_buffer("y", dt, y).expected;
      b.tolerance = tolerance_for(p.dtype);
      w.buffers.push_back(std::move(b));
      if (kind_ == Kind::kScatterAdd) w.buffers.push_back(make_buffer("idx", Role::kInput, DType::kI32, idx));
      return w;
    }
    std::vector<double> y(static_cast<std::size_t>(kind_ == Kind::kColSum ? cols : rows), 0.0);
    for (std::int64_t r = 0; r < rows; ++r) {
      double acc = kind_ == Kind::kRowReduce && op_ == static_cast<int>(Reduce::kMax) ? -INFINITY : 0.0;
      for (std::int64_t c = 0; c < cols; ++c) {
        if (kind_ == Kind::kColSum) y[static_cast<std::size_t>(c)] += at(r, c);
        else acc = op_ == static_cast<int>(Reduce::kMax) ? std::max(acc, at(r, c)) : acc + at(r, c);
      }
      if (kind_ == Kind::kRowReduce)
        y[static_cast<std::size_t>(r)] = op_ == static_cast<int>(Reduce::kMean) ? acc / static_cast<double>(cols) : acc;
      if (kind_ == Kind::kGather) y[static_cast<std::size_t>(r)] = at(r, idx[static_cast<std::size_t>(r)]);
    }
    w.buffers.push_back(input_buffer("x", dt, x));
    if (kind_ == Kind::kGather) w.buffers.push_back(make_buffer("idx", Role::kInput, DType::kI32, idx));
    w.buffers.push_back(output_buffer("y", dt, y));
    return w;
  }

  PrimArgs args_of(const Problem&, const std::vector<std::uint64_t>& a) const override {
    switch (kind_) {
      case Kind::kUnary:
        require_addresses(name(), a, {"x", "y"});
        return {.x = a[0], .y = a[1], .alpha = kWorkloadAlpha};
      case Kind::kBinary: require_addresses(name(), a, {"a", "b", "y"}); return {.x = a[0], .b = a[1], .y = a[2]};
      case Kind::kGather:
        require_addresses(name(), a, {"x", "idx", "y"});
        return {.x = a[0], .idx = a[1], .y = a[2]};
      case Kind::kScatterAdd:
        require_addresses(name(), a, {"y", "idx"});
        return {.idx = a[1], .y = a[0], .alpha = kScatterAlpha};
      case Kind::kCausalMask: require_addresses(name(), a, {"y"}); return {.y = a[0], .alpha = kWorkloadAlpha};
      case Kind::kStridedBinary:
        require_addresses(name(), a, {"a", "b", "y"});
        return {.x = a[0], .b = a[1], .y = a[2]};
      case Kind::kStridedCopy: require_addresses(name(), a, {"a", "y"}); return {.x = a[0], .y = a[1]};
      case Kind::kFill: require_addresses(name(), a, {"y"}); return {.y = a[0], .alpha = kWorkloadAlpha};
      case Kind::kGatherRows:
      case Kind::kIndexAdd:
        require_addresses(name(), a, {"x", "idx", "y"});
        return {.x = a[0], .idx = a[1], .y = a[2]};
      default: require_addresses(name(), a, {"x", "y"}); return {.x = a[0], .y = a[1]};
    }
  }

  std::vector<Launch> plan(const Config& c, const Problem& p, const PrimArgs& a, const DeviceLimits&) const override {
    check_problem(p);
    const std::int64_t t = c.at("threads");
    Launch l;
    l.kernel = 0;
    l.block = {static_cast<unsigned>(t), 1, 1};
    auto grid = [&](std::int64_t n, std::int64_t per_thread = 1) {
      KTUNE_REQUIRE(ceil_div(n, t * per_thread) <= 0x7fffffff, name() + ": too many elements for one launch");
      return dim3_x(ceil_div(n, t * per_thread));
    };
    // The elementwise kernels' elements per thread: 16 bytes (elementwise.cuh).
    const std::int64_t width = 16 / activation_bytes(p);
    if (is_strided(kind_)) {
      const auto sizes = sizes_of(p);
      const std::int64_t size = activation_bytes(p);
      std::array<long long, 16> views{};  // prim::Views: sizes, then a's, b's and y's strides
      const View a_view = view_of(p, "a"), y_view = view_of(p, "y");
      const View b_view = kind_ == Kind::kStridedBinary ? view_of(p, "b") : View{};
      for (std::size_t i = 0; i < 4; ++i) {
        views[i] = sizes[i];
        views[4 + i] = a_view.strides[i];
        views[8 + i] = b_view.strides[i];
        views[12 + i] = y_view.strides[i];
      }
      l.grid = grid(element_count(sizes));
      l.args.add(a.x + static_cast<std::uint64_t>(a_view.offset * size));
      if (kind_ == Kind::kStridedBinary) l.args.add(a.b + static_cast<std::uint64_t>(b_view.offset * size));
      l.args.add(a.y + static_cast<std::uint64_t>(y_view.offset * size)).add(views);
    } else if (kind_ == Kind::kFill) {
      l.grid = grid(p.dim("n"), width);
      l.args.add(a.y).add(static_cast<long long>(p.dim("n"))).add(a.alpha);
    } else if (is_table(kind_)) {
      const auto rows = static_cast<long long>(p.dim("rows")), cols = static_cast<long long>(p.dim("cols"));
      l.grid = grid(rows * cols, kind_ == Kind::kGatherRows ? width : 1);
      l.args.add(a.x).add(a.idx).add(a.y).add(rows).add(cols).add(static_cast<long long>(p.dim("table_rows")));
    } else if (kind_ == Kind::kUnary) {
      l.grid = grid(p.dim("n"), width);
      l.args.add(a.x).add(a.y).add(static_cast<long long>(p.dim("n"))).add(a.alpha);
    } else {
      const auto rows = static_cast<long long>(p.dim("rows"));
      const auto cols = p.dim("cols");
      switch (kind_) {
        case Kind::kBinary: {
          // b's rows as x's (one of one too, so b goes by vectors as x does), else one broadcast over them.
          const long long row_stride = p.dim("b_rows") == rows ? p.dim("b_cols") : 0;
          const long long col_stride = p.dim("b_cols") == 1 ? 0 : 1;
          l.grid = grid(rows * cols, width);
          l.args.add(a.x).add(a.b).add(a.y).add(rows).add(static_cast<long long>(cols)).add(row_stride).add(col_stride);
          break;
        }
        case Kind::kRowReduce:
          l.grid = dim3_x(rows);
          l.args.add(a.x).add(a.y).add(rows).add(static_cast<int>(cols));
          break;
        case Kind::kColSum:
          l.grid = dim3_x(ceil_div(cols, 32));  // 32 columns a block
          l.args.add(a.x).add(a.y).add(rows).add(static_cast<int>(cols));
          break;
        case Kind::kGather:
          l.grid = grid(rows);
          l.args.add(a.x).add(a.idx).add(a.y).add(rows).add(static_cast<int>(cols));
          break;
        case Kind::kScatterAdd:
          l.grid = grid(rows);
          l.args.add(a.y).add(a.idx).add(rows).add(static_cast<int>(cols)).add(a.alpha);
          break;
        case Kind::kCausalMask:
          l.grid = grid(rows * cols, width);
          l.args.add(a.y).add(rows).add(static_cast<int>(cols)).add(a.alpha);
          break;
        default: break;
      }
    }
    return {std::move(l)};
  }

  double flops(const Problem& p) const override { return static_cast<double>(elements(p)); }
  double bytes(const Problem& p) const override {  // every input read once, the output written once
    const double e = static_cast<double>(elements(p)), s = static_cast<double>(activation_bytes(p));
    switch (kind_) {
      case Kind::kUnary: return 2.0 * e * s;
      case Kind::kBinary:
        return (2.0 * e + static_cast<double>(p.dim("b_rows") * p.dim("b_cols"))) * s;
      case Kind::kRowReduce: return (e + static_cast<double>(p.dim("rows"))) * s;
      case Kind::kColSum: return (e + static_cast<double>(p.dim("cols"))) * s;
      case Kind::kStridedBinary: return 3.0 * e * s;
      case Kind::kStridedCopy: return 2.0 * e * s;
      case Kind::kFill: return e * s;
      case Kind::kGatherRows: return 2.0 * e * s + static_cast<double>(p.dim("rows")) * 4.0;  // rows read, written
      case Kind::kIndexAdd:
        return 3.0 * e * s + static_cast<double>(p.dim("rows")) * 4.0;  // x read, y read and written
      case Kind::kCausalMask: {  // reads and writes the strict upper triangle of each block (to a vector's edge)
        const double cols = static_cast<double>(p.dim("cols"));
        return static_cast<double>(p.dim("rows")) / cols * cols * (cols - 1) * s;
      }
      default:
        return static_cast<double>(p.dim("rows")) * (2.0 * s + 4.0);  // gather, scatter: a value and an index per row
    }
  }

 private:
  /// A grid of n blocks along x; throws past what a grid holds (a plan made without is_valid).
  static std::array<unsigned, 3> dim3_x(std::int64_t n) {
    KTUNE_REQUIRE(n >= 1 && n <= kMaxCols, fmt::format("a grid of {} blocks: more than a grid holds (2^31-1)", n));
    return {static_cast<unsigned>(n), 1, 1};
  }
  std::int64_t elements(const Problem& p) const {
    if (is_strided(kind_)) return element_count(sizes_of(p));
    return p.dims.count("n") ? p.dim("n") : p.dim("rows") * p.dim("cols");
  }

  /// Sizes 1..2^40, offsets and strides 0..2^40, and a view of y that never
  /// repeats an element: ordered by stride, each dimension of more than one
  /// element steps past the whole extent of the ones before it.
  void check_views(const Problem& p, const std::vector<std::string>& dims) const {
    for (const auto& d : dims) {
      const bool size = d.size() == 2 && d[0] == 'd';
      KTUNE_REQUIRE(p.dims.count(d) && p.dim(d) >= (size ? 1 : 0) && p.dim(d) <= kMaxExtent,
                    fmt::format("{}: dimension '{}' must be in {}..2^40", name(), d, size ? 1 : 0));
    }
    const auto sizes = sizes_of(p);
    const auto count = checked_product({sizes[0], sizes[1], sizes[2], sizes[3]});
    KTUNE_REQUIRE(count && *count <= kMaxExtent,
                  fmt::format("{}: the views hold d0 * d1 * d2 * d3 = {} * {} * {} * {} elements, more than 2^40",
                              name(), sizes[0], sizes[1], sizes[2], sizes[3]));
    // Each operand's buffer holds its view's extent: within 2^40 too, so that no offset overflows.
    for (const char* o : kind_ == Kind::kStridedCopy ? std::vector<const char*>{"a", "y"}
                                                      : std::vector<const char*>{"a", "b", "y"})
      KTUNE_REQUIRE(checked_extent(sizes, view_of(p, o)).value_or(kMaxExtent + 1) <= kMaxExtent,
                    fmt::format("{}: {}'s view reaches past element 2^40 of its buffer (offset plus (size - 1) * "
                                "stride over the dims)",
                                name(), o));
    std::vector<std::pair<std::int64_t, std::int64_t>> steps;  // (stride, size) of y's dims of more than one element
    const View y = view_of(p, "y");
    for (std::size_t i = 0; i < 4; ++i)
      if (sizes[i] > 1) steps.emplace_back(y.strides[i], sizes[i]);
    std::sort(steps.begin(), steps.end());
    std::int64_t covered = 1;  // elements spanned by the dims before
    for (const auto& [stride, size] : steps) {
      KTUNE_REQUIRE(stride >= covered, name() + ": y's view repeats an element (its strides overlap); each output "
                                                "element must be written once");
      covered = stride * (size - 1) + covered;
    }
  }

  /// A table (table_rows, cols) and random ids in [0, table_rows): gather_rows
  /// reads the table's rows into y; index_add adds x's rows into a random y.
  Workload table_workload(const Problem& p, std::mt19937_64& rng, DType dt) const {
    const std::int64_t rows = p.dim("rows"), cols = p.dim("cols"), table_rows = p.dim("table_rows");
    std::vector<std::int32_t> idx(static_cast<std::size_t>(rows));
    for (auto& i : idx) i = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(table_rows));
    const bool gather = kind_ == Kind::kGatherRows;
    const auto x =
        stored_as(dt, random_floats(rng, static_cast<std::size_t>((gather ? table_rows : rows) * cols), -2.f, 2.f));
    Workload w;
    w.buffers.push_back(input_buffer("x", dt, x));
    w.buffers.push_back(make_buffer("idx", Role::kInput, DType::kI32, idx));
    if (gather) {
      std::vector<double> y(static_cast<std::size_t>(rows * cols));
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c)
          y[static_cast<std::size_t>(r * cols + c)] =
              x[static_cast<std::size_t>(idx[static_cast<std::size_t>(r)] * cols + c)];
      w.buffers.push_back(output_buffer("y", dt, y));
      return w;
    }
    const auto y0 = stored_as(dt, random_floats(rng, static_cast<std::size_t>(table_rows * cols), -2.f, 2.f));
    std::vector<double> y = y0;
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c)
        y[static_cast<std::size_t>(idx[static_cast<std::size_t>(r)] * cols + c)] +=
            x[static_cast<std::size_t>(r * cols + c)];
    HostBuffer out = input_buffer("y", dt, y0);
    out.role = Role::kInOut;
    out.expected = output_buffer("y", dt, y).expected;
    out.tolerance = tolerance_for(p.dtype);
    w.buffers.push_back(std::move(out));
    return w;
  }

  /// Random a (and b) and a random y, the views of y replaced by the op's results.
  Workload strided_workload(const Problem& p, std::mt19937_64& rng, DType dt) const {
    const auto sizes = sizes_of(p);
    const View av = view_of(p, "a"), yv = view_of(p, "y");
    const View bv = kind_ == Kind::kStridedBinary ? view_of(p, "b") : View{};
    auto values = [&](std::int64_t n) {
      return stored_as(dt, random_floats(rng, static_cast<std::size_t>(n),
                                         op_ == static_cast<int>(Binary::kDiv) ? 0.5f : -2.f, 2.f));
    };
    const auto a = values(extent(sizes, av));
    const auto b = kind_ == Kind::kStridedBinary ? values(extent(sizes, bv)) : std::vector<double>{};
    const auto y0 = values(extent(sizes, yv));
    std::vector<double> y = y0;
    std::array<std::int64_t, 4> i{};
    for (i[0] = 0; i[0] < sizes[0]; ++i[0])
      for (i[1] = 0; i[1] < sizes[1]; ++i[1])
        for (i[2] = 0; i[2] < sizes[2]; ++i[2])
          for (i[3] = 0; i[3] < sizes[3]; ++i[3]) {
            const double x = a[static_cast<std::size_t>(element_at(i, av))];
            y[static_cast<std::size_t>(element_at(i, yv))] =
                kind_ == Kind::kStridedCopy
                    ? x
                    : binary_reference(static_cast<Binary>(op_), x, b[static_cast<std::size_t>(element_at(i, bv))]);
          }
    Workload w;
    w.buffers.push_back(input_buffer("a", dt, a));
    if (kind_ == Kind::kStridedBinary) w.buffers.push_back(input_buffer("b", dt, b));
    HostBuffer out = input_buffer("y", dt, y0);  // in-out: the elements outside y's view stay as they were
    out.role = Role::kInOut;
    out.expected = output_buffer("y", dt, y).expected;
    out.tolerance = tolerance_for(p.dtype);
    w.buffers.push_back(std::move(out));
    return w;
  }
  Kind kind_;
  int op_;
  Space space_;
};

template <std::size_t N>
std::array<Primitive, N> make_all(Kind kind) {
  return [kind]<std::size_t... I>(std::index_sequence<I...>) {
    return std::array<Primitive, N>{Primitive(kind, static_cast<int>(I))...};
  }(std::make_index_sequence<N>{});
}

const std::array<Primitive, kUnaryNames.size()>& unaries() {
  static const auto all = make_all<kUnaryNames.size()>(Kind::kUnary);
  return all;
}
const std::array<Primitive, kBinaryNames.size()>& binaries() {
  static const auto all = make_all<kBinaryNames.size()>(Kind::kBinary);
  return all;
}
const std::array<Primitive, kReduceNames.size()>& reductions() {
  static const auto all = make_all<kReduceNames.size()>(Kind::kRowReduce);
  return all;
}
const std::array<Primitive, kBinaryNames.size()>& strided_binaries() {
  static const auto all = make_all<kBinaryNames.size()>(Kind::kStridedBinary);
  return all;
}

}  // namespace

const PrimitiveFamily& unary_family(Unary op) { return unaries().at(static_cast<std::size_t>(op)); }
const PrimitiveFamily& binary_family(Binary op) { return binaries().at(static_cast<std::size_t>(op)); }
const PrimitiveFamily& row_reduce_family(Reduce op) { return reductions().at(static_cast<std::size_t>(op)); }
const PrimitiveFamily& col_sum_family() {
  static const Primitive f(Kind::kColSum, 0);
  return f;
}
const PrimitiveFamily& gather_family() {
  static const Primitive f(Kind::kGather, 0);
  return f;
}
const PrimitiveFamily& scatter_add_family() {
  static const Primitive f(Kind::kScatterAdd, 0);
  return f;
}
const PrimitiveFamily& causal_mask_family() {
  static const Primitive f(Kind::kCausalMask, 0);
  return f;
}
const PrimitiveFamily& strided_binary_family(Binary op) {
  return strided_binaries().at(static_cast<std::size_t>(op));
}
const PrimitiveFamily& strided_copy_family() {
  static const Primitive f(Kind::kStridedCopy, 0);
  return f;
}
const PrimitiveFamily& fill_family() {
  static const Primitive f(Kind::kFill, 0);
  return f;
}
const PrimitiveFamily& gather_rows_family() {
  static const Primitive f(Kind::kGatherRows, 0);
  return f;
}
const PrimitiveFamily& index_add_family() {
  static const Primitive f(Kind::kIndexAdd, 0);
  return f;
}

Problem strided_problem(const std::string& dtype, const std::array<std::int64_t, 4>& sizes, const View& a,
                        const std::optional<View>& b, const View& y) {
  Problem p{dtype, {}};
  for (std::size_t i = 0; i < 4; ++i) p.dims[fmt::format("d{}", i)] = sizes[i];
  auto add = [&](const char* o, const View& v) {
    p.dims[fmt::format("{}_offset", o)] = v.offset;
    for (std::size_t i = 0; i < 4; ++i) p.dims[fmt::format("{}{}", o, i)] = v.strides[i];
  };
  add("a", a);
  if (b) add("b", *b);
  add("y", y);
  return p;
}

std::vector<const Family*> primitive_families() {
  std::vector<const Family*> out;
  for (const auto& f : unaries()) out.push_back(&f);
  for (const auto& f : binaries()) out.push_back(&f);
  for (const auto& f : reductions()) out.push_back(&f);
  out.push_back(&col_sum_family());
  out.push_back(&gather_family());
  out.push_back(&scatter_add_family());
  out.push_back(&causal_mask_family());
  for (const auto& f : strided_binaries()) out.push_back(&f);
  out.push_back(&strided_copy_family());
  out.push_back(&fill_family());
  out.push_back(&gather_rows_family());
  out.push_back(&index_add_family());
  return out;
}

}  // namespace ktune::templates::eager
