#include "cli/table.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace ktune::cli {
namespace {

/// Display width: UTF-8 continuation bytes take no column.
std::size_t width_of(const std::string& s) {
  return static_cast<std::size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

}  // namespace

Table::Table(std::vector<Column> columns) : columns_(std::move(columns)) {}

void Table::add(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  rows_.push_back(std::move(cells));
}

std::string Table::str() const {
  std::vector<std::size_t> width(columns_.size());
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    width[c] = std::max<std::size_t>(3, width_of(columns_[c].title));
    for (const auto& row : rows_) width[c] = std::max(width[c], width_of(row[c]));
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out = "|";
    for (std::size_t c = 0; c < cells.size(); ++c) {
      const std::string pad(width[c] - width_of(cells[c]), ' ');
      out += " " + (columns_[c].right ? pad + cells[c] : cells[c] + pad) + " |";
    }
    return out + "\n";
  };
  std::vector<std::string> titles;
  for (const auto& col : columns_) titles.push_back(col.title);
  std::string out = line(titles) + "|";
  for (std::size_t c = 0; c < columns_.size(); ++c)
    out += columns_[c].right ? std::string(width[c] + 1, '-') + ":|" : std::string(width[c] + 2, '-') + "|";
  out += "\n";
  for (const auto& row : rows_) out += line(row);
  return out;
}

}  // namespace ktune::cli
