// The token embedding families, forward (gather) and backward (deterministic
// sorted or scanned, or atomic scatter-add): spaces, constraints, rendering, launch
// plans, workloads with their CPU reference, FLOP/byte counts.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "base/error.hpp"
#include "templates/common/family_helpers.hpp"
#include "templates/common/row_family.hpp"
#include "templates/embedding/embedding.hpp"
#include "templates/render.hpp"

namespace ktune::templates::embedding {
namespace {

constexpr const char* kTemplate = "embedding/embedding.cuh";
constexpr const char* kVectorAccesses = "the config's vector accesses";
constexpr const char* kElements = "int32 elements";
constexpr std::int64_t kZeroBlocksPerSm = 8;  // grid cap of the atomic variant's clearing launch

/// Token ids as text has them: Zipf's law (the k-th commonest id's share ~ 1 / k), the commonest ids first, as a
/// BPE vocabulary numbers its merges. Id r has probability ln((r + 2) / (r + 1)) / ln(vocab + 1) (the continuous
/// law, sampled exactly): at vocab 50257 id 0 is 6.4 % of the tokens (English text's "the": 5-7 %) and the ten
/// commonest ids 22 %, so the backward is timed on the long sums and contended atomics of frequent tokens, which
/// uniform ids (1 / vocab each) never show.
std::vector<std::int32_t> random_tokens(std::mt19937_64& rng, std::int64_t rows, std::int64_t vocab) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double log_span = std::log(static_cast<double>(vocab) + 1.0);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(rows));
  for (auto& t : tokens) {
    const double rank = std::floor(std::exp(u(rng) * log_span)) - 1.0;  // in [0, vocab), up to rounding
    t = static_cast<std::int32_t>(std::clamp(rank, 0.0, static_cast<double>(vocab - 1)));
  }
  return tokens;
}

/// What both families share beyond the row layout: problems, the check, the default.
template <class ArgsT>
class EmbeddingFamily : public RowFamily<ArgsT> {
 public:
  std::vector<std::string> source_files() const override { return {kTemplate}; }

  std::vector<Problem> problem_classes() const override {
    // Ragged: 37, 45, 67 tokens leave the last block short; 100 and 77
    // columns end inside a vector of most widths; small vocabularies repeat
    // ids (7 ids over 300 tokens: long runs for the backward's sums).
    return {Problem{"f32", {{"rows", 37}, {"dim", 100}, {"vocab", 50}}},
            Problem{"bf16", {{"rows", 45}, {"dim", 77}, {"vocab", 1000}}},
            Problem{"bf16", {{"rows", 67}, {"dim", 768}, {"vocab", 97}}},
            Problem{"f32", {{"rows", 300}, {"dim", 36}, {"vocab", 7}}}};
  }

  void check_problem(const Problem& p) const override {
    check_row_problem(this->name(), p, shape(), {"vocab"});
    KTUNE_REQUIRE(p.dims.count("vocab") && p.dim("vocab") >= 1 && p.dim("vocab") <= (1LL << 31) - 2,
                  this->name() + ": dimension 'vocab' must be given, in 1..2^31-2 (token ids are int32)");
    require_elements_within(this->name(), p, {"vocab", "dim"}, "the (vocab, dim) table");
  }

  Config default_config(const Problem& p) const override {
    // The widest vector that divides the row, a warp per row where the row is
    // long enough, 256 threads per block.
    const DeviceLimits any = DeviceLimits::for_arch("sm_80");
    for (std::int64_t vec : {8, 4, 2, 1})
      for (std::int64_t row_threads : {32, 16, 8, 64, 128, 256})
        if (Config c = default_more(
                Config({{"threads", 256}, {"row_threads", row_threads}, {"vec", vec}}));
            this->is_valid(c, p, any, nullptr))
          return c;
    throw_error(ErrorKind::kInternal, this->name() + ": no valid config for " + p.key());
  }

