// The one kernel-execution seam: device memory, modules, launches and
// synchronisation behind one interface, with a CUDA implementation (the
// run-time loaded driver; NVRTC with the on-disk binary cache) and an
// emulation implementation (the host compiler; the grid as fibers on the
// CPU). The tuner's runners and the model runtime both go through it; nobody
// else calls the driver or the emulator.
//
//   Backend b = make_emu_backend() | make_cuda_backend()
//   module = b.load(family.render(config, problem))      // compile (cached) + load
//   buffers = b.allocate(...); b.upload(...)
//   b.launch(*module, family.plan(config, problem, args, b.device()))
//   b.synchronize(); b.download(...)
//   graph = b.capture([&] { ...launches... }); b.replay(*graph)  // recorded once, run as one unit
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/device_limits.hpp"
#include "base/env.hpp"
#include "search/pruning.hpp"
#include "templates/launch.hpp"
#include "tuner/compile/compiler.hpp"
#include "tuner/run/runner.hpp"

namespace ktune::tuner {

/// How the emulation backend runs.
struct EmuOptions {
  unsigned workers = 0;        ///< OS threads running blocks; 0: one per hardware thread
  std::string arch = kDefaultArch;  ///< whose limits the emulated device reports
  env::EmuSchedule schedule = env::emu_schedule();  ///< the order a block's threads run in
  unsigned hang_seconds = env::emu_hang_seconds();  ///< a thread's time without a barrier before it is a hang
};

}  // namespace ktune::tuner

namespace ktune::tuner::exec {

/// Device memory of a fixed size, owned by its backend; freed with the object.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual std::uint64_t address() const = 0;
  virtual std::size_t bytes() const = 0;
  virtual const std::string& label() const = 0;  ///< named in fault messages
};

/// A point in a backend's order of work, for timing phases of a run: a CUDA
/// event recorded on the stream, or the host clock where the work is done
/// when it is enqueued (the emulation).
class Mark {
 public:
  virtual ~Mark() = default;
};
/// The host clock now, as a Mark.
std::unique_ptr<Mark> host_mark();
/// Milliseconds from one host mark to another.
double host_elapsed_ms(const Mark& from, const Mark& to);

/// Throws Error(kCheckFailed) where a launch's arguments `args` are not
/// kernel `kernel`'s parameters: their sizes (`sizes`, in bytes), or, where
/// both are known, their kinds (`kinds`: a float where the kernel takes an
/// integer); a kernel spec's `args` against its signature, which the kernel
/// would otherwise read from the wrong bytes. `where` begins the message
/// ("emulation", "GPU").
void check_arguments(const std::string& where, const std::string& kernel, const std::vector<std::size_t>& sizes,
                     const std::vector<templates::ArgKind>& kinds, const templates::ArgPack& args);

/// The kinds of a kernel's parameters, read from its mangled (lowered) name:
/// float and double floating point, the integral types and addresses
/// integers, anything else other bytes; none where the name is not a mangled
/// function's (an extern "C" kernel).
std::optional<std::vector<templates::ArgKind>> parameter_kinds(const std::string& mangled);

/// Device memory as the driver reports it now (cuMemGetInfo): every
/// process's allocations count.
struct MemoryInfo {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
};

/// Work recorded once and replayed as one unit: a CUDA graph (instantiated
/// from a capture of the backend's stream), or under emulation the recorded
/// launches and host work, in order.
class Graph {
 public:
  virtual ~Graph() = default;
  /// Kernel launches, library calls and host work it holds (a CUDA graph's
  /// nodes; a library call may add several there).
  virtual std::size_t nodes() const = 0;
};

/// A rendered source compiled and loaded on a backend.
class Module {
 public:
  virtual ~Module() = default;
  /// Name expressions, in Rendered::kernels order.
  virtual const std::vector<std::string>& kernel_names() const = 0;
  /// What the compiler reported per kernel (registers, spills, static shared
  /// memory); empty when the backend's compiler reports nothing (emulation).
  virtual const std::vector<KernelResources>& resources() const = 0;
  virtual double compile_ms() const = 0;  ///< 0 when it came from the binary cache
  /// Why the binary cache did not keep its compile (CompileResult::not_stored); empty when it did.
  virtual std::string not_stored() const { return {}; }
};

