// The kernel family interface (STYLE.md habits 1-3): everything about one
// kernel lives in templates/<family>/ behind this class — its search space
// and constraints, rendering to self-contained source with NVRTC name
// expressions, launch plan, workload with CPU reference, FLOP/byte counts.
// Runners (GPU, emulation, replay) and the search never see more than this.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/space.hpp"

namespace ktune::templates {

/// Element types of buffers and problems.
enum class DType { kF32, kBF16, kF16, kI32, kI64, kU8 };
const char* to_string(DType t);
DType parse_dtype(const std::string& s);  ///< "f32" | "bf16" | "f16" | ...; throws kInvalidInput
std::size_t size_of(DType t);

/// What a family may assume about the target. Filled from the live device,
/// or from a built-in profile when compiling offline (`for_arch`).
struct DeviceLimits {
  std::string name = "offline profile";  ///< the GPU's name, or the profile's
  int driver_version = 0;                ///< cuDriverGetVersion, 0 offline
  std::string arch = "sm_90";           ///< NVRTC target, e.g. "sm_80", "sm_90a"
  int sm = 90;                          ///< compute capability, major*10 + minor
  int sm_count = 132;                   ///< multiprocessors
  int max_threads_per_block = 1024;
  int max_static_smem = 48 * 1024;      ///< static __shared__ limit per block
  int max_smem_per_block = 227 * 1024;  ///< with the dynamic opt-in
  int smem_per_sm = 228 * 1024;
  int regs_per_sm = 65536;
  int max_regs_per_thread = 255;
  int max_threads_per_sm = 2048;
  int max_blocks_per_sm = 32;
  long long l2_bytes = 50LL << 20;

  /// Built-in profile for "sm_80", "sm_86", "sm_89", "sm_90" or "sm_90a";
  /// throws kInvalidInput listing those for anything else.
  static DeviceLimits for_arch(const std::string& arch);
  static std::vector<std::string> known_archs();

  nlohmann::json to_json() const;
  static DeviceLimits from_json(const nlohmann::json& j);
};

/// One problem instance: a dtype and named dimensions. The key orders the
/// dimensions by name, so it is stable and human readable.
struct Problem {
  std::string dtype;
  std::map<std::string, std::int64_t> dims;

  std::int64_t dim(const std::string& name) const;  ///< throws kInvalidInput
  std::string key() const;                          ///< e.g. "f32;numel=16384;tensors=4"
  nlohmann::json to_json() const;
  static Problem from_json(const nlohmann::json& j);
  friend bool operator==(const Problem&, const Problem&) = default;
};

/// Rendered source: self-contained text (compiles with nvcc alone) and the
/// NVRTC name expressions of its kernels, in launch-plan order.
struct Rendered {
  std::string source;
  std::vector<std::string> kernels;
};

/// Kernel arguments by value, laid out as cuLaunchKernel's `kernelParams`
/// expects (one pointer per argument).
class ArgPack {
 public:
  template <class T>
  ArgPack& add(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>, "kernel arguments are copied bytewise");
    const std::size_t align = alignof(T);
    std::size_t offset = (storage_.size() + align - 1) / align * align;
    storage_.resize(offset + sizeof(T));
    std::memcpy(storage_.data() + offset, &value, sizeof(T));
    offsets_.push_back(offset);
    return *this;
  }
  /// Appends `size` raw bytes aligned to `align`: a struct whose layout is
  /// only known at run time (e.g. an array sized by a tunable).
  ArgPack& add_bytes(const void* data, std::size_t size, std::size_t align) {
    std::size_t offset = (storage_.size() + align - 1) / align * align;
    storage_.resize(offset + size);
    std::memcpy(storage_.data() + offset, data, size);
    offsets_.push_back(offset);
    return *this;
  }
  /// Pointers into this pack's storage; valid while the pack lives unchanged.
  std::vector<void*> pointers() {
    std::vector<void*> p;
    for (auto o : offsets_) p.push_back(storage_.data() + o);
    return p;
  }
  std::size_t count() const { return offsets_.size(); }

 private:
  std::vector<std::byte> storage_;  // malloc alignment (16) covers every argument type
  std::vector<std::size_t> offsets_;
};

/// One kernel launch of a plan.
struct Launch {
  int kernel = 0;  ///< index into Rendered::kernels
  std::array<unsigned, 3> grid{1, 1, 1};
  std::array<unsigned, 3> block{1, 1, 1};
  unsigned dynamic_smem = 0;
  ArgPack args;
};

/// A buffer of the workload. Inputs are read; outputs are poisoned by the
/// runner before a validation run; in-out buffers are read and written.
enum class Role { kInput, kOutput, kInOut, kScratch };

struct HostBuffer {
  std::string name;
  Role role = Role::kInput;
  DType dtype = DType::kF32;
  std::vector<std::byte> bytes;  ///< initial contents (inputs, in-outs)
  std::vector<std::byte> expected;  ///< reference result (outputs, in-outs); empty otherwise
  double tolerance = 1e-5;          ///< max relative L2 error of the result against `expected`
  std::size_t elements() const { return bytes.size() / size_of(dtype); }
};

/// Inputs made from a seed, and the CPU reference's results for them.
struct Workload {
  std::vector<HostBuffer> buffers;
};

/// Relative L2 error of `got` against `expected` (both of dtype `t`);
/// +inf when either holds a NaN or Inf.
double relative_l2(DType t, const std::vector<std::byte>& got, const std::vector<std::byte>& expected);
/// Element `i` of `bytes` holding values of type `t`, as a double.
double value_at(DType t, const std::vector<std::byte>& bytes, std::size_t i);

/// The tolerance DESIGN.md sets for a compute dtype.
double tolerance_for(const std::string& dtype);

class Family {
 public:
  virtual ~Family() = default;

  virtual std::string name() const = 0;
  virtual std::string summary() const = 0;  ///< one line for `--help` and listings
  /// The template files (paths under templates/) whose text the family hash covers.
  virtual std::vector<std::string> source_files() const = 0;
  virtual const Space& space() const = 0;

  /// Small problems, one per supported class (dtype, head dim, causal, ...):
  /// what CI compiles and what emulation tests run.
  virtual std::vector<Problem> problem_classes() const = 0;
  /// Checks a problem; throws kInvalidInput saying what is accepted.
  virtual void check_problem(const Problem& problem) const = 0;

  virtual Config default_config(const Problem& problem) const = 0;
  /// Whether `config` can run `problem` on `device`; if not and `why` is
  /// given, says which constraint failed.
  virtual bool is_valid(const Config& config, const Problem& problem, const DeviceLimits& device,
                        std::string* why = nullptr) const = 0;

  virtual Rendered render(const Config& config, const Problem& problem) const = 0;
  virtual Workload make_workload(const Problem& problem, std::uint64_t seed) const = 0;
  /// Launches that run `config` on the workload whose buffers live at
  /// `addresses` (same order as Workload::buffers).
  virtual std::vector<Launch> plan(const Config& config, const Problem& problem,
                                   const std::vector<std::uint64_t>& addresses,
                                   const DeviceLimits& device) const = 0;

  virtual double flops(const Problem& problem) const = 0;
  virtual double bytes(const Problem& problem) const = 0;  ///< minimum DRAM traffic

  /// Hash of the family's template text (with kt.cuh): cache entries made
  /// from another text are stale.
  std::string source_hash() const;
};

/// Every registered family, by name.
const std::vector<const Family*>& all_families();
/// The family called `name`; throws kInvalidInput listing the known ones.
const Family& find_family(const std::string& name);

}  // namespace ktune::templates