 protected:
  static std::vector<Param> embedding_params() {
    return row_params("threads per row: a row moves in steps of row_threads x vec elements; more threads per row "
                      "for long rows, fewer for short ones");
  }
  RowShape shape() const override {
    return {"dim", "elements", kMaxDim, "2^20", "a row's vectors are indexed with 32-bit ints",
            "bf16 table, out and d_out; int32 tokens; fp32 d_table and sums"};
  }
  bool is_valid_more(const Config& c, const Problem& p, const DeviceLimits&, std::string* why) const override {
    if (p.dim("dim") % c.at("vec") != 0)
      return reject(why, fmt::format("dim {} is not a multiple of vec {}: vector accesses would straddle rows",
                                     p.dim("dim"), c.at("vec")));
    return true;
  }
  /// The default of the parameters a family adds.
  virtual Config default_more(Config c) const { return c; }

  /// THREADS, ROW_THREADS, VEC, (`more`,) T of the row kernels.
  static std::string template_args(const Config& c, const Problem& p, const std::string& more = "") {
    return fmt::format("{}, {}, {}, {}{}", c.at("threads"), c.at("row_threads"), c.at("vec"),
                       more.empty() ? "" : more + ", ", activation_type(p));
  }
  /// Blocks over `rows` rows of the config's layout.
  static unsigned row_blocks(const Config& c, std::int64_t rows) {
    return static_cast<unsigned>(ceil_div(rows, rows_per_block(c)));
  }
};

// ---- embedding_fwd ----------------------------------------------------------------

class Forward final : public EmbeddingFamily<ForwardArgs> {
 public:
  Forward() : space_(embedding_params()) {}

  std::string name() const override { return "embedding_fwd"; }
  std::string summary() const override {
    return "token embedding gather: out[t] = table[tokens[t]] (NaN rows for ids outside the vocabulary)";
  }
  const Space& space() const override { return space_; }

  Rendered render(const Config& c, const Problem& p) const override {
    return render_template(kTemplate, {"embedding::embedding_fwd<" + template_args(c, p) + ">"}, name());
  }

  std::vector<BufferShape> buffer_shapes(const Problem& p) const override {
    check_problem(p);
    const std::int64_t rows = p.dim("rows"), dim = p.dim("dim");
    return {buffer_shape("tokens", Role::kInput, DType::kI32, rows),
            buffer_shape("table", Role::kInput, activation_dtype(p), p.dim("vocab") * dim),
            buffer_shape("out", Role::kOutput, activation_dtype(p), rows * dim)};
  }

  Workload make_workload(const Problem& p, std::uint64_t seed) const override {
    check_problem(p);
    const std::int64_t rows = p.dim("rows"), dim = p.dim("dim"), vocab = p.dim("vocab");
    std::mt19937_64 rng(seed);
    const auto tokens = random_tokens(rng, rows, vocab);
    const auto table =
        stored_as(activation_dtype(p), random_floats(rng, static_cast<std::size_t>(vocab * dim), -1.f, 1.f));
    std::vector<double> out(static_cast<std::size_t>(rows * dim));
    embedding_forward<double>(tokens.data(), table.data(), out.data(), rows, dim, vocab);
    Workload w;
    w.buffers.push_back(make_buffer("tokens", Role::kInput, DType::kI32, tokens));
    w.buffers.push_back(input_buffer("table", activation_dtype(p), table));
    w.buffers.push_back(output_buffer("out", activation_dtype(p), out));
    w.buffers.back().tolerance = 0.0;  // a gather copies: exact
    return w;
  }

  ForwardArgs args_of(const Problem&, const std::vector<std::uint64_t>& a) const override {
    require_addresses(name(), a, {"tokens", "table", "out"});
    return {.tokens = a[0], .table = a[1], .out = a[2]};
  }

  std::vector<Launch> plan(const Config& c, const Problem& p, const ForwardArgs& a,
                           const DeviceLimits&) const override {
    check_problem(p);
    const std::int64_t align = c.at("vec") * activation_bytes(p);
    require_aligned(name(), "tokens", a.tokens, 4, kElements);
    require_aligned(name(), "table", a.table, align, kVectorAccesses);
    require_aligned(name(), "out", a.out, align, kVectorAccesses);
    Launch l = row_launch(c, p);
    l.args.add(a.tokens).add(a.table).add(a.out);
    l.args.add(static_cast<long long>(p.dim("rows"))).add(static_cast<int>(p.dim("dim")))
        .add(static_cast<int>(p.dim("vocab")));
    std::vector<Launch> launches;
    launches.push_back(std::move(l));
    return launches;
  }

