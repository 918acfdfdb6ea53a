// The run-time API of include/ktune/ktune.hpp over the library: an execution
// backend, the tuned cache service and TunedKernels (choose, render, compile,
// load), with kernel specs read into families on first use.
#include "ktune/ktune.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "base/env.hpp"
#include "base/error.hpp"
#include "cache/tuned_cache.hpp"
#include "search/stop.hpp"
#include "search/strategy.hpp"
#include "spec/spec_family.hpp"
#include "tuner/exec/backend.hpp"
#include "tuner/run/emu_runner.hpp"
#include "tuner/session/session.hpp"
#include "tuner/session/tuned_kernels.hpp"

namespace ktune {

struct Runtime::State {
  std::unique_ptr<tuner::exec::Backend> backend;
  bool emulated = false;  // the backend is the host emulation
  int ordinal = 0;        // else the CUDA device's
  std::unique_ptr<cache::TunedCache> tuned;
  std::unique_ptr<tuner::TunedKernels> kernels;
  std::unique_ptr<tuner::Runner> runner;  // Runtime::tune's, made on its first call
  std::map<std::string, const spec::SpecFamily*> specs;  // spec path -> family
  std::map<std::uint64_t, std::unique_ptr<tuner::exec::Buffer>> buffers;
  // Every module a Kernel was handed: they outlive a reloaded cache, not the
  // runtime (destroyed before the backend they were loaded into).
  std::set<std::shared_ptr<const tuner::exec::Module>> modules;
  // `kernels_mutex` guards choosing and compiling kernels (tuned, kernels,
  // specs, modules); `mutex` the device work (buffers, launches, copies), so
  // a first use compiling in one thread does not hold up another's launches.
  std::mutex kernels_mutex;
  std::mutex mutex;
  // Kernels handed out, by request (what, problem key): the same request
  // again is a look-up, which waits for no other thread's compile.
  std::map<std::pair<std::string, std::string>, std::shared_ptr<Kernel::State>> handed;
  std::mutex handed_mutex;

  State() = default;
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  /// The last Kernel or the Runtime may go on any thread: the backend is made current on it before the
  /// modules and buffers are freed (a GPU's unloads and frees act on the context current on the thread).
  ~State() {
    try {
      if (backend) backend->bind_thread();
    } catch (const Error&) {  // a context that cannot be made current: the frees below fail quietly
    }
  }

  /// The device work lock, with the calling thread readied for the backend.
  std::unique_lock<std::mutex> device_lock() {
    std::unique_lock lock(mutex);
    backend->bind_thread();
    return lock;
  }

  /// `tuned` as the cache kernel() chooses from; kernels handed out keep their modules.
  void use_cache(std::unique_ptr<cache::TunedCache> cache) {
    kernels = std::make_unique<tuner::TunedKernels>(*backend, cache.get());
    tuned = std::move(cache);
    std::lock_guard lock(handed_mutex);
    handed.clear();
  }

  /// What `what` names, as the key of a request: a built-in family's name, or a kernel spec's path made
  /// absolute (a relative path is the working folder's file at the call, wherever the folder was before).
  static std::string identity(const std::string& what);
  /// The family `identity` names: a kernel spec's absolute path, or a built-in family's name.
  const templates::Family& family_of(const std::string& identity);
  /// `family`'s kernel for `problem` from the cache in use, compiled and loaded on first use.
  std::shared_ptr<Kernel::State> kernel_of(const std::shared_ptr<State>& self, const templates::Family& family,
                                           const templates::Problem& problem);

  /// The allocation `address` lies in (its start, or a byte inside it), or null.
  const tuner::exec::Buffer* holding(std::uint64_t address) const {
    const auto it = buffers.upper_bound(address);
    if (it == buffers.begin()) return nullptr;
    const auto& held = *std::prev(it)->second;
    return address == held.address() || address - held.address() < held.bytes() ? &held : nullptr;
  }
  /// `bytes` at `address` in an allocation, for a copy: the allocation and the offset there.
  std::pair<const tuner::exec::Buffer*, std::size_t> range(std::uint64_t address, std::size_t bytes,
                                                           const char* what) const {
    const auto* held = holding(address);
    KTUNE_REQUIRE(held != nullptr, fmt::format("{:#x} is not inside an allocation of Runtime::allocate", address));
    const std::size_t offset = address - held->address();
    KTUNE_REQUIRE(bytes <= held->bytes() - offset,
                  fmt::format("{} of {} bytes at {:#x} runs past the end of its allocation ({} bytes at {:#x})", what,
                              bytes, address, held->bytes(), held->address()));
    return {held, offset};
  }

