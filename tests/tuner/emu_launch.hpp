// Running a family's launch plan on caller-made emulation buffers, for tests
// that need what the emulation runner's own workloads never do (misaligned
// pointers, aliased buffers, a forced grid, a chosen number of workers).
#pragma once
#include <memory>
#include <vector>

#include "templates/family.hpp"
#include "tuner/emu_grid.hpp"
#include "tuner/emu_memory.hpp"
#include "tuner/emu_module.hpp"

namespace ktune::test {

/// Runs every launch of `launches` from `module`, in order, on `workers` OS
/// threads; `buffers` are the regions the kernels may touch.
inline void run_emulated(const tuner::emu::Module& module, std::vector<templates::Launch>& launches,
                         const std::vector<std::unique_ptr<tuner::emu::GuardedBuffer>>& buffers, unsigned workers) {
  tuner::emu::GridExecutor executor(workers);
  for (auto& l : launches) {
    auto args = l.args.pointers();
    tuner::emu::GridLaunch g;
    g.module = &module;
    g.kernel = l.kernel;
    g.grid = l.grid;
    g.block = l.block;
    g.dynamic_smem = l.dynamic_smem;
    g.args = args.data();
    for (const auto& b : buffers) g.regions.push_back(&b->region());
    executor.run(g);
  }
}

}  // namespace ktune::test
