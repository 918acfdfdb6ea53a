// Row families (rmsnorm, softmax, cross_entropy, embedding): a problem of
// `rows` rows of `columns` elements each (d_model, the scores' columns, the
// vocabulary), f32 or bf16 activations; each block runs threads / row_threads
// rows, row_threads threads per row reduce it together, vec elements per
// access (the device side: templates/common/rows.cuh). What such families
// share: the layout's parameters and constraints, the problem check, the
// launch over the rows with its buffers, and for families that hold a row in
// registers (rmsnorm, softmax) the share each thread holds, its bounds and
// the default layout.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "base/error.hpp"
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
/// shape.columns (rows * columns within kMaxTensorElements), and the
/// family's `extra` dims (which it checks itself).
void check_row_problem(const std::string& family, const Problem& problem, const RowShape& shape,
                       const std::vector<std::string>& extra = {});
/// The layout's constraints: the block limit, a row within a block, 16-byte
/// accesses, no threads idle for want of columns.
bool row_layout_valid(const Config& config, const Problem& problem, const DeviceLimits& device,
                      const RowShape& shape, std::string* why);

/// A buffer a row kernel takes, and the alignment (bytes) its accesses need.
struct RowBuffer {
  const char* name = "";
  std::uint64_t address = 0;
  std::int64_t align = 1;
};
/// row_launch with the kernel's leading arguments: each buffer's address, in
/// order (checked against its alignment; `accesses` says what needs it), then
/// rows (long long) and shape.columns (int). The family adds what follows.
Launch row_kernel_launch(const std::string& family, const Config& config, const Problem& problem,
                         const RowShape& shape, const std::vector<RowBuffer>& buffers, const char* accesses);

/// Rows held in registers: the vectors of its row each thread holds (the
/// templates' ITEMS), ceil(columns / (row_threads * vec)).
std::int64_t held_items(const Config& config, const Problem& problem, const char* columns);
/// Rows held in registers: columns a multiple of vec (no vector straddles
/// rows), at most `max_elements` held by each thread.
bool held_row_valid(const Config& config, const Problem& problem, const RowShape& shape, std::int64_t max_elements,
                    std::string* why);

/// A row family with run-time arguments `ArgsT`: the shared problem check and
/// layout constraints; a family adds its own through `is_valid_more`.
template <class ArgsT>
class RowFamily : public TypedFamily<ArgsT> {
 public:
  /// The default of a family whose rows are held in registers: the widest
  /// vector that divides the row, then the fewest threads per row that keep
  /// each thread's share within `small` elements (else within `max`); at
  /// least 256 threads per block; `default_more` sets the family's own
  /// parameters.
  Config held_default(const Problem& problem, std::int64_t small, std::int64_t max) const {
    const DeviceLimits any = DeviceLimits::for_arch("sm_80");
    for (std::int64_t limit : {small, max})
      for (std::int64_t vec : {8, 4, 2, 1})
        for (std::int64_t row_threads : this->space().param("row_threads").values) {
          const std::int64_t threads = std::max<std::int64_t>(256, row_threads);
          const Config c =
              default_more(Config({{"threads", threads}, {"row_threads", row_threads}, {"vec", vec}}), problem);
          if (vec * held_items(c, problem, shape().columns) <= limit && this->is_valid(c, problem, any, nullptr))
            return c;
        }
    throw_error(ErrorKind::kInternal, this->name() + ": no valid config for " + problem.key());
  }

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
  /// held_default's setting of the parameters a family adds to the layout's.
  virtual Config default_more(Config c, const Problem&) const { return c; }
};

}  // namespace ktune::templates