  const tuner::exec::Buffer& buffer(std::uint64_t address) const {
    const auto it = buffers.find(address);
    KTUNE_REQUIRE(it != buffers.end(), fmt::format("{:#x} is not an address Runtime::allocate returned", address));
    return *it->second;
  }
};

struct Kernel::State {
  // A kernel keeps neither its runtime (memory, device) nor its module alive.
  std::weak_ptr<Runtime::State> runtime;
  std::weak_ptr<const tuner::exec::Module> module;
  tuner::TunedKernel kernel;  // its module null: `module` is the runtime's
  std::string name;
  std::string not_stored;  // why the binary cache did not keep its compile ("": it did)
  std::vector<templates::BufferShape> shapes;  // its buffers, in launch order
  std::vector<std::pair<std::string, std::string>> in_place;  // (output, input) that may share an address

  std::shared_ptr<Runtime::State> live_runtime() const {
    auto rt = runtime.lock();
    KTUNE_REQUIRE(rt != nullptr, fmt::format("kernel {}: the Runtime it came from is destroyed, and its memory and "
                                             "modules with it; keep the Runtime while its kernels launch",
                                             name));
    return rt;
  }
};

Kernel::Kernel() = default;
Kernel::Kernel(std::shared_ptr<State> state) : state_(std::move(state)) {}

const Kernel::State& Kernel::state() const {
  KTUNE_REQUIRE(state_ != nullptr, "an empty Kernel (made by its default constructor, or moved from): assign it "
                                   "one from Runtime::kernel or Runtime::tune first");
  return *state_;
}
Kernel::Kernel(const Kernel&) = default;
Kernel& Kernel::operator=(const Kernel&) = default;
Kernel::Kernel(Kernel&&) noexcept = default;
Kernel& Kernel::operator=(Kernel&&) noexcept = default;
Kernel::~Kernel() = default;

const std::string& Kernel::name() const { return state().name; }
const std::string& Kernel::reason() const { return state().kernel.chosen.source; }
std::string Kernel::config() const { return state().kernel.chosen.config.str(); }
const std::string& Kernel::not_stored() const { return state().not_stored; }
Match Kernel::match() const {
  switch (state().kernel.chosen.match) {
    case cache::Match::kExact: return Match::kExact;
    case cache::Match::kNearest: return Match::kNearest;
    case cache::Match::kNone: break;
  }
  return Match::kDefault;
}

void Kernel::launch(const std::vector<std::uint64_t>& buffers) const { launch(buffers, Parameters{}); }

void Kernel::launch(const std::vector<std::uint64_t>& buffers, std::uint64_t stream) const {
  launch(buffers, Parameters{}, stream);
}

void Kernel::launch(const std::vector<std::uint64_t>& buffers, const Parameters& parameters) const {
  launch(buffers, parameters, state().live_runtime()->backend->native_stream());
}

Parameters Kernel::parameters() const { return state().kernel.family->scalars(state().kernel.problem); }

std::vector<BufferInfo> Kernel::buffers() const {
  std::vector<BufferInfo> out;
  for (const auto& s : state().shapes) {
    std::string in_place_of;
    for (const auto& [output, input] : state().in_place)
      if (output == s.name) in_place_of = input;
    out.push_back({s.name, templates::to_string(s.role), templates::to_string(s.dtype), s.bytes, in_place_of});
  }
  return out;
}

namespace {

bool written(templates::Role role) { return role != templates::Role::kInput; }

/// Refuses a buffer the kernel writes (an output, inout or scratch) whose
/// bytes overlap another buffer's, unless the family lets it be written in
/// place of that input at the very same address: a kernel reading what
/// another thread already overwrote gives no error, only wrong numbers (two
/// AdamW moments in one buffer). Inputs may share memory. Sorted by
/// address, each buffer is compared with those before it that reach it.
void require_apart(const std::string& kernel, const std::vector<templates::BufferShape>& shapes,
                   const std::vector<std::pair<std::string, std::string>>& in_place,
                   const std::vector<std::uint64_t>& addresses) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < std::min(addresses.size(), shapes.size()); ++i)
    if (addresses[i] != 0 && shapes[i].bytes != 0) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return addresses[a] < addresses[b]; });
  const auto end = [&](std::size_t i) { return addresses[i] + shapes[i].bytes; };
  const auto allowed = [&](std::size_t out, std::size_t in) {
    return std::find(in_place.begin(), in_place.end(), std::pair{shapes[out].name, shapes[in].name}) !=
           in_place.end();
  };
  std::vector<std::size_t> reaching;  // earlier buffers that may reach the next ones
  for (const std::size_t j : order) {
    std::erase_if(reaching, [&](std::size_t i) { return end(i) <= addresses[j]; });
    for (const std::size_t i : reaching) {
      if (!written(shapes[i].role) && !written(shapes[j].role)) continue;
      const auto [a, b] = std::minmax(i, j);
      const bool may = allowed(a, b) || allowed(b, a);
      if (may && addresses[a] == addresses[b]) continue;
      const auto name = [&](std::size_t k) {
        return fmt::format("buffer {} ('{}', {})", k + 1, shapes[k].name, templates::to_string(shapes[k].role));
      };
      throw_error(ErrorKind::kInvalidInput,
                  fmt::format("{}: {} at {:#x} overlaps {} at {:#x}; {}", kernel, name(b), addresses[b], name(a),
                              addresses[a],
                              may ? fmt::format("'{}' may be written in place of '{}' only at the very same address",
                                                shapes[allowed(a, b) ? a : b].name, shapes[allowed(a, b) ? b : a].name)
                                  : "the kernel writes one while it reads the other; give it memory of its own"));
    }
    reaching.push_back(j);
  }
}

}  // namespace

