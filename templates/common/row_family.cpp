// What the row families share (row_family.hpp).
#include "templates/common/row_family.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "base/error.hpp"
#include "templates/common/family_helpers.hpp"

namespace ktune::templates {

std::vector<Param> row_params(const char* row_threads_tradeoff) {
  return {{"threads", {64, 128, 256, 512, 1024}, "threads per block: more rows per block vs more blocks in flight"},
          {"row_threads", {kMinRowThreads, 16, 32, 64, 128, 256, 512, 1024}, row_threads_tradeoff},
          {"vec", {1, 2, 4, 8}, "elements per access (up to 16 bytes): wider loads, fewer instructions"}};
}

std::int64_t rows_per_block(const Config& c) { return c.at("threads") / c.at("row_threads"); }

Launch row_launch(const Config& c, const Problem& p) {
  Launch l;
  l.grid = {static_cast<unsigned>(ceil_div(p.dim("rows"), rows_per_block(c))), 1, 1};
  l.block = {static_cast<unsigned>(c.at("threads")), 1, 1};
  return l;
}

void check_row_problem(const std::string& family, const Problem& p, const RowShape& shape,
                       const std::vector<std::string>& extra) {
  KTUNE_REQUIRE(p.dtype == "f32" || p.dtype == "bf16",
                fmt::format("{}: dtype '{}' is not supported; accepted: f32, bf16 ({})", family, p.dtype,
                            shape.dtypes));
  for (const auto& [k, v] : p.dims)
    KTUNE_REQUIRE(k == "rows" || k == shape.columns || std::find(extra.begin(), extra.end(), k) != extra.end(),
                  fmt::format("{}: unknown dimension '{}'; accepted: rows, {}{}", family, k, shape.columns,
                              extra.empty() ? "" : ", " + fmt::format("{}", fmt::join(extra, ", "))));
  KTUNE_REQUIRE(p.dims.count("rows") && p.dim("rows") >= 1 && p.dim("rows") <= (1LL << 31) - 1,
                family + ": dimension 'rows' (tokens) must be in 1..2^31-1");
  KTUNE_REQUIRE(p.dims.count(shape.columns) && p.dim(shape.columns) >= 1 &&
                    p.dim(shape.columns) <= shape.max_columns,
                fmt::format("{}: dimension '{}' must be in 1..{} ({})", family, shape.columns, shape.max_columns_text,
                            shape.max_columns_why));
  require_elements_within(family, p, {"rows", shape.columns},
                          fmt::format("the (rows, {}) {}", shape.columns, shape.elements));
}

bool row_layout_valid(const Config& c, const Problem& p, const DeviceLimits& d, const RowShape& shape,
                      std::string* why) {
  const std::int64_t threads = c.at("threads"), row_threads = c.at("row_threads"), vec = c.at("vec");
  const std::int64_t columns = p.dim(shape.columns);
  if (threads > d.max_threads_per_block) return reject(why, "threads exceed the device's block limit");
  if (row_threads > threads) return reject(why, "a row's threads must fit in one block (row_threads <= threads)");
  if (vec * activation_bytes(p) > 16)
    return reject(why, fmt::format("a vector access is at most 16 bytes: vec <= {} for {}", 16 / activation_bytes(p),
                                   p.dtype));
  if (row_threads > kMinRowThreads && row_threads / 2 * vec >= columns)
    return reject(why, fmt::format("half of each row's threads or more would get no vector of the {} {}: lower "
                                   "row_threads or vec",
                                   columns, shape.elements));
  return true;
}

Launch row_kernel_launch(const std::string& family, const Config& c, const Problem& p, const RowShape& shape,
                         const std::vector<RowBuffer>& buffers, const char* accesses) {
  Launch l = row_launch(c, p);
  for (const RowBuffer& b : buffers) {
    require_aligned(family, b.name, b.address, b.align, accesses);
    l.args.add(b.address);
  }
  l.args.add(static_cast<long long>(p.dim("rows"))).add(static_cast<int>(p.dim(shape.columns)));
  return l;
}

std::int64_t held_items(const Config& c, const Problem& p, const char* columns) {
  return ceil_div(p.dim(columns), c.at("row_threads") * c.at("vec"));
}

bool held_row_valid(const Config& c, const Problem& p, const RowShape& shape, std::int64_t max_elements,
                    std::string* why) {
  const std::int64_t vec = c.at("vec"), columns = p.dim(shape.columns);
  if (columns % vec != 0)
    return reject(why, fmt::format("{} {} is not a multiple of vec {}: vector accesses would straddle rows",
                                   shape.columns, columns, vec));
  const std::int64_t held = vec * held_items(c, p, shape.columns);
  if (held > max_elements)
    return reject(why, fmt::format("each thread would hold {} elements of its row in registers (at most {}): raise "
                                   "row_threads or vec",
                                   held, max_elements));
  return true;
}

}  // namespace ktune::templates
