// The emulation backend (tuner/exec/backend.hpp): modules compiled by the
// host compiler (tuner/emu_module.hpp), buffers in guarded mappings
// (tuner/emu_memory.hpp), grids run as fibers on a pool of OS threads
// (tuner/emu_grid.hpp). Launches run as they are enqueued; every launch is
// followed by a check of every live buffer's canary.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <set>

#include "base/env.hpp"
#include "base/error.hpp"
#include "base/thread_pool.hpp"
#include "tuner/emu/grid.hpp"
#include "tuner/emu/memory.hpp"
#include "tuner/emu/module.hpp"
#include "tuner/exec/backend.hpp"

namespace ktune::tuner::exec {
namespace {

/// Timed repetitions an emulated measurement takes at least (min_repetitions permitting).
constexpr int kEmuSamples = 3;

/// The buffers alive on one backend: the regions a kernel may touch.
struct LiveBuffers {
  std::mutex mutex;
  std::set<const emu::GuardedBuffer*> buffers;
};

class EmuBuffer final : public Buffer {
 public:
  EmuBuffer(std::shared_ptr<LiveBuffers> live, std::size_t bytes, const std::string& label)
      : live_(std::move(live)), buffer_("buffer '" + label + "'", bytes), label_(label) {
    std::lock_guard lock(live_->mutex);
    live_->buffers.insert(&buffer_);
  }
  ~EmuBuffer() override {
    std::lock_guard lock(live_->mutex);
    live_->buffers.erase(&buffer_);
  }
  std::uint64_t address() const override { return reinterpret_cast<std::uint64_t>(buffer_.data()); }
  std::size_t bytes() const override { return buffer_.size(); }
  const std::string& label() const override { return label_; }
  emu::GuardedBuffer& guarded() { return buffer_; }

 private:
  std::shared_ptr<LiveBuffers> live_;
  emu::GuardedBuffer buffer_;
  std::string label_;
};

class EmuModule final : public Module {
 public:
  EmuModule(std::shared_ptr<const emu::Module> module, double compile_ms)
      : module_(std::move(module)), compile_ms_(compile_ms) {}
  const std::vector<std::string>& kernel_names() const override { return module_->kernel_names; }
  const std::vector<KernelResources>& resources() const override { return no_resources_; }
  double compile_ms() const override { return compile_ms_; }
  const emu::Module& module() const { return *module_; }

 private:
  std::shared_ptr<const emu::Module> module_;
  double compile_ms_;
  std::vector<KernelResources> no_resources_;
};

EmuBuffer& emu_buffer(const Buffer& b) {
  auto* e = dynamic_cast<const EmuBuffer*>(&b);
  KTUNE_REQUIRE(e != nullptr, "buffer '" + b.label() + "' belongs to another backend");
  return const_cast<EmuBuffer&>(*e);
}

class EmuBackend final : public Backend {
 public:
  explicit EmuBackend(EmuOptions options)
      : device_(DeviceLimits::for_arch(options.arch)),
        executor_(options.workers, options.schedule, options.hang_seconds),
        live_(std::make_shared<LiveBuffers>()) {
    device_.name = "host emulation (" + options.arch + " limits)";
    env::require_host_cxx();  // a KTUNE_HOST_CXX that is no compiler is bad input, said before any work
    emu::check_object_folder();  // as is a cache folder others may put code in
  }

  std::string name() const override { return "emu"; }
  const DeviceLimits& device() const override { return device_; }

  std::unique_ptr<Buffer> allocate(std::size_t bytes, const std::string& label) override {
    return std::make_unique<EmuBuffer>(live_, bytes, label);
  }
  void upload(const Buffer& dst, const void* host, std::size_t bytes) override {
    refuse_in_capture("upload");
    KTUNE_REQUIRE(bytes <= dst.bytes(), fmt::format("upload of {} bytes into '{}' of {}", bytes, dst.label(),
                                                    dst.bytes()));
    if (bytes) std::memcpy(emu_buffer(dst).guarded().data(), host, bytes);
  }
  void download(void* host, const Buffer& src, std::size_t bytes) override {
    refuse_in_capture("download");
    KTUNE_REQUIRE(bytes <= src.bytes(), fmt::format("download of {} bytes from '{}' of {}", bytes, src.label(),
                                                    src.bytes()));
    if (bytes) std::memcpy(host, emu_buffer(src).guarded().data(), bytes);
  }
  void poison(const Buffer& dst) override {
    refuse_in_capture("poison");
    emu_buffer(dst).guarded().fill(0xff);
  }
  void upload_range(const Buffer& dst, std::size_t offset, const void* host, std::size_t bytes) override {
    refuse_in_capture("upload_range");
    KTUNE_REQUIRE(offset <= dst.bytes() && bytes <= dst.bytes() - offset,
                  fmt::format("upload of {} bytes at {} into '{}' of {}", bytes, offset, dst.label(), dst.bytes()));
    if (bytes) std::memcpy(emu_buffer(dst).guarded().data() + offset, host, bytes);
  }
  void download_range(void* host, const Buffer& src, std::size_t offset, std::size_t bytes) override {
    refuse_in_capture("download_range");
    KTUNE_REQUIRE(offset <= src.bytes() && bytes <= src.bytes() - offset,
                  fmt::format("download of {} bytes at {} from '{}' of {}", bytes, offset, src.label(), src.bytes()));
    if (bytes) std::memcpy(host, emu_buffer(src).guarded().data() + offset, bytes);
  }
  void copy(const Buffer& dst, const Buffer& src, std::size_t bytes) override {
    KTUNE_REQUIRE(bytes <= dst.bytes() && bytes <= src.bytes(),
                  fmt::format("copy of {} bytes from '{}' of {} into '{}' of {}", bytes, src.label(), src.bytes(),
                              dst.label(), dst.bytes()));
    std::byte* to = emu_buffer(dst).guarded().data();
    const std::byte* from = emu_buffer(src).guarded().data();
    if (bytes) enqueue_host([=] { std::memcpy(to, from, bytes); });  // in stream order, and captured as a copy
  }