void Kernel::launch(const std::vector<std::uint64_t>& buffers, const Parameters& parameters,
                    std::uint64_t stream) const {
  const auto runtime = state().live_runtime();
  auto& rt = *runtime;
  const auto& k = state().kernel;
  const auto lock = rt.device_lock();
  {  // an allocation of the runtime's too small for its buffer, before the kernel writes past it
    const auto& shapes = state().shapes;
    for (std::size_t i = 0; i < std::min(buffers.size(), shapes.size()); ++i) {
      // A null address would fault in the kernel (and on a GPU take the context with it): none is optional.
      KTUNE_REQUIRE(buffers[i] != 0 || shapes[i].bytes == 0,
                    fmt::format("{}: buffer {} ('{}', {} bytes) is the null address", state().name, i + 1,
                                shapes[i].name, shapes[i].bytes));
      const auto* found = rt.holding(buffers[i]);  // null: the program's own memory
      // The emulation's device memory is the runtime's allocations: any other address is host memory.
      KTUNE_REQUIRE(found || !rt.emulated || buffers[i] == 0,
                    fmt::format("{}: buffer {} ('{}') at {:#x} is not inside an allocation of Runtime::allocate; "
                                "under the emulation that is the only device memory",
                                state().name, i + 1, shapes[i].name, buffers[i]));
      if (!found) continue;
      const auto& held = *found;
      const std::uint64_t from = buffers[i] - held.address();
      if (held.bytes() - from >= shapes[i].bytes) continue;
      throw_error(ErrorKind::kInvalidInput,
                  fmt::format("{}: buffer {} ('{}', {} {}) needs {} bytes, but {}", state().name, i + 1,
                              shapes[i].name, templates::to_string(shapes[i].dtype),
                              templates::to_string(shapes[i].role), shapes[i].bytes,
                              from ? fmt::format("only {} lie from the address given to the end of the allocation "
                                                 "at {:#x} ({} bytes)",
                                                 held.bytes() - from, held.address(), held.bytes())
                                   : fmt::format("the allocation at {:#x} holds {}", held.address(), held.bytes())));
    }
  }
  require_apart(state().name, state().shapes, state().in_place, buffers);
  const auto module = state().module.lock();  // alive while its runtime is
  rt.backend->launch(*module, k.family->plan(k.chosen.config, k.problem, buffers, rt.backend->device(), parameters),
                     stream);
}

