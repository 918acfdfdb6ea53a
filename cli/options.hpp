// Parsing helpers shared by the subcommands: a family's config and problem
// from the command line, with the family's defaults filled in.
#pragma once
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"
#include "templates/family.hpp"

namespace ktune::cli {

/// `text` as JSON; throws kInvalidInput naming `what` when malformed.
nlohmann::json parse_json_arg(const std::string& text, const std::string& what, const std::string& example);

/// The family of `--family NAME` or of `--spec FILE` (a kernel spec,
/// docs/kernel-spec.md); throws kInvalidInput unless exactly one is given.
const templates::Family& family_arg(const std::string& family, const std::string& spec);
/// The `--spec` option's help line: what a spec is, then what the command does with it.
inline std::string spec_help(std::string_view use = "to use instead of --family") {
  return "Kernel spec (JSON beside your .cu: tunables, restrictions, grid, buffers, reference; see "
         "docs/kernel-spec.md) " +
         std::string(use);
}

/// The `--problem` option's help, before what a command adds (its default).
inline constexpr const char* kProblemHelp =
    R"(Problem as JSON, '{"dtype":"f32","dims":{"n":4096}}', or its dims alone, '{"n":4096}', in the dtype of )"
    "the family's first problem class (`ktune families` lists each family's dims and dtypes)";

/// The problem from `--problem` JSON (kProblemHelp's forms), or the family's first problem class.
templates::Problem problem_arg(const templates::Family& family, const std::string& text);
/// --parameters: run-time parameters by name as a JSON object of numbers ("" : none), refused before any work
/// where the family does not take them or its reference cannot check them (Family::require_checkable).
templates::Scalars parameters_arg(const templates::Family& family, const templates::Problem& problem,
                                  const std::string& text);
/// --parameters' help.
extern const char* const kParametersHelp;

/// What a run without a tuned entry takes for `problem` on `limits`
/// (tuner::default_on: the arch's default, the family's, or the valid
/// config nearest it), overridden by `--config` JSON and checked against the
/// space and the family's constraints for `limits`.
/// The declared default (a kernel spec's own, else the family's) where `def`,
/// the default measured on `limits`, stands in for it because it is not
/// valid there, with why; nullopt where `def` is the declared default.
struct InvalidDefault {
  Config declared;
  std::string why;
};
std::optional<InvalidDefault> invalid_default(const templates::Family& family, const templates::Problem& problem,
                                              const templates::DeviceLimits& limits, const Config& def);

Config config_arg(const templates::Family& family, const templates::Problem& problem, const std::string& text,
                  const templates::DeviceLimits& limits);

/// Check of a thread or worker count option: 1..env::kMaxThreads, the bound
/// every pool and knob shares.
CLI::Validator thread_count();

/// Check of an integer option within [lo, hi]; `range` names it ("in 1..64", ">= 1").
CLI::Validator integer_within(long long lo, long long hi, const std::string& range);
/// Check of a count option: an integer of at least `least` (the message
/// names the bound; CLI11's own number checks print theirs as a float).
CLI::Validator integer_at_least(long long least);

/// --backend of the commands that run kernels: gpu (the CUDA device) or emu
/// (the host emulation, no GPU needed; `emu_use` says what it is for here;
/// its times are host wall times, not GPU times).
CLI::Option* add_kernel_backend_option(CLI::App* cmd, std::string& backend, const std::string& emu_use);
/// The copy bandwidth a kernel benchmark measures against: the device's,
/// measured now (said on stderr), or 0 on the emulation, which has none.
double copy_bandwidth_gbs(bool emulated);

/// "one of: adamw, adamw_single, ..." (every registered family), for --family's help.
std::string family_choices();
/// "one of: exhaustive, random, ..." (every strategy), for --strategy's help.
std::string strategy_choices();

/// Check of a real-valued option: a finite number (never nan or inf) within
/// [lo, hi], either end open when asked; the message names the interval.
CLI::Validator finite_in(double lo, double hi, bool lo_open = false, bool hi_open = false);
/// finite_in up to the largest fp32: a value a kernel takes in fp32 (AdamW's
/// hyper-parameters), where a larger one is inf.
CLI::Validator fp32_at_least(double lo, bool lo_open = false);

/// Bytes of a size such as "40GiB", "80GB", "512MiB" or "1e9B" (a positive
/// number, then B, kB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB
/// (of 1024)); nullopt for anything else, a bare number too (is "40" bytes
/// or gigabytes?).
std::optional<std::int64_t> parse_bytes(const std::string& text);
/// Check of a size option: parse_bytes accepts it.
CLI::Validator byte_size();

/// Comma-separated integers ("1,2,4"), each at least `least`; throws
/// kInvalidInput naming `what` on anything else, an empty item ("1,,2",
/// "16,") among it.
std::vector<std::int64_t> int_list_arg(const std::string& text, const std::string& what, std::int64_t least = 1);
/// Comma-separated names ("small,xl"); throws kInvalidInput naming `what`
/// when there is none or an item is empty.
std::vector<std::string> name_list_arg(const std::string& text, const std::string& what);
/// `items` where each is there once; throws kInvalidInput naming `what` and the first repeated one otherwise: a
/// benchmark's or a compile's list measures each item once.
template <class T>
std::vector<T> distinct_list(std::vector<T> items, const std::string& what) {
  for (std::size_t i = 0; i < items.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      KTUNE_REQUIRE(!(items[j] == items[i]), fmt::format("{} names {} twice: give each once", what, items[i]));
  return items;
}

/// Check of a file an option reads: it exists and is a regular file (not a
/// folder, device, pipe or socket, which ktune cannot map or would read
/// without end).
CLI::Validator input_file();
/// Check of a file an option writes: a path, not an empty string (which
/// would otherwise read as the option left out), nor '-' unless `stdout_too`
/// (the option then writes '-' to stdout, as `cache export --out -`; else
/// '-' would make a file of that name where stdout was meant). Where and
/// whether it can be written is writable_target's question (base/files.hpp),
/// asked before the work.
CLI::Validator output_file(bool stdout_too = false);

/// Check of a JSON option (--config, --problem): not an empty string, which
/// would otherwise read as the option left out.
CLI::Validator json_text();
/// Check of a name option (a filter: --family, --gpu, ...): not an empty
/// string, which would otherwise read as the option left out (no filter).
CLI::Validator non_empty();

/// A file option's name and the path given to it (empty: not given).
struct FileArg {
  std::string option, path;
};
/// Whether two paths name one file: the same path, or two paths to one existing file (a link, `./`).
bool same_file(const std::string& a, const std::string& b);
/// Throws kInvalidInput, one line naming both options, when an output is
/// the same file as another output or as an input (the same path, or two
/// paths to one existing file): a run would overwrite what it reads, or
/// one of its results with another.
void require_distinct_files(const std::vector<FileArg>& inputs, const std::vector<FileArg>& outputs);

}  // namespace ktune::cli
