// ktune's run-time API for C++ programs: load a tuned cache, get a kernel for
// a kernel spec (docs/kernel-spec.md) or a built-in family and a problem —
// the cache's exact entry, else its nearest tuned shape, else the default,
// with the reason — compiled on first use through the binary cache, and
// launch it. Link it with CMake:
//
//   find_package(ktune REQUIRED)
//   target_link_libraries(app PRIVATE ktune::ktune)
//
//   ktune::Runtime rt;                                  // CUDA device 0 ("emu": the host emulation)
//   rt.load_cache("tuned.json");
//   ktune::Kernel k = rt.kernel("matmul.json", {"f32", {{"m", 4096}, {"n", 4096}, {"k", 4096}}});
//   std::printf("%s: %s\n", k.config().c_str(), k.reason().c_str());
//   k.launch({a, b, c});                                // device addresses, in the order of k.buffers()
//   k.launch({a, b, c}, reinterpret_cast<std::uint64_t>(my_stream));  // or on your CUstream / cudaStream_t
//   rt.synchronize();
//
// A problem the cache has no entry for can be tuned from the program, as
// Triton's autotuner does on a new key, and kept for the next run:
//
//   ktune::TuneSettings how;
//   how.cache_file = "tuned.json";                      // the winner is written here too
//   if (k.match() != ktune::Match::kExact) k = rt.tune("matmul.json", problem, how);
//
// Errors are thrown as ktune::Error (error.hpp), a std::runtime_error whose
// what() is one line (a failed compile's goes on with the compiler's log)
// and whose kind() says what went wrong: kInvalidInput for a bad argument,
// kNoDevice, kCompile, kCheckFailed for a tuning session that found no
// config that runs correctly, ... Compiled kernels are kept on disk in
// $KTUNE_CACHE_DIR, else $XDG_CACHE_HOME/ktune, else ~/.cache/ktune (set the
// variable before the first kernel() to keep them elsewhere). A Kernel is
// valid while its Runtime lives: launching it after throws, and the Runtime's
// memory and modules go with it. A Runtime
// and its Kernels may be used from several threads (each call readies its
// thread, a GPU's context made current there); a kernel compiling on first
// use holds up no other thread's launches, copies or requests for a kernel
// it was handed before.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "error.hpp"

namespace ktune {

/// A problem: the compute dtype and named dimensions.
struct ProblemSize {
  std::string dtype = "f32";
  std::map<std::string, std::int64_t> dims;
};

/// A kernel's run-time parameters by name: the scalars it takes beside its buffers (a kernel spec's
/// `parameters`; a family's, as AdamW's lr, beta1, beta2, eps, weight_decay and step, or a softmax's scale).
using Parameters = std::map<std::string, double>;

/// Where a kernel's config came from.
enum class Match {
  kExact,    ///< the tuned cache's entry for this problem
  kNearest,  ///< the nearest tuned problem of the same kernel, dtype and GPU architecture
  kDefault,  ///< no usable entry: the spec's (or family's) default config
};

class Runtime;

/// A buffer a kernel takes, in launch() order.
struct BufferInfo {
  std::string name;
  std::string role;   ///< "input", "output", "inout", or "scratch" (a workspace: any contents)
  std::string dtype;  ///< "f32", "bf16", "f16", "i32", "i64", "u8"
  std::size_t bytes = 0;  ///< what the problem needs (a scratch buffer: enough for every config)
  /// An output the kernel may write in place of an input: that input's name (cross_entropy_bwd's dlogits over
  /// its logits, a softmax's y over x), given the very same address. Empty: none. Any other buffer written
  /// (an output, inout or scratch) that overlaps another buffer is refused at launch.
  std::string in_place_of;
};

/// How Runtime::tune searches: `ktune tune`'s options of the same names.
struct TuneSettings {
  std::string strategy;  ///< empty: ktune tune's default ("auto")
  /// When the search stops: evaluations ("200"), time ("15m", "90s"), "plateau:N" (N evaluations found nothing
  /// faster), joined by '+' for whichever comes first. Empty: ktune tune's default ("plateau:200+1h"), which
  /// may take the hour: give a program's tune a budget it can wait for.
  std::string budget;
  std::uint64_t seed = 1;  ///< of the strategy and of the inputs each variant is checked on
  /// A tuned cache file the winner is written into as well (created if missing, locked while written), for
  /// the next run's load_cache; empty: the winner serves this Runtime only.
  std::string cache_file;
};

/// A kernel compiled for one problem, ready to launch.
class Kernel {
 public:
  /// An empty kernel, to be assigned one (a class member, say); its other calls throw until then.
  Kernel();
  Kernel(const Kernel&);
  Kernel& operator=(const Kernel&);
  Kernel(Kernel&&) noexcept;  ///< leaves the other empty
  Kernel& operator=(Kernel&&) noexcept;
  ~Kernel();