Runtime::Runtime(const std::string& backend) : state_(std::make_shared<State>()) {
  // "gpu:N": CUDA device N (as CUDA numbers them), a non-negative decimal.
  std::optional<int> ordinal;
  if (backend == "gpu") ordinal = 0;
  if (const std::string n = backend.rfind("gpu:", 0) == 0 ? backend.substr(4) : "";
      !n.empty() && n.find_first_not_of("0123456789") == std::string::npos) {
    KTUNE_REQUIRE(n.size() <= 4, fmt::format("backend '{}': no CUDA device has that number (devices are numbered "
                                             "from 0; `ktune devices` lists them)",
                                             backend));
    ordinal = std::stoi(n);
  }
  KTUNE_REQUIRE(ordinal || backend == "emu",
                fmt::format("backend '{}' is not one of gpu (the CUDA device 0{}), gpu:N (device N), emu (the host "
                            "emulation)",
                            backend, backend == "cuda" ? ", the model's --backend cuda" : ""));
  state_->emulated = !ordinal;
  state_->ordinal = ordinal.value_or(0);
  try {
    state_->backend = state_->emulated ? tuner::exec::make_emu_backend() : tuner::exec::make_cuda_backend(*ordinal);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kNoDevice) throw;
    throw_error(ErrorKind::kNoDevice, fmt::format("no CUDA device: {}; Runtime(\"emu\") runs kernels without one, "
                                                  "on the CPU under the host emulation",
                                                  e.what()));
  }
  state_->kernels = std::make_unique<tuner::TunedKernels>(*state_->backend, nullptr);
}

Runtime::~Runtime() = default;
Runtime::Runtime(Runtime&&) noexcept = default;
Runtime& Runtime::operator=(Runtime&&) noexcept = default;

Runtime::State& Runtime::state() const {
  KTUNE_REQUIRE(state_ != nullptr, "a Runtime moved from: use the Runtime it was moved to");
  return *state_;
}

void Runtime::load_cache(const std::string& path, bool nearest) {
  KTUNE_REQUIRE(!path.empty(), "load_cache: no tuned cache file given (an empty path)");
  std::lock_guard lock(state().kernels_mutex);
  auto cache = std::make_unique<cache::TunedCache>(cache::TunedCache::read(path));
  cache->set_nearest(nearest);
  state().use_cache(std::move(cache));
}

std::string Runtime::State::identity(const std::string& what) {
  // A spec is a path: a .json name (in any case), a name with a folder, or a file that is there.
  std::string suffix = what.size() > 5 ? what.substr(what.size() - 5) : "";
  std::transform(suffix.begin(), suffix.end(), suffix.begin(), [](unsigned char c) { return std::tolower(c); });
  std::error_code ec;
  // A family's name is the family, whatever the working folder holds; a name that is neither stays as given
  // (family_of names the families).
  if (suffix != ".json" && what.find('/') == std::string::npos &&
      (templates::family_named(what) || !std::filesystem::exists(what, ec)))
    return what;
  // Absolute and normal, links kept: a spec's sources are read from its own folder, the link's where it is one,
  // as `ktune tune --spec` reads them (a link's target's folder may hold other sources of the same names).
  const auto path = std::filesystem::absolute(what, ec).lexically_normal();
  return ec || path.empty() ? what : path.string();
}

const templates::Family& Runtime::State::family_of(const std::string& what) {
  std::error_code ec;
  if (what.find('/') == std::string::npos) {
    if (const templates::Family* f = templates::family_named(what)) return *f;
    if (!std::filesystem::exists(what, ec)) return templates::find_family(what);  // throws, naming the families
  }
  KTUNE_REQUIRE(!std::filesystem::is_directory(what, ec),
                fmt::format("{} is a folder; give the kernel spec file (the .json beside your .cu)", what));
  auto& known = specs[what];
  if (!known) known = &spec::load_spec_family(what);
  // What the emulation cannot run is named in one line, before the host compiler tries it.
  if (emulated) known->require_emulation();
  return *known;
}

