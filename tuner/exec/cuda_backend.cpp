// The CUDA backend (tuner/exec/backend.hpp): the driver API loaded at run
// time (tuner/driver.hpp; libcuda is never linked), NVRTC with the on-disk
// binary cache (tuner/compiler.hpp), one non-blocking stream, and the timing
// harness of tuner/timing.hpp.
#include <fmt/format.h>

#include <chrono>
#include <map>
#include <mutex>
#include <optional>

#include "base/env.hpp"
#include "base/error.hpp"
#include "tuner/cuda/check.hpp"
#include "tuner/cuda/device.hpp"
#include "tuner/cuda/gpu_marks.hpp"
#include "tuner/exec/backend.hpp"
#include "tuner/cuda/timing.hpp"

namespace ktune::tuner::exec {
namespace {

std::string first_lines(const std::string& text, int lines) {
  std::string out;
  int n = 0;
  for (char c : text) {
    if (c == '\n' && ++n == lines) break;
    out += c;
  }
  return out;
}

class CudaBuffer final : public Buffer {
 public:
  CudaBuffer(std::size_t bytes, std::string label) : buffer_(bytes), label_(std::move(label)) {}
  std::uint64_t address() const override { return buffer_.address(); }
  std::size_t bytes() const override { return buffer_.bytes(); }
  const std::string& label() const override { return label_; }
  DeviceBuffer& device_buffer() const { return buffer_; }

 private:
  mutable DeviceBuffer buffer_;  // uploads change the contents, not the handle
  std::string label_;
};

class CudaModule final : public Module {
 public:
  CudaModule(const CompileResult& compiled, bool waits_previous_kernel)
      : module_(compiled.cubin),
        compile_ms_(compiled.compile_ms),
        not_stored_(compiled.not_stored),
        waits_previous_kernel_(waits_previous_kernel) {
    for (const auto& k : compiled.kernels) {
      names_.push_back(k.name_expression);
      functions_.push_back(module_.function(k.lowered_name));
      // Without the opt-in a block gets 48 KB of shared memory, static and
      // dynamic together: a kernel's dynamic limit is what its static leaves.
      int most = 0;
      KT_CHECK_CU(Driver::get().cuFuncGetAttribute(&most, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                   functions_.back()));
      max_dynamic_.push_back(static_cast<unsigned>(most));
      parameter_sizes_.push_back(parameter_sizes(functions_.back()));
      // The kinds, from the kernel's mangled name, where they agree with the driver's count.
      auto kinds = parameter_kinds(k.lowered_name);
      parameter_kinds_.push_back(kinds && parameter_sizes_.back() && kinds->size() == parameter_sizes_.back()->size()
                                     ? std::move(*kinds)
                                     : std::vector<templates::ArgKind>());
    }
    resources_ = compiled.kernels;
  }
  const std::vector<std::string>& kernel_names() const override { return names_; }
  const std::vector<KernelResources>& resources() const override { return resources_; }
  double compile_ms() const override { return compile_ms_; }
  std::string not_stored() const override { return not_stored_; }
  /// Rendered::waits_previous_kernel of its source.
  bool waits_previous_kernel() const { return waits_previous_kernel_; }

  /// The kernel, its dynamic shared memory limit raised (the opt-in) when a
  /// launch asks for more than it allows; the fit check has kept static plus
  /// dynamic within the device's opt-in maximum.
  CUfunction function(std::size_t i, unsigned dynamic_smem) const {
    if (dynamic_smem > max_dynamic_[i]) {
      KT_CHECK_CU(Driver::get().cuFuncSetAttribute(functions_[i], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                   static_cast<int>(dynamic_smem)));
      max_dynamic_[i] = dynamic_smem;
    }
    return functions_[i];
  }
  /// The device address of `c`'s `__constant__` variable, checked to hold
  /// its bytes.
  CUdeviceptr constant(const templates::ConstantCopy& c) const {
    auto it = constants_.find(c.symbol);
    if (it == constants_.end()) it = constants_.emplace(c.symbol, module_.global(c.symbol)).first;
    KTUNE_REQUIRE(c.bytes <= it->second.second,
                  fmt::format("{} bytes of {} copied into __constant__ '{}', which holds {}", c.bytes, c.label,
                              c.symbol, it->second.second));
    return it->second.first;
  }
  /// Throws where `l`'s arguments are not its kernel's parameters (the
  /// emulation's check: by the sizes the driver gives and the kinds the
  /// kernel's name says; none where the driver does not give them).
  void check_arguments(const templates::Launch& l) const {
    const auto k = static_cast<std::size_t>(l.kernel);
    if (parameter_sizes_[k]) exec::check_arguments("GPU", names_[k], *parameter_sizes_[k], parameter_kinds_[k], l.args);
  }

