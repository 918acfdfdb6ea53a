// What the NVTX tests record: the ranges a run opens and closes, seen
// through model::set_nvtx_observer.
#pragma once
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "model/nvtx.hpp"

namespace ktune::test {

/// A range as it opened: its name and how many ranges held it.
struct OpenedRange {
  std::string name;
  std::size_t depth;
};

/// Records the ranges opened while it lives, checking that each closes in
/// the reverse order of opening; ranges on while it lives, off after.
class NvtxRecorder {
 public:
  NvtxRecorder() {
    model::set_nvtx_observer([this](const std::string& name, bool open) {
      if (open) {
        opened.push_back({name, stack_.size()});
        stack_.push_back(name);
        return;
      }
      if (stack_.empty() || stack_.back() != name) mismatched.push_back(name);
      if (!stack_.empty()) stack_.pop_back();
    });
  }
  ~NvtxRecorder() {
    model::set_nvtx_observer({});
    model::enable_nvtx_ranges(false);
  }
  NvtxRecorder(const NvtxRecorder&) = delete;
  NvtxRecorder& operator=(const NvtxRecorder&) = delete;

  /// Every range closed, each in turn.
  bool balanced() const { return stack_.empty() && mismatched.empty(); }
  /// The names of the outermost ranges, in order.
  std::vector<std::string> outermost() const {
    std::vector<std::string> out;
    for (const auto& r : opened)
      if (r.depth == 0) out.push_back(r.name);
    return out;
  }
  /// Ranges whose name starts with `prefix`, at `depth`.
  std::size_t count_at(const std::string& prefix, std::size_t depth) const {
    std::size_t n = 0;
    for (const auto& r : opened) n += r.name.rfind(prefix, 0) == 0 && r.depth == depth;
    return n;
  }

  std::vector<OpenedRange> opened;
  std::vector<std::string> mismatched;  ///< ranges closed out of turn

 private:
  std::vector<std::string> stack_;
};

}  // namespace ktune::test