std::shared_ptr<Kernel::State> Runtime::State::kernel_of(const std::shared_ptr<State>& self,
                                                         const templates::Family& family,
                                                         const templates::Problem& problem) {
  kernels->prepare({{&family, problem}});
  auto k = std::make_shared<Kernel::State>();
  k->runtime = self;
  k->kernel = kernels->get(family, problem);
  modules.insert(k->kernel.module);
  k->not_stored = k->kernel.module->not_stored();
  k->module = std::exchange(k->kernel.module, nullptr);
  k->name = family.name();
  k->shapes = family.buffer_shapes(problem);
  k->in_place = family.in_place(problem);
  if (const auto* spec = dynamic_cast<const spec::SpecFamily*>(&family)) {
    // A default that is not the spec's says why.
    const auto declared = spec->declared_default();
    std::string why;
    if (k->kernel.chosen.match == cache::Match::kNone && declared && *declared != k->kernel.chosen.config &&
        !family.is_valid(*declared, problem, backend->device(), &why))
      k->kernel.chosen.source += fmt::format("; the spec's default {} is not valid for this problem ({}), so the "
                                             "first valid point",
                                             declared->str(), why);
  }
  return k;
}

Kernel Runtime::kernel(const std::string& what, const ProblemSize& size) {
  auto& st = state();
  const templates::Problem problem{size.dtype, size.dims};
  const auto request = std::pair{State::identity(what), problem.key()};
  {
    std::lock_guard lock(st.handed_mutex);
    if (const auto it = st.handed.find(request); it != st.handed.end()) return Kernel(it->second);
  }
  std::lock_guard lock(st.kernels_mutex);
  st.backend->bind_thread();  // a GPU module loads into the context current on this thread
  const templates::Family& family = st.family_of(request.first);
  family.check(problem);
  auto k = st.kernel_of(state_, family, problem);
  std::lock_guard handed(st.handed_mutex);
  st.handed[request] = k;
  return Kernel(std::move(k));
}