/// The one fit check: whether each launch of `plan` can be resident on
/// `device`, from its geometry and, when `module` reports them, its kernel's
/// registers and static shared memory. Returns the first failing launch's
/// verdict prefixed with the kernel's name, or the worst passing one.
struct FitResult {
  search::PruneResult verdict;
  std::string kernel;  ///< the kernel the verdict is about
  bool fits() const { return verdict.verdict != search::Verdict::kPruned; }
};
FitResult check_fit(const std::vector<std::string>& kernel_names, const std::vector<KernelResources>& resources,
                    const std::vector<templates::Launch>& plan, const DeviceLimits& device);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  ///< "gpu" | "emu"
  virtual const DeviceLimits& device() const = 0;

  virtual std::unique_ptr<Buffer> allocate(std::size_t bytes, const std::string& label) = 0;
  /// Host to device, after everything launched before it on the backend's
  /// stream; complete on return, ordered before later launches.
  virtual void upload(const Buffer& dst, const void* host, std::size_t bytes) = 0;
  /// Device to host, after everything launched before it.
  virtual void download(void* host, const Buffer& src, std::size_t bytes) = 0;
  /// Every byte of `dst` set to 0xFF: NaN in every float type, so an output
  /// never written fails validation.
  virtual void poison(const Buffer& dst) = 0;
  /// upload/download of `bytes` at byte `offset` into the buffer: a runtime
  /// that lays many tensors out in one allocation moves one at a time.
  virtual void upload_range(const Buffer& dst, std::size_t offset, const void* host, std::size_t bytes) = 0;
  virtual void download_range(void* host, const Buffer& src, std::size_t offset, std::size_t bytes) = 0;
  /// `bytes` from the start of `src` to the start of `dst`, enqueued on the
  /// backend's stream, in order with its launches.
  virtual void copy(const Buffer& dst, const Buffer& src, std::size_t bytes) = 0;
  /// The CUstream launches are enqueued on, for libraries that launch their
  /// own kernels in order with ours (cuBLASLt); 0 under emulation.
  virtual std::uint64_t native_stream() const { return 0; }
  /// Readies the calling thread to use this backend (a GPU's context made
  /// current on it); a program calling from several threads calls it first.
  virtual void bind_thread() const {}

  /// Compiles `rendered` (binary cache first) and loads it. Throws
  /// Error(kCompile) carrying the compiler's log.
  virtual std::shared_ptr<const Module> load(const templates::Rendered& rendered) = 0;
  /// Compiles `sources` into the binary cache on `threads` workers (0: the
  /// environment's default), so that loading them later is a cache hit (what
  /// the cache cannot keep, the backend keeps for load()). Failures are not
  /// reported here: load() reports them.
  virtual void precompile(const std::vector<templates::Rendered>& sources, unsigned threads) = 0;
  /// Enqueues the launches of `plan` in order on `stream`, after the fit
  /// check: a CUstream of this backend's context (the device's primary
  /// context, which the CUDA runtime shares), as an integer; the emulation
  /// runs every launch as it is enqueued, so any stream means "now". Throws
  /// Error(kCheckFailed) "does not fit: ..." when a launch cannot be resident,
  /// Error(kCuda) when the driver refuses a launch, and (emulation)
  /// Error(kCheckFailed) "emulation: ..." for a deadlock, an access outside
  /// the buffers, or a trap.
  virtual void launch(const Module& module, const std::vector<templates::Launch>& plan, std::uint64_t stream) = 0;
  /// The same on the backend's own stream (native_stream()), where its
  /// uploads, downloads, marks and synchronize() are ordered.
  void launch(const Module& module, const std::vector<templates::Launch>& plan) {
    launch(module, plan, native_stream());
  }
  virtual void synchronize() = 0;
  /// Programmatic dependent launch: from now on, kernels whose source waits
  /// for the previous kernel itself (Rendered::waits_previous_kernel) are
  /// launched so that their blocks may start while the previous kernel of the
  /// stream finishes, hiding the launch between them (the CUDA backend on sm_90
  /// and newer; elsewhere, and for other kernels, launches are as before). The
  /// emulation runs each launch to its end, so there it changes nothing.
  void set_programmatic(bool on) { programmatic_ = on; }
  /// Whether it was asked for (set_programmatic).
  bool programmatic() const { return programmatic_; }
  /// Whether the opting-in kernels are launched so here: asked for, and a
  /// backend and device that can (the CUDA backend on sm_90 and newer).
  virtual bool launches_programmatically() const { return false; }

  /// A mark after everything enqueued so far (default: waits, then the host clock).
  virtual std::unique_ptr<Mark> mark() {
    synchronize();
    return host_mark();
  }
  /// Milliseconds from `from` to `to`, two marks of this backend; waits for `to`.
  virtual double elapsed_ms(const Mark& from, const Mark& to) { return host_elapsed_ms(from, to); }
  /// What mark() reads, for a person: "CUDA events on the stream", "host clock".
  virtual std::string clock() const { return "host clock"; }
  /// Free and total device memory; zeros where there is no device memory of
  /// its own (the emulation's is the host's).
  virtual MemoryInfo memory() const { return {}; }

  /// Records what `enqueue` enqueues on the backend's stream (launches,
  /// libraries' kernels such as cuBLASLt's, enqueue_host work) into a graph
  /// instead of running it. Kernel arguments, addresses included, are fixed
  /// at capture: a replay reads and writes the memory the capture named, with
  /// whatever it holds then. Nothing inside may wait for the device or copy
  /// between host and device; the CUDA driver refuses that (Error(kCuda)), and
  /// so does the emulation (Error(kInternal) naming the call). A failed
  /// capture leaves the backend as before it. The modules launched must
  /// outlive the graph.
  virtual std::unique_ptr<Graph> capture(const std::function<void()>& enqueue) = 0;
  /// Enqueues a graph this backend captured, on its stream.
  virtual void replay(const Graph& graph) = 0;
  /// Host work in stream order, after everything enqueued before it and
  /// before what follows; under emulation a capture records it. The default
  /// waits for the device, then runs it, so it cannot be captured on a GPU.
  virtual void enqueue_host(const std::function<void()>& work) {
    synchronize();
    work();
  }

  /// Times `enqueue` (which launches work through this backend) per the
  /// options: CUDA events with warm-up and L2 flush on a GPU; host wall time,
  /// labelled as such, under emulation. Never includes compiling or loading.
  /// `reset`, where given, enqueues work before each warm-up and repetition,
  /// outside what is timed (inputs an in-place kernel changed, restored).
  virtual Measurement time(const std::function<void()>& enqueue, const RunOptions& options, const std::string& what,
                           const std::function<void()>& reset) = 0;
  Measurement time(const std::function<void()>& enqueue, const RunOptions& options, const std::string& what) {
    return time(enqueue, options, what, {});
  }
  /// With `hold`, allocates now the device memory time() takes beside the
  /// work's own (a GPU's L2 flush buffer, twice the L2), and keeps it for
  /// every time() until called without: a caller that must know a
  /// measurement will not run out of memory (GEMM trials beside a training
  /// run's buffers) holds it first, and is told here, by the allocation's
  /// error, where it cannot. Without, each time() allocates and frees it.
  virtual void hold_timing_memory(bool hold) { (void)hold; }

 private:
  bool programmatic_ = false;
};

/// The backend on GPU `ordinal`; throws Error(kNoDevice) when there is none.
std::unique_ptr<Backend> make_cuda_backend(int ordinal = 0);

std::unique_ptr<Backend> make_emu_backend(EmuOptions options = {});

}  // namespace ktune::tuner::exec