 private:
  tuner::Module module_;
  double compile_ms_;
  std::string not_stored_;
  bool waits_previous_kernel_;
  std::vector<std::string> names_;
  std::vector<CUfunction> functions_;
  std::vector<KernelResources> resources_;
  mutable std::vector<unsigned> max_dynamic_;  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, per kernel
  mutable std::map<std::string, std::pair<CUdeviceptr, std::size_t>> constants_;  // __constant__ variables used
  std::vector<std::optional<std::vector<std::size_t>>> parameter_sizes_;  // per kernel, where the driver tells
  std::vector<std::vector<templates::ArgKind>> parameter_kinds_;         // per kernel; empty: unknown

  /// The bytes of each of `f`'s parameters, in order (cuFuncGetParamInfo, CUDA 12.4 on: an index past the last
  /// parameter is an invalid value); none with an older driver, or where the driver says anything else.
  static std::optional<std::vector<std::size_t>> parameter_sizes(CUfunction f) {
    const Driver& d = Driver::get();
    if (!d.cuFuncGetParamInfo) return std::nullopt;
    std::vector<std::size_t> sizes;
    constexpr std::size_t kMost = 4096;  // a kernel's parameters take at most 32 KB, at least a byte each
    for (std::size_t offset = 0, size = 0; sizes.size() <= kMost; sizes.push_back(size)) {
      const CUresult rc = d.cuFuncGetParamInfo(f, sizes.size(), &offset, &size);
      if (rc == CUDA_ERROR_INVALID_VALUE) return sizes;
      if (rc != CUDA_SUCCESS) return std::nullopt;
    }
    return std::nullopt;
  }
};

const CudaBuffer& cuda_buffer(const Buffer& b) {
  auto* c = dynamic_cast<const CudaBuffer*>(&b);
  KTUNE_REQUIRE(c != nullptr, "buffer '" + b.label() + "' belongs to another backend");
  return *c;
}

// A graph captured from the backend's stream, owned from construction (so
// a failed instantiation frees it) and instantiated once.
class CudaGraph final : public Graph {
 public:
  CudaGraph(const void* owner, CUgraph graph) : owner_(owner), graph_(graph) {
    const Driver& d = Driver::get();
    KT_CHECK_CU(d.cuGraphGetNodes(graph_.get(), nullptr, &nodes_));
    CUgraphExec exec = nullptr;
    KT_CHECK_CU(d.cuGraphInstantiateWithFlags(&exec, graph_.get(), 0));
    exec_.reset(exec);
  }
  std::size_t nodes() const override { return nodes_; }
  const void* owner() const { return owner_; }
  CUgraphExec exec() const { return exec_.get(); }

 private:
  struct DestroyGraph {
    void operator()(CUgraph g) const { Driver::get().cuGraphDestroy(g); }
  };
  struct DestroyExec {
    void operator()(CUgraphExec e) const { Driver::get().cuGraphExecDestroy(e); }
  };
  const void* owner_;
  std::unique_ptr<CUgraph_st, DestroyGraph> graph_;  // destroyed after exec_
  std::unique_ptr<CUgraphExec_st, DestroyExec> exec_;
  std::size_t nodes_ = 0;
};

struct EventMark final : Mark {
  Event event;
};

const Event& event_of(const Mark& m) {
  const auto* e = dynamic_cast<const EventMark*>(&m);
  KTUNE_REQUIRE(e != nullptr, "a mark of another backend");
  return e->event;
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int ordinal)
      : context_(ordinal), device_(context_.info().limits()), mark_(env::gpu_mark_dir(), context_.info().uuid) {}

  std::string name() const override { return "gpu"; }
  const DeviceLimits& device() const override { return device_; }