  double flops(const Problem&) const override { return 0.0; }  // a copy
  double bytes(const Problem& p) const override {               // tokens; read and write each row
    const double rows = static_cast<double>(p.dim("rows")), dim = static_cast<double>(p.dim("dim"));
    return 4.0 * rows + 2.0 * static_cast<double>(activation_bytes(p)) * rows * dim;
  }

 private:
  Space space_;
};

// ---- embedding_bwd ----------------------------------------------------------------

class Backward final : public EmbeddingFamily<BackwardArgs> {
 public:
  Backward() : space_(with_deterministic(embedding_params())) {}

  std::string name() const override { return "embedding_bwd"; }
  std::string summary() const override {
    return "token embedding backward: d_table rows summed from d_out in token order (sorted, or a warp per row "
           "scanning the tokens) or with fp32 atomics";
  }
  const Space& space() const override { return space_; }

  Rendered render(const Config& c, const Problem& p) const override {
    if (scan(c))
      return render_template(
          kTemplate,
          {"embedding::embedding_scan<" +
           template_args(c, p, fmt::format("{}, {}", method(c) == kScanZeroFirst ? "true" : "false", c.at("cols"))) +
           ">"},
          name());
    if (method(c) == kSorted)
      return render_template(kTemplate,
                             {fmt::format("embedding::embedding_index<{}>", c.at("threads")),
                              "embedding::embedding_rows<" + template_args(c, p, std::to_string(c.at("cols"))) + ">"},
                             name());
    return render_template(kTemplate,
                           {fmt::format("embedding::embedding_zero<{}>", c.at("threads")),
                            "embedding::embedding_scatter<" + template_args(c, p) + ">"},
                           name());
  }

  std::vector<BufferShape> buffer_shapes(const Problem& p) const override {
    check_problem(p);
    const std::int64_t rows = p.dim("rows"), dim = p.dim("dim");
    return {buffer_shape("tokens", Role::kInput, DType::kI32, rows),
            buffer_shape("d_out", Role::kInput, activation_dtype(p), rows * dim),
            buffer_shape("d_table", Role::kOutput, DType::kF32, p.dim("vocab") * dim),
            buffer_shape("scratch", Role::kScratch, DType::kI32, scratch_ints(p))};
  }

  Workload make_workload(const Problem& p, std::uint64_t seed) const override {
    check_problem(p);
    const std::int64_t rows = p.dim("rows"), dim = p.dim("dim"), vocab = p.dim("vocab");
    std::mt19937_64 rng(seed);
    const auto tokens = random_tokens(rng, rows, vocab);
    const auto d_out =
        stored_as(activation_dtype(p), random_floats(rng, static_cast<std::size_t>(rows * dim), -1.f, 1.f));
    std::vector<double> d_table(static_cast<std::size_t>(vocab * dim), 0.0);
    embedding_backward<double>(tokens.data(), d_out.data(), d_table.data(), rows, dim, 0, dim);
    Workload w;
    w.buffers.push_back(make_buffer("tokens", Role::kInput, DType::kI32, tokens));
    w.buffers.push_back(input_buffer("d_out", activation_dtype(p), d_out));
    w.buffers.push_back(output_buffer("d_table", DType::kF32, d_table));
    w.buffers.push_back(make_buffer("scratch", Role::kScratch, DType::kI32,
                                    std::vector<std::int32_t>(static_cast<std::size_t>(scratch_ints(p)))));
    return w;
  }

  BackwardArgs args_of(const Problem&, const std::vector<std::uint64_t>& a) const override {
    require_addresses(name(), a, {"tokens", "d_out", "d_table", "scratch"});
    return {.tokens = a[0], .d_out = a[1], .d_table = a[2], .workspace = a[3]};
  }

  /// The sorted variant's starts, cursors and token index; the atomic one needs none.
  std::size_t workspace_bytes(const Config& c, const Problem& p) const override {
    return method(c) == kSorted ? static_cast<std::size_t>(scratch_ints(p)) * sizeof(std::int32_t) : 0;
  }

