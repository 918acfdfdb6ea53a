// Test helper: compiles a probe source (kt.cuh + kernels written in the test)
// through the emulation backend and launches its kernels on guarded buffers.
#pragma once
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "templates/embedded.hpp"
#include "templates/family.hpp"
#include "tuner/emu/grid.hpp"
#include "tuner/emu/memory.hpp"
#include "tuner/emu/module.hpp"

namespace ktune::test {

class EmuProbe {
 public:
  /// `body`: kernels written against `header` (kt.cuh, or a header that
  /// includes it); `kernels`: their name expressions.
  EmuProbe(const std::string& body, std::vector<std::string> kernels, unsigned workers = 2,
           env::EmuSchedule schedule = env::emu_schedule(), const std::string& header = "common/kt.cuh",
           unsigned hang_seconds = env::emu_hang_seconds())
      : executor_(workers, schedule, hang_seconds) {
    templates::Rendered r;
    r.source = "// probe\n" + templates::expand_includes(header) + body;
    r.kernels = std::move(kernels);
    module_ = tuner::emu::load_module(r);
  }

  /// A guarded buffer holding `values`; returns its device pointer.
  template <class T>
  T* buffer(const std::string& name, const std::vector<T>& values) {
    auto& b = buffers_.emplace_back(std::make_unique<tuner::emu::GuardedBuffer>(name, values.size() * sizeof(T)));
    if (!values.empty()) std::memcpy(b->data(), values.data(), values.size() * sizeof(T));
    return reinterpret_cast<T*>(b->data());
  }

  /// `n` elements at `p` (a pointer from buffer()).
  template <class T>
  std::vector<T> read(const T* p, std::size_t n) const {
    return std::vector<T>(p, p + n);
  }

  /// Runs kernel `kernel` (index into the name expressions); throws on emulation errors.
  tuner::emu::GridStats launch(int kernel, std::array<unsigned, 3> grid, std::array<unsigned, 3> block,
                               templates::ArgPack args, unsigned dynamic_smem = 0) {
    auto pointers = args.pointers();
    tuner::emu::GridLaunch l;
    l.module = module_.get();
    l.kernel = kernel;
    l.grid = grid;
    l.block = block;
    l.dynamic_smem = dynamic_smem;
    l.args = pointers.data();
    for (auto& b : buffers_) l.regions.push_back(&b->region());
    return executor_.run(l);
  }

  /// The error message of a launch that must fail ("" if it did not).
  std::string launch_error(int kernel, std::array<unsigned, 3> grid, std::array<unsigned, 3> block,
                           templates::ArgPack args, unsigned dynamic_smem = 0) {
    try {
      launch(kernel, grid, block, std::move(args), dynamic_smem);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  }

 private:
  tuner::emu::GridExecutor executor_;
  std::shared_ptr<const tuner::emu::Module> module_;
  std::vector<std::unique_ptr<tuner::emu::GuardedBuffer>> buffers_;
};

}  // namespace ktune::test