  std::shared_ptr<const Module> load(const templates::Rendered& rendered) override {
    const auto t0 = std::chrono::steady_clock::now();
    auto module = emu::load_module(rendered);
    const double ms = module->from_cache
                          ? 0.0
                          : std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return std::make_shared<EmuModule>(std::move(module), ms);
  }

  void precompile(const std::vector<templates::Rendered>& sources, unsigned threads) override {
    ThreadPool pool(threads ? threads : env::compile_threads());
    std::vector<std::future<void>> done;
    for (const auto& r : sources)
      done.push_back(pool.submit([&r] {
        try {
          emu::load_module(r);
        } catch (const Error&) {
          // load() reports it, with the compiler's log.
        }
      }));
    for (auto& f : done) f.get();
  }

  using Backend::launch;
  // Launches run as they are enqueued: every stream is "now". Under capture
  // they are checked and recorded instead.
  void launch(const Module& m, const std::vector<templates::Launch>& plan, std::uint64_t /*stream*/) override {
    const auto* module = dynamic_cast<const EmuModule*>(&m);
    KTUNE_REQUIRE(module != nullptr, "the module was loaded by another backend");
    const FitResult fit = check_fit(m.kernel_names(), m.resources(), plan, device_);
    if (!fit.fits())
      throw_error(ErrorKind::kCheckFailed,
                  fmt::format("does not fit: {}{}{}", fit.kernel, fit.kernel.empty() ? "" : ": ", fit.verdict.reason));
    if (capturing_) {
      capturing_->steps.push_back({.module = module, .plan = plan, .host = {}});
      return;
    }
    run(*module, plan);
  }
  void synchronize() override { refuse_in_capture("synchronize"); }

  std::unique_ptr<Graph> capture(const std::function<void()>& enqueue) override {
    KTUNE_REQUIRE(!capturing_, "a capture inside a capture");
    auto graph = std::make_unique<EmuGraph>(this);
    capturing_ = graph.get();
    try {
      enqueue();
    } catch (...) {
      capturing_ = nullptr;
      throw;
    }
    capturing_ = nullptr;
    return graph;
  }
  void replay(const Graph& g) override {
    const auto* graph = dynamic_cast<const EmuGraph*>(&g);
    KTUNE_REQUIRE(graph != nullptr && graph->owner == this, "a graph captured by another backend");
    if (capturing_) {  // a graph replayed under capture becomes part of the new one, as on CUDA
      capturing_->steps.insert(capturing_->steps.end(), graph->steps.begin(), graph->steps.end());
      return;
    }
    for (const auto& step : graph->steps) {
      if (step.host) step.host();
      else run(*step.module, step.plan);
    }
  }
  void enqueue_host(const std::function<void()>& work) override {
    if (capturing_) capturing_->steps.push_back({.module = nullptr, .plan = {}, .host = work});
    else work();
  }

  using Backend::time;
  Measurement time(const std::function<void()>& enqueue, const RunOptions& options, const std::string& what,
                   const std::function<void()>& reset) override {
    // Host wall time: it ranks nothing on a GPU, but lets a whole tuning
    // session, winner rule included, run end to end without one.
    refuse_in_capture("time");
    // One warm-up at most (the first launch pays for cold pages and caches,
    // 5-50x the rest), then kEmuSamples at least, so a slow variant still
    // has a spread; then on to min_repetitions within min_seconds.
    const int warmup = std::min(options.warmup, 1);
    for (int i = 0; i < warmup; ++i) {
      if (reset) reset();
      enqueue();
    }
    std::vector<double> samples;
    double total_ms = 0;
    const int most = std::max(1, options.max_repetitions);
    const int least = std::min(most, std::clamp(options.min_repetitions, 1, kEmuSamples));
    while (static_cast<int>(samples.size()) < most &&
           (static_cast<int>(samples.size()) < least ||
            (static_cast<int>(samples.size()) < options.min_repetitions && total_ms < options.min_seconds * 1e3))) {
      if (reset) reset();
      const auto t0 = std::chrono::steady_clock::now();
      enqueue();
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      samples.push_back(ms);
      total_ms += ms;
    }
    Measurement m = summarize(samples);
    m.method = fmt::format("host emulation wall time of {} ({} warm-up{}, {} repetition{}; not a GPU measurement)",
                           what, warmup, warmup == 1 ? "" : "s", m.repetitions, m.repetitions == 1 ? "" : "s");
    return m;
  }