  std::vector<Launch> plan(const Config& c, const Problem& p, const BackwardArgs& a,
                           const DeviceLimits& device) const override {
    check_problem(p);
    const std::int64_t rows = p.dim("rows"), dim = p.dim("dim"), vocab = p.dim("vocab"), vec = c.at("vec");
    require_aligned(name(), "tokens", a.tokens, 4, kElements);
    require_aligned(name(), "d_out", a.d_out, vec * activation_bytes(p), kVectorAccesses);
    require_aligned(name(), "d_table", a.d_table, std::min<std::int64_t>(16, 4 * vec), kVectorAccesses);
    const auto threads = static_cast<unsigned>(c.at("threads"));
    if (scan(c)) {
      std::vector<Launch> launches(1);
      launches[0].grid = {row_blocks(c, vocab), 1, 1};
      launches[0].block = {threads, 1, 1};
      launches[0].args.add(a.tokens).add(a.d_out).add(a.d_table);
      launches[0].args.add(static_cast<int>(rows)).add(static_cast<int>(dim)).add(static_cast<int>(vocab));
      return launches;
    }
    std::vector<Launch> launches(2);
    if (method(c) == kSorted) {
      KTUNE_REQUIRE(a.workspace != 0,
                    fmt::format("{}: no workspace given; the config needs {} bytes (workspace_bytes)", name(),
                                workspace_bytes(c, p)));
      require_aligned(name(), "workspace", a.workspace, 4, kElements);
      const std::uint64_t starts = a.workspace, cursor = starts + 4 * static_cast<std::uint64_t>(vocab + 1),
                          index = cursor + 4 * static_cast<std::uint64_t>(vocab);
      launches[0].kernel = 0;
      launches[0].grid = {1, 1, 1};
      launches[0].block = {threads, 1, 1};
      launches[0].args.add(a.tokens).add(starts).add(cursor).add(index);
      launches[0].args.add(static_cast<int>(rows)).add(static_cast<int>(vocab));
      launches[1].kernel = 1;
      launches[1].grid = {row_blocks(c, vocab), 1, 1};
      launches[1].block = {threads, 1, 1};
      launches[1].args.add(a.d_out).add(starts).add(index).add(a.d_table);
      launches[1].args.add(static_cast<int>(dim)).add(static_cast<int>(vocab));
    } else {
      launches[0].kernel = 0;
      launches[0].grid = {grid_stride_blocks(ceil_div(vocab * dim, threads), kZeroBlocksPerSm, device), 1, 1};
      launches[0].block = {threads, 1, 1};
      launches[0].args.add(a.d_table).add(static_cast<long long>(vocab * dim));
      launches[1].kernel = 1;
      launches[1].grid = {row_blocks(c, rows), 1, 1};
      launches[1].block = {threads, 1, 1};
      launches[1].args.add(a.tokens).add(a.d_out).add(a.d_table);
      launches[1].args.add(static_cast<long long>(rows)).add(static_cast<int>(dim)).add(static_cast<int>(vocab));
    }
    return launches;
  }

  std::vector<Config> candidates(const Problem& p) const override {
    // At the scan default an H200 took 1.9-2.7x the floor, slower than the
    // eager chain (zero, atomic scatter) at ctx 256: a block stores its rows,
    // most of them zeros, only after its walk. The rows zeroed first; and
    // wider blocks, which own more rows each: fewer blocks walk the tokens
    // (vocab / 32 of 1024 threads, not vocab / 8), each in fewer tiles of
    // THREADS tokens (one tile at 1024 tokens a step), so the walk, a chain
    // of latencies repeated by every block, is paid fewer times.
    const Config def = default_config(p);
    if (method(def) != kScan) return {};
    // Then two and four columns a lane a pass over a row's tokens: a row of
    // dim 2560 took ten dependent passes at one (not measured on a GPU yet).
    return {with(def, {{"deterministic", kScanZeroFirst}}),
            with(def, {{"deterministic", kScanZeroFirst}, {"threads", 1024}}),
            with(def, {{"deterministic", kScanZeroFirst}, {"threads", 512}}),
            with(def, {{"threads", 1024}}),
            with(def, {{"deterministic", kScanZeroFirst}, {"cols", 2}}),
            with(def, {{"deterministic", kScanZeroFirst}, {"cols", 4}})};
  }

