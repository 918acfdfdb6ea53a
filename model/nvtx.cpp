#include "model/nvtx.hpp"

#include <nvtx3/nvToolsExt.h>

#include <atomic>
#include <mutex>
#include <utility>

namespace ktune::model {

namespace {

std::atomic<bool> g_enabled{false};
std::mutex g_observer_mutex;
std::function<void(const std::string&, bool)> g_observer;

void observe(const std::string& name, bool open) {
  const std::lock_guard lock(g_observer_mutex);
  if (g_observer) g_observer(name, open);
}

}  // namespace

void enable_nvtx_ranges(bool on) { g_enabled = on; }
bool nvtx_ranges_enabled() { return g_enabled; }

void set_nvtx_observer(std::function<void(const std::string& name, bool open)> observer) {
  const std::lock_guard lock(g_observer_mutex);
  g_observer = std::move(observer);
}

void NvtxRange::open(std::string name) {
  name_ = std::move(name);
  nvtxRangePushA(name_.c_str());
  open_ = true;
  observe(name_, true);
}

void NvtxRange::close() {
  nvtxRangePop();
  observe(name_, false);
}

}  // namespace ktune::model
