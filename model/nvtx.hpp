// NVTX ranges (the NVIDIA Tools Extension, the toolkit's header-only nvtx3):
// named spans of the host's work that Nsight Systems (`nsys profile`) shows
// on its timeline and projects onto the GPU's kernels. Off unless a run asks
// for them (--nvtx): then each phase of a step (forward, backward, optimizer),
// each block's part of it and each op of the walk is a range, as PyTorch's
// emit_nvtx or llm.c's NVTX_RANGE_FN mark theirs. Without a tool attached, a
// range costs a call through NVTX's null hook.
#pragma once
#include <functional>
#include <string>
#include <type_traits>
#include <utility>

namespace ktune::model {

/// Turns the ranges on or off for the process.
void enable_nvtx_ranges(bool on);
bool nvtx_ranges_enabled();

/// For tests: called with each range's name as it opens (true) and closes
/// (false) while ranges are on; an empty function stops it.
void set_nvtx_observer(std::function<void(const std::string& name, bool open)> observer);

/// A range from construction to destruction, when ranges are on; its name is
/// made only then (a callable returning it, or a string).
class NvtxRange {
 public:
  template <class Name>
  explicit NvtxRange(Name&& name) {
    if (!nvtx_ranges_enabled()) return;
    if constexpr (std::is_invocable_v<Name>)
      open(name());
    else
      open(std::forward<Name>(name));
  }
  ~NvtxRange() {
    if (open_) close();
  }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;

 private:
  void open(std::string name);
  void close();
  bool open_ = false;
  std::string name_;
};

}  // namespace ktune::model
