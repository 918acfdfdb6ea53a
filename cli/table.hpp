// Tables a person reads: columns sized to their content (never a fixed width
// that long configs overflow), numbers right-aligned, in markdown's pipe form
// so a table pastes into a report as it is.
#pragma once
#include <string>
#include <vector>

namespace ktune::cli {

class Table {
 public:
  struct Column {
    std::string title;
    bool right = false;  ///< right-aligned (numbers)
  };
  explicit Table(std::vector<Column> columns);

  /// One row, a cell per column (missing cells are empty).
  void add(std::vector<std::string> cells);
  std::size_t rows() const { return rows_.size(); }
  /// The header, the rule and the rows, each line ending in '\n'.
  std::string str() const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace ktune::cli