  std::unique_ptr<Buffer> allocate(std::size_t bytes, const std::string& label) override {
    return std::make_unique<CudaBuffer>(bytes, label);
  }
  void upload(const Buffer& dst, const void* host, std::size_t bytes) override {
    KTUNE_REQUIRE(bytes <= dst.bytes(), fmt::format("upload of {} bytes into '{}' of {}", bytes, dst.label(),
                                                    dst.bytes()));
    // The copy runs on the legacy stream, which does not wait for our
    // non-blocking one: a kernel launched before may still read `dst`.
    stream_.synchronize();
    cuda_buffer(dst).device_buffer().upload(host, bytes);
  }
  void download(void* host, const Buffer& src, std::size_t bytes) override {
    KTUNE_REQUIRE(bytes <= src.bytes(), fmt::format("download of {} bytes from '{}' of {}", bytes, src.label(),
                                                    src.bytes()));
    stream_.synchronize();
    cuda_buffer(src).device_buffer().download(host, bytes);
  }
  void upload_range(const Buffer& dst, std::size_t offset, const void* host, std::size_t bytes) override {
    KTUNE_REQUIRE(offset <= dst.bytes() && bytes <= dst.bytes() - offset,
                  fmt::format("upload of {} bytes at {} into '{}' of {}", bytes, offset, dst.label(), dst.bytes()));
    if (!bytes) return;
    // Complete on return, as DeviceBuffer::upload (pageable memory may be staged).
    stream_.synchronize();
    KT_CHECK_CU(Driver::get().cuMemcpyHtoD(static_cast<CUdeviceptr>(dst.address() + offset), host, bytes));
    KT_CHECK_CU(Driver::get().cuCtxSynchronize());
  }
  void download_range(void* host, const Buffer& src, std::size_t offset, std::size_t bytes) override {
    KTUNE_REQUIRE(offset <= src.bytes() && bytes <= src.bytes() - offset,
                  fmt::format("download of {} bytes at {} from '{}' of {}", bytes, offset, src.label(), src.bytes()));
    stream_.synchronize();
    if (bytes) KT_CHECK_CU(Driver::get().cuMemcpyDtoH(host, static_cast<CUdeviceptr>(src.address() + offset), bytes));
  }
  void copy(const Buffer& dst, const Buffer& src, std::size_t bytes) override {
    KTUNE_REQUIRE(bytes <= dst.bytes() && bytes <= src.bytes(),
                  fmt::format("copy of {} bytes from '{}' of {} into '{}' of {}", bytes, src.label(), src.bytes(),
                              dst.label(), dst.bytes()));
    if (bytes)
      KT_CHECK_CU(Driver::get().cuMemcpyDtoDAsync(static_cast<CUdeviceptr>(dst.address()),
                                                  static_cast<CUdeviceptr>(src.address()), bytes, stream_.get()));
  }
  std::uint64_t native_stream() const override { return reinterpret_cast<std::uint64_t>(stream_.get()); }
  void poison(const Buffer& dst) override {
    KT_CHECK_CU(Driver::get().cuMemsetD8Async(static_cast<CUdeviceptr>(dst.address()), 0xFF, dst.bytes(),
                                              stream_.get()));
  }

  void bind_thread() const override { context_.make_current(); }

  std::shared_ptr<const Module> load(const templates::Rendered& rendered) override {
    CompileResult compiled;
    {
      const std::lock_guard lock(unkept_mutex_);
      if (!unkept_.empty())
        if (const auto it = unkept_.find(compiler_.key(rendered, device_.arch)); it != unkept_.end())
          compiled = it->second;
    }
    if (compiled.cubin.empty()) compiled = compiler_.compile(rendered, device_.arch);
    if (!compiled.ok) throw_error(ErrorKind::kCompile, first_lines(compiled.log, 8));
    return std::make_shared<CudaModule>(compiled, rendered.waits_previous_kernel);
  }

  void precompile(const std::vector<templates::Rendered>& sources, unsigned threads) override {
    for (auto& r : compiler_.compile_many(sources, device_.arch, threads))
      if (r.ok && !r.not_stored.empty()) {
        const std::lock_guard lock(unkept_mutex_);
        unkept_[r.key] = std::move(r);
      }
  }

  using Backend::launch;
  void launch(const Module& m, const std::vector<templates::Launch>& plan, std::uint64_t stream) override {
    const auto* module = dynamic_cast<const CudaModule*>(&m);
    KTUNE_REQUIRE(module != nullptr, "the module was loaded by another backend");
    const FitResult fit = check_fit(m.kernel_names(), m.resources(), plan, device_);
    if (!fit.fits())
      throw_error(ErrorKind::kCheckFailed,
                  fmt::format("does not fit: {}{}{}", fit.kernel, fit.kernel.empty() ? "" : ": ", fit.verdict.reason));
    for (const auto& l : plan) {  // before any of the plan runs
      module->check_arguments(l);
      for (const auto& c : l.constants) module->constant(c);
    }
    const Driver& d = Driver::get();
    // Programmatic dependent launch (sm_90+): the kernel may start while the
    // stream's previous kernel finishes; its kt::wait_previous_kernel() waits.
    CUlaunchAttribute overlap{};
    overlap.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    overlap.value.programmaticStreamSerializationAllowed = 1;
    const bool programmatic = launches_programmatically() && module->waits_previous_kernel();
    for (const auto& l : plan) {
      for (const auto& c : l.constants)
        KT_CHECK_CU(d.cuMemcpyDtoDAsync(module->constant(c), static_cast<CUdeviceptr>(c.source), c.bytes,
                                        reinterpret_cast<CUstream>(stream)));
      auto args = l.args.pointers();
      CUlaunchConfig config{};
      config.gridDimX = l.grid[0], config.gridDimY = l.grid[1], config.gridDimZ = l.grid[2];
      config.blockDimX = l.block[0], config.blockDimY = l.block[1], config.blockDimZ = l.block[2];
      config.sharedMemBytes = l.dynamic_smem;
      config.hStream = reinterpret_cast<CUstream>(stream);
      config.attrs = programmatic ? &overlap : nullptr;
      config.numAttrs = programmatic ? 1 : 0;
      KT_CHECK_CU(d.cuLaunchKernelEx(&config, module->function(static_cast<std::size_t>(l.kernel), l.dynamic_smem),
                                     args.data(), nullptr));
    }
  }
  void synchronize() override { stream_.synchronize(); }
  bool launches_programmatically() const override { return programmatic() && device_.sm >= 90; }

