// Row families (rmsnorm, cross_entropy): a problem of `rows` rows of
// `columns` elements each (d_model, the vocabulary), f32 or bf16
// activations; each block runs threads / row_threads rows, row_threads
// threads per row reduce it together, vec elements per access. What such
// families share: the layout's parameters and constraints, the problem check
// and the grid over the rows.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "templates/family.hpp"

namespace ktune::templates {

/// What a row family's problems look like.
struct RowShape {
  const char* columns = "";      ///< the dimension that is a row's length ("dim", "vocab")
  const char* elements = "";     ///< what a row holds, for messages ("elements", "logits")
  std::int64_t max_columns = 0;  ///< the longest row the kernels take
  std::string max_columns_text;  ///< max_columns as messages write it ("2^30")
  std::string max_columns_why;   ///< why that bound ("column indices are 32-bit")
  std::string dtypes;            ///< what bf16 means for the family's buffers, for messages
};

/// The smallest `row_threads` of the space: the constraint against idle
/// threads spares it, as there is no smaller choice to fall back to.
inline constexpr std::int64_t kMinRowThreads = 8;

/// threads, row_threads and vec; `row_threads_tradeoff` says what threads per
/// row buy in the family's kernel.
std::vector<Param> row_params(const char* row_threads_tradeoff);
/// Rows of one block.
std::int64_t rows_per_block(const Config& config);
/// One launch of `config`'s layout over the problem's rows (grid and block; no arguments).
Launch row_launch(const Config& config, const Problem& problem);
/// check_problem of a row family: dtype f32 or bf16, dims rows and
/// shape.columns, and the family's `extra` dims (which it checks itself).
void check_row_problem(const std::string& family, const Problem& problem, const RowShape& shape,
                       const std::vector<std::string>& extra = {});
/// The layout's constraints: the block limit, a row within a block, 16-byte
/// accesses, no threads idle for want of columns.
bool row_layout_valid(const Config& config, const Problem& problem, const DeviceLimits& device,
                      const RowShape& shape, std::string* why);

/// A row family with run-time arguments `ArgsT`: the shared problem check and
/// layout constraints; a family adds its own through `is_valid_more`.
template <class ArgsT>
class RowFamily : public TypedFamily<ArgsT> {
 public:
  void check_problem(const Problem& problem) const override {
    check_row_problem(this->name(), problem, shape());
  }
  bool is_valid(const Config& config, const Problem& problem, const DeviceLimits& device,
                std::string* why) const override {
    return row_layout_valid(config, problem, device, shape(), why) && is_valid_more(config, problem, device, why);
  }

 protected:
  virtual RowShape shape() const = 0;
  /// The constraints of the family's own kernel and parameters.
  virtual bool is_valid_more(const Config&, const Problem&, const DeviceLimits&, std::string*) const { return true; }
};

}  // namespace ktune::templates