  bool deterministic(const Config& c) const override { return method(c) != kAtomic; }

  double flops(const Problem& p) const override {  // one add per element of d_out
    return static_cast<double>(p.dim("rows")) * static_cast<double>(p.dim("dim"));
  }
  double bytes(const Problem& p) const override {  // tokens; read d_out; write d_table
    const double rows = static_cast<double>(p.dim("rows")), dim = static_cast<double>(p.dim("dim"));
    return 4.0 * rows + static_cast<double>(activation_bytes(p)) * rows * dim +
           4.0 * static_cast<double>(p.dim("vocab")) * dim;
  }

 protected:
  Config default_more(Config c) const override {
    // Reproducible unless tuning finds the atomics faster: the scan where a
    // warp per row fits the layout (one launch, no one-block sort), else the sort.
    c.set("deterministic", c.at("row_threads") == 32 ? kScan : kSorted);
    c.set("cols", 1);
    return c;
  }
  bool is_valid_more(const Config& c, const Problem& p, const DeviceLimits& device,
                     std::string* why) const override {
    if (scan(c) && c.at("row_threads") != 32)
      return reject(why, fmt::format("deterministic {} (the scan) gives each d_table row one warp: row_threads "
                                     "must be 32, not {}",
                                     method(c), c.at("row_threads")));
    if (method(c) == kAtomic && c.at("cols") != 1)
      return reject(why, fmt::format("cols {} is for the deterministic sums (deterministic 1, 2 and 3): the atomics "
                                     "add each d_out row as it comes",
                                     c.at("cols")));
    // The scan holds a block an SM (its launch bound): 64 registers a thread at 1024 threads, which four
    // columns' sums and loads of 16-byte vectors overrun (ptxas spills at sm_80).
    if (scan(c) && c.at("threads") == 1024 && c.at("cols") == 4 && c.at("vec") * activation_bytes(p) == 16)
      return reject(why, "the scan at 1024 threads has 64 registers a thread, which four columns of 16-byte "
                         "vectors overrun (their sums and loads): it would spill; fewer threads or cols");
    return EmbeddingFamily::is_valid_more(c, p, device, why);
  }

 private:
  // How d_table's rows are summed (the "deterministic" parameter).
  static constexpr std::int64_t kAtomic = 0, kSorted = 1, kScan = 2, kScanZeroFirst = 3;
  static std::int64_t method(const Config& c) { return c.at("deterministic"); }
  static bool scan(const Config& c) { return method(c) == kScan || method(c) == kScanZeroFirst; }
  static std::vector<Param> with_deterministic(std::vector<Param> params) {
    params.push_back({"deterministic", {kAtomic, kSorted, kScan, kScanZeroFirst},
                      "how d_table's rows are summed. 0: fp32 atomicAdd per element (no workspace, contention on "
                      "repeated ids, last bits vary); 1: a stable sort of the tokens in one block, then one pass per "
                      "vocabulary row (a workspace); 2: a warp per vocabulary row gathers its tokens' positions "
                      "from one walk of the tokens per block (one launch, no workspace; every block reads all "
                      "tokens); 3: 2 with each warp's row zeroed before the walk (the stores of rows without "
                      "tokens overlap it; rows with tokens are written twice). 1, 2 and 3 sum in token order: "
                      "bit-identical across runs and to each other"});
    params.push_back({"cols", {1, 2, 4},
                      "columns (vectors) of a d_table row a thread of the deterministic sums adds in one pass over "
                      "the row's tokens: their loads in flight together vs registers; the sums the same whatever "
                      "it is"});
    return params;
  }
  Space space_;
};

}  // namespace

std::int64_t scratch_ints(const Problem& p) { return 2 * p.dim("vocab") + 1 + p.dim("rows"); }

const ForwardFamily& forward_family() {
  static const Forward f;
  return f;
}
const BackwardFamily& backward_family() {
  static const Backward f;
  return f;
}

}  // namespace ktune::templates::embedding