Kernel Runtime::tune(const std::string& what, const ProblemSize& size, const TuneSettings& settings) {
  std::lock_guard lock(state().kernels_mutex);
  auto& st = state();
  st.backend->bind_thread();
  const templates::Family& family = st.family_of(State::identity(what));
  const templates::Problem problem{size.dtype, size.dims};
  family.check(problem);
  tuner::TuneOptions options;
  options.strategy = settings.strategy.empty() ? tuner::kDefaultStrategy : settings.strategy;
  options.budget = settings.budget.empty() ? tuner::kDefaultBudget : settings.budget;
  options.seed = settings.seed;
  options.run.seed = settings.seed;
  options.run.time = true;
  search::require_strategy(options.strategy);  // bad settings before any work
  search::parse_budget(options.budget);
  std::optional<cache::CacheFile> file;
  std::vector<cache::Entry> in_file;
  if (!settings.cache_file.empty()) {
    file.emplace(settings.cache_file);
    in_file = file->load();  // a corrupt file, or one that cannot be written, stops us before the search
    file->check_writable();
  }
  if (!st.runner) st.runner = tuner::make_runner(st.emulated, {}, st.ordinal);  // on this runtime's device
  const auto& device = st.runner->device();
  options.log_path = tuner::default_log_path(family, problem);
  options.default_log = true;
  // One thread stays with the runner, the rest compile ahead of it: KTUNE_COMPILE_THREADS, else cores (as tune's).
  options.compile_ahead_threads = env::compile_threads() - 1;
  // What the runtime's cache holds for the problem competes, else what the file the winner goes to holds (as
  // `ktune tune --cache` defends its file's entry).
  const bool held = tuner::choose_config(family, problem, device, st.tuned.get()).match == cache::Match::kExact &&
                    tuner::take_incumbent(options, st.tuned->entries(), family, problem, device);
  if (!held) tuner::take_incumbent(options, in_file, family, problem, device);
  const tuner::TuneSummary summary = tuner::tune(family, problem, *st.runner, options);
  if (!summary.best) {
    const auto failed = std::find_if(summary.records.begin(), summary.records.end(),
                                     [](const search::Record& r) { return !r.outcome.ok; });
    throw_error(ErrorKind::kCheckFailed,
                fmt::format("tuning {} on {}: none of the {} configs measured ran correctly{}; `ktune log show {}{}` "
                            "lists why each failed",
                            family.name(), problem.key(), summary.evaluations,
                            failed == summary.records.end()
                                ? ""
                                : fmt::format(" (the first, {}: {})", failed->config.str(),
                                              failed->outcome.failure.substr(0, failed->outcome.failure.find('\n'))),
                            summary.log_path,
                            dynamic_cast<const spec::SpecFamily*>(&family) ? " --spec " + what : std::string()));
  }
  const cache::Entry entry = tuner::cache_entry(family, problem, device, summary);
  // The file keeps the better of the winner and an entry of its own that did not compete (the runtime's cache
  // held another for the problem, or another process wrote it since), as `ktune tune --cache` keeps it.
  std::optional<cache::Entry> file_kept;
  if (file) {
    std::vector<cache::Entry> competed = in_file;
    if (held) {
      const auto& loaded = st.tuned->entries();
      const auto ran = std::find_if(loaded.begin(), loaded.end(), [&](const cache::Entry& e) {
        return e.key.identity() == entry.key.identity();
      });
      std::erase_if(competed, [&](const cache::Entry& e) {
        return e.key.identity() == entry.key.identity() &&
               (ran == loaded.end() || cache::to_json(e) != cache::to_json(*ran));
      });
    }
    file_kept = file->put_winner(entry, competed);
  }
  std::vector<cache::Entry> entries = st.tuned ? st.tuned->entries() : std::vector<cache::Entry>{};
  std::erase_if(entries, [&](const cache::Entry& e) { return e.key.where() == entry.key.where(); });
  entries.push_back(entry);
  auto cache = std::make_unique<cache::TunedCache>(std::move(entries), st.tuned ? st.tuned->origin() : "");
  cache->set_nearest(!st.tuned || st.tuned->nearest());
  st.use_cache(std::move(cache));
  st.backend->bind_thread();  // the runner's context may be current: the kernel loads into the runtime's
  auto k = st.kernel_of(state_, family, problem);
  k->kernel.chosen.source =
      fmt::format("exact (tuned now: {} configs measured in {:.1f} s, {:.2f}x over the default{}; session log {}{})",
                  summary.evaluations, summary.seconds, summary.speedup_over_default(),
                  summary.kept_note.empty() ? "" : "; " + summary.kept_note, summary.log_path,
                  file_kept ? fmt::format("; {} keeps its entry {} at {:.4f} ms, which this session did not measure "
                                          "and which is the better, not this winner",
                                          settings.cache_file, file_kept->config.dump(), file_kept->time_ms)
                            : std::string());
  return Kernel(std::move(k));
}

std::uint64_t Runtime::allocate(std::size_t bytes) {
  const auto lock = state().device_lock();
  auto buffer = state().backend->allocate(bytes, "runtime buffer");
  const std::uint64_t address = buffer->address();
  state().buffers[address] = std::move(buffer);
  return address;
}

void Runtime::free(std::uint64_t address) {
  const auto lock = state().device_lock();
  state().buffer(address);
  state().buffers.erase(address);
}

void Runtime::upload(std::uint64_t address, const void* host, std::size_t bytes) {
  KTUNE_REQUIRE(host != nullptr || bytes == 0, fmt::format("upload of {} bytes from a null host pointer", bytes));
  const auto lock = state().device_lock();
  const auto [held, offset] = state().range(address, bytes, "an upload");
  state().backend->upload_range(*held, offset, host, bytes);
}

void Runtime::download(void* host, std::uint64_t address, std::size_t bytes) {
  KTUNE_REQUIRE(host != nullptr || bytes == 0, fmt::format("download of {} bytes to a null host pointer", bytes));
  const auto lock = state().device_lock();
  const auto [held, offset] = state().range(address, bytes, "a download");
  state().backend->download_range(host, *held, offset, bytes);
}

std::uint64_t Runtime::stream() const { return state().backend->native_stream(); }
void Runtime::synchronize() {
  const auto lock = state().device_lock();
  state().backend->synchronize();
}
std::string Runtime::backend() const { return state().backend->name(); }
std::string Runtime::device() const { return state().backend->device().name; }

}  // namespace ktune