  const std::string& name() const;  ///< the spec's or family's name
  Match match() const;
  /// Why match() is what it is, for people (branch on match()): "exact", "exact (tuned now: ...)" after
  /// Runtime::tune, "nearest (distance 1.00, tuned for f32;k=32;m=64;n=48)" (+ " on GPU" when another GPU of
  /// the arch tuned it), "default (no tuned cache)", "default (no usable tuned entry)" (+ why, where an entry
  /// for the problem is stale: another kernel source, NVRTC or driver), "default (no exact entry; nearest shapes
  /// not taken)" (load_cache with `nearest` false), "default (the exact entry's config is not valid here)";
  /// a spec's default that is not valid for the problem adds why the first valid point runs instead.
  const std::string& reason() const;
  std::string config() const;  ///< the chosen config as JSON, e.g. {"tile":16,"wpt":2}
  /// Why the binary cache did not keep this kernel's compile (its folder under KTUNE_CACHE_DIR cannot be
  /// written, say): the kernel runs, and the next run compiles it again, so a program may warn of its
  /// start-up time. Empty where the compile was kept or came from there (always under the emulation, which
  /// refuses a folder it cannot write).
  const std::string& not_stored() const;
  /// The buffers launch() takes, in its order: name, role, dtype and bytes.
  std::vector<BufferInfo> buffers() const;
  /// The run-time parameters launch() takes, with the values its checks and tuning use (and a launch without
  /// them): a spec's `parameters`; AdamW's hyper-parameters and step, the softmax and attention scales,
  /// cross_entropy_bwd's scale (1 / rows: the mean loss), grad_norm's max_norm, a primitive's alpha. Empty: none.
  /// These are the values a kernel is checked and tuned with, not a training run's: AdamW's (lr 0.01, step 3,
  /// weight decay 0.1) are not PyTorch's defaults, and a training loop gives its lr and step at every launch.
  Parameters parameters() const;

  /// Enqueues the kernel on the runtime's stream with `buffers` (device
  /// addresses from Runtime::allocate or your own, in the order of buffers();
  /// scalars come from the problem and parameters()). An address from Runtime::allocate (or
  /// inside one) with fewer bytes from there than buffers() says, or the null
  /// address, is refused before the launch; your own are not checked (under the emulation, whose
  /// device memory is the runtime's allocations, they are refused). Returns
  /// at once on a GPU; the emulation runs it before returning.
  void launch(const std::vector<std::uint64_t>& buffers) const;
  /// The same on your own `stream` (a CUstream as an integer, created in the
  /// device's primary context, as the CUDA runtime's streams are), ordered
  /// with your work on it and not with the runtime's stream: synchronize it
  /// before Runtime::download. The emulation runs the kernel at once.
  void launch(const std::vector<std::uint64_t>& buffers, std::uint64_t stream) const;
  /// Either, with run-time parameters given values (those not given keep parameters()' values): e.g.
  /// `k.launch({x, y}, {{"alpha", 0.5}})`, `adamw.launch(buffers, {{"lr", 3e-4}, {"step", 12}})`. A name the
  /// kernel does not take, or a value it cannot (a step 0), is refused before the launch. (`k.launch(b, {})`
  /// is the stream overload, stream 0: write `k.launch(b)` for the runtime's stream.)
  void launch(const std::vector<std::uint64_t>& buffers, const Parameters& parameters) const;
  void launch(const std::vector<std::uint64_t>& buffers, const Parameters& parameters, std::uint64_t stream) const;