  // Thread-local capture: a call of this thread that would wait for the
  // stream (a synchronize, a copy on the legacy stream) fails, and with it
  // the capture, instead of running during it.
  std::unique_ptr<Graph> capture(const std::function<void()>& enqueue) override {
    const Driver& d = Driver::get();
    KT_CHECK_CU(d.cuStreamBeginCapture(stream_.get(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CUgraph graph = nullptr;
    try {
      enqueue();
    } catch (...) {
      d.cuStreamEndCapture(stream_.get(), &graph);  // ends the capture, invalidated or not
      if (graph) d.cuGraphDestroy(graph);
      throw;
    }
    KT_CHECK_CU(d.cuStreamEndCapture(stream_.get(), &graph));
    return std::make_unique<CudaGraph>(this, graph);
  }
  void replay(const Graph& g) override {
    const auto* graph = dynamic_cast<const CudaGraph*>(&g);
    KTUNE_REQUIRE(graph != nullptr && graph->owner() == this, "a graph captured by another backend");
    KT_CHECK_CU(Driver::get().cuGraphLaunch(graph->exec(), stream_.get()));
  }

  std::unique_ptr<Mark> mark() override {
    auto m = std::make_unique<EventMark>();
    m->event.record(stream_.get());
    return m;
  }
  double elapsed_ms(const Mark& from, const Mark& to) override {
    const double ms = event_of(to).elapsed_since(event_of(from));
    // A profile reads hundreds of spans a step: a look at most once a second.
    if (const auto now = std::chrono::steady_clock::now(); now - last_look_ > std::chrono::seconds(1)) {
      mark_.others();  // into others_seen()
      last_look_ = now;
    }
    return ms;
  }
  std::string clock() const override { return "CUDA events on the stream"; }
  MemoryInfo memory() const override {
    MemoryInfo m;
    KT_CHECK_CU(Driver::get().cuMemGetInfo(&m.free_bytes, &m.total_bytes));
    return m;
  }

  using Backend::time;
  Measurement time(const std::function<void()>& enqueue, const RunOptions& options, const std::string& what,
                   const std::function<void()>& reset) override {
    const auto launch = [&](CUstream) { enqueue(); };
    std::function<void(CUstream)> before;
    if (reset) before = [&](CUstream) { reset(); };
    std::vector<std::string> shared = mark_.others();
    Measurement m;
    if (flush_.bytes() > 0) {
      m = time_on_gpu(launch, options, stream_, flush_, what, before);
    } else {
      const DeviceBuffer flush(flush_bytes(device_.l2_bytes));  // this measurement's alone
      m = time_on_gpu(launch, options, stream_, flush, what, before);
    }
    add_unseen(shared, mark_.others());
    m.shared_with = std::move(shared);
    return m;
  }
  void hold_timing_memory(bool hold) override {
    if (!hold) flush_ = DeviceBuffer();
    else if (flush_.bytes() == 0) flush_ = DeviceBuffer(flush_bytes(device_.l2_bytes));
  }

 private:
  Context context_;
  DeviceLimits device_;
  GpuMark mark_;  // this process on the GPU, for the others' looks
  std::chrono::steady_clock::time_point last_look_{};  // elapsed_ms()'s last look at the marks
  Stream stream_;
  DeviceBuffer flush_;  // time()'s L2 flush while held (hold_timing_memory), else empty
  Compiler compiler_;
  // What precompile() compiled and the binary cache did not keep (a read-only or full cache folder): load() takes
  // it from here instead of compiling it again. By binary cache key.
  std::mutex unkept_mutex_;
  std::map<std::string, CompileResult> unkept_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int ordinal) { return std::make_unique<CudaBackend>(ordinal); }

}  // namespace ktune::tuner::exec
