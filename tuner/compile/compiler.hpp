// NVRTC compilation of rendered sources to cubin, with the compiler's
// resource report, an on-disk binary cache and a thread pool. A variant that
// fails to compile is a result carrying the log and options, never a throw.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "templates/family.hpp"

namespace ktune::tuner {

/// What ptxas reported for one kernel.
struct KernelResources {
  std::string name_expression;
  std::string lowered_name;
  int registers = 0;
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
  int stack_bytes = 0;
  int static_smem_bytes = 0;
  int spill_bytes() const { return spill_store_bytes + spill_load_bytes; }
};

struct CompileResult {
  bool ok = false;
  std::string arch;
  std::string key;      ///< binary cache key (hash of source, options, arch, NVRTC version)
  std::string cubin;    ///< the binary (empty on failure)
  std::string log;      ///< compiler log (errors, or ptxas' report)
  std::vector<std::string> options;
  std::vector<KernelResources> kernels;  ///< same order as Rendered::kernels
  double compile_ms = 0;  ///< NVRTC time (0 on a cache hit)
  bool cache_hit = false;
  /// Why the binary cache could not keep this compile (a full disk, a read-only cache folder): the result stands,
  /// and a later run compiles it again. Empty when it was kept, on a hit or a failure, and without a cache.
  std::string not_stored;
};

/// The compiles of this process (and of its workers, as their runners report them) that the binary cache could not
/// keep: how many, and why the first was not kept. A command says so once, at its end.
struct NotStored {
  std::size_t compiles = 0;
  std::string why;
};
NotStored not_stored_so_far();
/// Counts one compile not kept, for `why` (Compiler::compile counts its own).
void note_not_stored(const std::string& why);

/// "13.0"
std::string nvrtc_version();
/// The NVRTC library this process runs, as its ELF build id ("" where it has none): a patch release of the same
/// major.minor is another build, whose cubins the binary cache keeps apart.
const std::string& nvrtc_build();

/// Parses ptxas' `-v` report; entries keyed by lowered name. Exposed for tests.
std::vector<KernelResources> parse_ptxas_report(const std::string& log);

class Compiler {
 public:
  /// Caches binaries under `cache_dir` (default: env::cache_dir()/cubin).
  /// An empty `cache_dir` with `use_cache` false disables the cache.
  explicit Compiler(bool use_cache = true);
  Compiler(std::string cache_dir, bool use_cache);

  /// Compiles `rendered` for `arch` ("sm_80", "sm_90", "sm_90a", ...); an
  /// arch-specific source (Rendered::arch_specific) for sm_90 is compiled for
  /// sm_90a, and CompileResult::arch says so.
  CompileResult compile(const templates::Rendered& rendered, const std::string& arch) const;
  /// The binary cache's key of `rendered` for `arch` (CompileResult::key).
  std::string key(const templates::Rendered& rendered, const std::string& arch) const;
  /// True when the binary cache already holds `rendered` for `arch`.
  bool cached(const templates::Rendered& rendered, const std::string& arch) const;
  /// Compiles many sources at once on `threads` workers (0: env default).
  /// `done`, when given, is called on the calling thread as results arrive
  /// (in submission order) with how many are done.
  std::vector<CompileResult> compile_many(const std::vector<templates::Rendered>& sources, const std::string& arch,
                                          unsigned threads = 0,
                                          const std::function<void(std::size_t done, const CompileResult&)>& done = {})
      const;

  const std::string& cache_dir() const { return cache_dir_; }

 private:
  std::string cache_dir_;
  bool use_cache_;
};

}  // namespace ktune::tuner