 private:
  friend class Runtime;
  struct State;
  explicit Kernel(std::shared_ptr<State> state);
  const State& state() const;
  std::shared_ptr<State> state_;
};

class Runtime {
 public:
  /// `backend`: "gpu" (CUDA device 0; throws kNoDevice when there is none), "gpu:N" (CUDA device N, as CUDA
  /// numbers them: CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER apply; kInvalidInput past the last) or "emu"
  /// (the host emulation: kernels compiled by the host compiler, run on the CPU). Under the emulation a launch
  /// installs handlers for SIGSEGV, SIGBUS, SIGFPE and SIGUSR2 while it runs (a kernel's faults and hangs become
  /// errors) and passes every signal that is not its own on to the program's handler.
  explicit Runtime(const std::string& backend = "gpu");
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;
  /// Moves the device, memory and kernels to another Runtime (kernels handed out stay valid); the one moved
  /// from throws on every call.
  Runtime(Runtime&&) noexcept;
  Runtime& operator=(Runtime&&) noexcept;

  /// Reads a tuned cache (`ktune tune --cache`); later kernel() calls use it. `nearest` false: a problem
  /// without an exact entry gets the default config, not the nearest tuned shape's.
  void load_cache(const std::string& path, bool nearest = true);

  /// The kernel for `problem`: `what` is a built-in family's name (`ktune families`) or a kernel spec file (a
  /// path: it ends in .json, has a folder, or is a file there that is no family's name). Compiled on first use
  /// (binary cache on disk, under KTUNE_CACHE_DIR: where that cannot be written, the kernel is compiled and runs,
  /// the next run compiles it again, and Kernel::not_stored says why); the same (kernel, problem) again returns
  /// the loaded one.
  Kernel kernel(const std::string& what, const ProblemSize& problem);

  /// Tunes `what` for `problem` now and returns the winner's kernel (match() kExact; reason() says how many
  /// configs were measured and the speed-up over the default). It searches as `ktune tune` does (every variant
  /// validated against the reference before it is timed; the session logged under the cache folder, so
  /// `ktune log show` reads it), on this runtime's device, but in this process: a variant that faults the GPU
  /// ends the program and one that never ends hangs it, where `ktune tune` runs each in a worker process,
  /// killed past its --timeout (tune kernels you do not trust that way). Variants are compiled ahead in a
  /// child process it forks (and ends before returning), as `ktune tune` does. The times are taken while the
  /// program's other threads run. A config the cache holds for the problem competes in the session. The winner
  /// goes into this runtime's cache (later kernel() calls get it) and into `settings.cache_file`. Other
  /// threads' tune() calls and requests for kernels not handed out before wait for it; their launches do not.
  /// Throws when no config runs correctly, naming the first failure.
  Kernel tune(const std::string& what, const ProblemSize& problem, const TuneSettings& settings = {});

  /// Device memory of this runtime's backend; freed by free() or with the runtime.
  std::uint64_t allocate(std::size_t bytes);
  void free(std::uint64_t address);
  /// Copies in order with the runtime's stream: each waits for the kernels
  /// launched there before it, and is complete on return. `address` is an
  /// allocation's or a byte inside one (a tensor laid out in a larger
  /// allocation); the copy must end inside it.
  void upload(std::uint64_t address, const void* host, std::size_t bytes);
  void download(void* host, std::uint64_t address, std::size_t bytes);

  /// The CUstream launches are enqueued on (0 under the emulation), so a
  /// program can order its own work with ktune's.
  std::uint64_t stream() const;
  void synchronize();
  std::string backend() const;  ///< "gpu" | "emu"
  std::string device() const;   ///< the GPU's name, or the emulated profile's

 private:
  friend class Kernel;
  struct State;
  State& state() const;  ///< throws on a Runtime moved from
  std::shared_ptr<State> state_;
};

}  // namespace ktune
