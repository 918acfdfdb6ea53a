// Kernel specs: a JSON file beside a user's CUDA source that says how to
// build, launch, check and count one kernel, so ktune can tune it like a
// built-in family (spec/spec_family.hpp turns a spec into one). The format is
// documented in docs/kernel-spec.md; examples/ holds working specs.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/space.hpp"
#include "spec/expression.hpp"
#include "templates/problem.hpp"
#include "templates/workload.hpp"

namespace ktune::spec {

/// How a buffer starts: random values in [-1, 1), zeros, or a file's contents.
enum class Init { kRandom, kZeros, kFile };

struct BufferSpec {
  std::string name;
  templates::DType dtype = templates::DType::kF32;
  bool dtype_from_problem = true;  ///< no "dtype" given: the problem's
  std::unique_ptr<Expression> count;  ///< elements
  Init init = Init::kRandom;
  std::filesystem::path file;  ///< Init::kFile: a .npy or .safetensors file
  templates::Role role = templates::Role::kInput;
  std::optional<double> tolerance;  ///< this output's max relative L2 error; empty: the spec's
  std::optional<double> atol;       ///< this output's max RMS error, which also passes it; empty: the spec's
  /// An input copied into the source's `__constant__` variable of this name before each launch (Kernel Tuner's
  /// cmem_args); empty: none.
  std::string constant;
};

/// Whether a run's result in the buffer is checked: an output's or an inout's (not an input's, nor a scratch
/// buffer's, the kernel's own workspace).
inline bool checked(const BufferSpec& b) {
  return b.role == templates::Role::kOutput || b.role == templates::Role::kInOut;
}

/// One kernel argument: a buffer's address, or a scalar of `type` ("i32",
/// "i64", "u32", "u64", "f32", "f64") with the value of an expression.
struct ArgSpec {
  std::string buffer;  ///< non-empty: the buffer's address
  std::string type;
  std::unique_ptr<Expression> value;
};

/// Where the expected outputs come from.
struct ReferenceSpec {
  enum class Kind { kKernel, kConfig, kFiles } kind = Kind::kConfig;
  /// kKernel: the name expression of another kernel of the source; run with `config`'s tunables.
  std::string kernel;
  std::vector<std::unique_ptr<Expression>> kernel_parts;  ///< its {expr} parts (null: {dtype})
  /// kKernel, kConfig: the reference's own grid and block (empty: the tuned kernel's).
  std::vector<std::unique_ptr<Expression>> grid, block;
  /// kKernel, kConfig: the tunables' values the reference runs with; empty (a kernel given without `config`): the
  /// problem's default config (the spec's `default` where valid, else the first valid point).
  std::optional<Config> config;
  std::map<std::string, std::filesystem::path> files;  ///< kFiles: output buffer -> answer file
};

struct KernelSpec {
  std::filesystem::path path;  ///< the spec file
  std::string text;            ///< its contents (hashed into the cache key)
  std::string name, summary;
  std::vector<std::filesystem::path> sources;       ///< resolved against the spec's folder
  std::vector<std::filesystem::path> include_dirs;  ///< for quoted includes, after the including file's folder
  std::string kernel;  ///< NVRTC name expression; {expr} parts are evaluated ("matmul<{tile}, {wpt}>")
  std::vector<std::unique_ptr<Expression>> kernel_parts;  ///< the {expr} parts, in order; null: {dtype}
  /// -D NAME=value, in order; a null value: the problem's element type (c_type)
  std::vector<std::pair<std::string, std::unique_ptr<Expression>>> defines;
  /// `define_tunables`: beside the tunables' macros, Kernel Tuner's others: kernel_tuner 1, and grid_size_x/y/z
  /// and block_size_x/y/z as the launch's (1 for an axis it lacks), where no tunable or define has the name.
  bool kernel_tuner_macros = false;
  /// `restore_inouts`: each timed launch starts from the inout buffers as uploaded (Triton's restore_value).
  bool restore_inouts = false;
  Space space;
  std::optional<Config> default_config;
  std::vector<Config> candidates;  ///< measured right after the default by a tuning session
  std::vector<std::string> dtypes;  ///< accepted problem dtypes
  std::vector<templates::Problem> problems;  ///< the problem classes (small problems for checks)
  std::vector<std::string> dims;             ///< the problem's dimension names
  std::vector<std::unique_ptr<Expression>> restrictions;
  std::vector<std::unique_ptr<Expression>> grid, block;  ///< 1 to 3 entries each
  std::unique_ptr<Expression> shared_bytes;              ///< dynamic shared memory; null: none
  std::vector<BufferSpec> buffers;
  std::vector<ArgSpec> args;
  /// Run-time parameters (alpha, eps, ...) and their values in checks and
  /// tuning: scalar arguments' expressions may name them, a launch through
  /// the run-time API may give others; no part of the problem or the cache key.
  std::map<std::string, double> parameters;
  ReferenceSpec reference;
  std::optional<double> tolerance;  ///< empty: the looser of each output dtype's and the problem dtype's
  std::optional<double> atol;       ///< empty: 0 (the relative error alone decides)
  std::unique_ptr<Expression> flops, bytes;  ///< null: 0 flops / the buffers' bytes
};

/// Reads and checks the spec at `path`. Throws kInvalidInput with one line
/// ("kernel.json: restriction 'tile * foo <= 1024': unknown name 'foo'; known: ...")
/// for a file that is missing or malformed, an unknown field, an expression
/// that does not parse or names what the spec does not define, or an argument
/// naming a missing buffer.
std::shared_ptr<const KernelSpec> load_spec(const std::filesystem::path& path);

/// A spec's sources as one self-contained text.
struct ExpandedSource {
  std::string text;
  /// Constructs the host emulation does not provide, one line each
  /// ("matmul.cu:12: extern __shared__ (use kt::dynamic_shared<T>() from kt.cuh)");
  /// code under `#ifndef KT_EMULATION` is not counted.
  std::vector<std::string> emulation_gaps;
};

/// The spec's sources with every quoted include expanded (found next to the
/// including file, then in the include dirs, then among ktune's device
/// headers: "kt.cuh"; each file once). Throws kInvalidInput for a missing file.
ExpandedSource expand_source(const KernelSpec& spec);

/// The C++ element type of a problem dtype, as {dtype} in `kernel` and a
/// define of `dtype` give it: float, __nv_bfloat16, __half, int, long long,
/// unsigned char.
std::string c_type(const std::string& dtype);

/// Substitutes the {expr} parts of a name expression with their values; a
/// null part is {dtype}: the problem's element type, `c_type(dtype)`.
std::string substitute(const std::string& text, const std::vector<std::unique_ptr<Expression>>& parts,
                       const Values& values, const std::string& dtype);

/// An array read from an answer or input file: .npy (little-endian, C order)
/// or .safetensors (the tensor called `name`, or the only one).
struct ArrayFile {
  templates::DType dtype;
  std::vector<std::byte> bytes;
};
ArrayFile read_array_file(const std::filesystem::path& path, const std::string& name);

}  // namespace ktune::spec
