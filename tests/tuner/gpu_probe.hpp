// Test helper: compiles a probe source (kt.cuh + kernels written in the test)
// with NVRTC for the device in use and launches its kernels on device
// buffers; the GPU twin of tuner/emu_probe.hpp.
#pragma once
#include <array>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "templates/embedded.hpp"
#include "templates/family.hpp"
#include "tuner/cuda/check.hpp"
#include "tuner/compile/compiler.hpp"
#include "tuner/cuda/device.hpp"

namespace ktune::test {

class GpuProbe {
 public:
  /// `body`: kernels written against `header` (kt.cuh, or a header that
  /// includes it); `kernels`: their name expressions; `arch`: the NVRTC
  /// target ("": the device's).
  GpuProbe(const std::string& body, std::vector<std::string> kernels, const std::string& header = "common/kt.cuh",
           const std::string& arch = "") {
    templates::Rendered r;
    r.source = "// probe\n" + templates::expand_includes(header) + body;
    r.kernels = std::move(kernels);
    const tuner::CompileResult c = tuner::Compiler(false).compile(r, arch.empty() ? context_.info().arch() : arch);
    if (!c.ok) throw std::runtime_error("probe does not compile:\n" + c.log);
    module_ = std::make_unique<tuner::Module>(c.cubin);
    for (const auto& k : c.kernels) functions_.push_back(module_->function(k.lowered_name));
  }

  const tuner::DeviceInfo& device() const { return context_.info(); }

  /// A device buffer holding `values`; returns its device pointer.
  template <class T>
  T* buffer(const std::string&, const std::vector<T>& values) {
    tuner::DeviceBuffer b(std::max<std::size_t>(values.size() * sizeof(T), 1));
    if (!values.empty()) b.upload(values.data(), values.size() * sizeof(T));
    T* p = reinterpret_cast<T*>(b.address());
    buffers_.emplace(b.address(), std::move(b));
    return p;
  }

  /// `n` elements at `p` (a pointer from buffer()), copied back to the host.
  template <class T>
  std::vector<T> read(const T* p, std::size_t n) const {
    std::vector<T> out(n);
    buffers_.at(reinterpret_cast<std::uint64_t>(p)).download(out.data(), n * sizeof(T));
    return out;
  }

  /// Runs kernel `kernel` (index into the name expressions) and waits for it.
  void launch(int kernel, std::array<unsigned, 3> grid, std::array<unsigned, 3> block, templates::ArgPack args,
              unsigned dynamic_smem = 0) {
    auto pointers = args.pointers();
    const tuner::Driver& d = tuner::Driver::get();
    CUlaunchConfig config{};
    config.gridDimX = grid[0], config.gridDimY = grid[1], config.gridDimZ = grid[2];
    config.blockDimX = block[0], config.blockDimY = block[1], config.blockDimZ = block[2];
    config.sharedMemBytes = dynamic_smem;
    config.hStream = stream_.get();
    KT_CHECK_CU(d.cuLaunchKernelEx(&config, functions_.at(static_cast<std::size_t>(kernel)), pointers.data(), nullptr));
    stream_.synchronize();
  }

 private:
  tuner::Context context_;
  tuner::Stream stream_;
  std::unique_ptr<tuner::Module> module_;
  std::vector<CUfunction> functions_;
  std::map<std::uint64_t, tuner::DeviceBuffer> buffers_;
};

}  // namespace ktune::test