 private:
  // What a capture recorded: launches of a plan, or host work, in order.
  struct EmuGraph final : Graph {
    struct Step {
      const EmuModule* module;  // null for host work
      std::vector<templates::Launch> plan;
      std::function<void()> host;
    };
    explicit EmuGraph(const void* o) : owner(o) {}
    std::size_t nodes() const override {
      std::size_t n = 0;
      for (const auto& s : steps) n += s.host ? 1 : s.plan.size();
      return n;
    }
    const void* owner;
    std::vector<Step> steps;
  };

  void run(const EmuModule& module, const std::vector<templates::Launch>& plan) {
    for (const auto& l : plan) {  // before any of the plan runs
      check_arguments(module, l);
      for (const auto& c : l.constants) constant(module, c);
    }
    for (const auto& l : plan) {
      for (const auto& c : l.constants)
        std::memcpy(constant(module, c), reinterpret_cast<const void*>(c.source), c.bytes);
      auto args = l.args.pointers();
      emu::GridLaunch g;
      g.module = &module.module();
      g.kernel = l.kernel;
      g.grid = l.grid;
      g.block = l.block;
      g.dynamic_smem = l.dynamic_smem;
      g.args = args.data();
      std::lock_guard lock(live_->mutex);
      for (const auto* b : live_->buffers) g.regions.push_back(&b->region());
      // A launch that fails leaves the canaries as they were before it, for the next to be judged by its own.
      const auto rearm = [&] {
        for (const auto* b : live_->buffers) b->rearm_canary();
      };
      try {
        executor_.run(g);
      } catch (...) {
        rearm();
        throw;
      }
      for (const auto* b : live_->buffers)
        if (auto bad = b->check_canary(); !bad.empty()) {
          rearm();
          throw_error(ErrorKind::kCheckFailed, fmt::format("emulation: {} by kernel {}", bad,
                                                           module.kernel_names()[static_cast<std::size_t>(l.kernel)]));
        }
    }
  }
  // The address of `c`'s __constant__ variable, checked to hold its bytes, which lie in one live buffer.
  unsigned char* constant(const EmuModule& module, const templates::ConstantCopy& c) const {
    const auto [address, bytes] = module.module().global(c.symbol);
    KTUNE_REQUIRE(c.bytes <= bytes,
                  fmt::format("{} bytes of {} copied into __constant__ '{}', which holds {}", c.bytes, c.label,
                              c.symbol, bytes));
    const auto* from = reinterpret_cast<const std::byte*>(c.source);
    std::lock_guard lock(live_->mutex);
    KTUNE_REQUIRE(std::any_of(live_->buffers.begin(), live_->buffers.end(),
                              [&](const emu::GuardedBuffer* b) {
                                return from >= b->data() && c.bytes <= b->size() &&
                                       from - b->data() <= static_cast<std::ptrdiff_t>(b->size() - c.bytes);
                              }),
                  fmt::format("the {} bytes of {} copied into __constant__ '{}' lie in no buffer", c.bytes, c.label,
                              c.symbol));
    return address;
  }
  // A launch whose arguments are not the kernel's parameters (a kernel
  // spec's `args` against its signature): said here, where the kernel would
  // otherwise read its parameters from the wrong bytes.
  static void check_arguments(const EmuModule& module, const templates::Launch& l) {
    const auto k = static_cast<std::size_t>(l.kernel);
    exec::check_arguments("emulation", module.kernel_names().at(k), module.module().parameter_sizes.at(k),
                          module.module().parameter_kinds.at(k), l.args);
  }

  // What CUDA refuses on a stream under capture: anything that waits for it.
  void refuse_in_capture(const char* call) const {
    if (capturing_)
      throw_error(ErrorKind::kInternal,
                  fmt::format("emulation: {} while a graph is being captured (it would wait for the device)", call));
  }

  DeviceLimits device_;
  EmuGraph* capturing_ = nullptr;
  emu::GridExecutor executor_;
  std::shared_ptr<LiveBuffers> live_;
};

}  // namespace

std::unique_ptr<Backend> make_emu_backend(EmuOptions options) { return std::make_unique<EmuBackend>(options); }

}  // namespace ktune::tuner::exec
