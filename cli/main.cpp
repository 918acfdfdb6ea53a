// ktune: the command-line entry point. Decides exit codes; nothing else does.
//   0 success, 1 a run that failed (a variant, a check), 2 bad input (a corrupt
//   cache file among it, or a problem larger than host memory) or no device,
//   128 + N a run stopped by signal N after saving its work (train --checkpoint).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "base/host_memory.hpp"
#include "base/json_input.hpp"
#include "cli/commands.hpp"
#include "tuner/compile/compiler.hpp"

namespace {

/// The deepest command parsed (`app` itself where none was).
const CLI::App* deepest(const CLI::App& app) {
  const CLI::App* level = &app;
  while (!level->get_subcommands().empty()) level = level->get_subcommands().front();
  return level;
}

/// "adam, e2e, ...": the subcommands `level` takes.
std::string subcommand_names(const CLI::App* level) {
  std::vector<std::string> names;
  for (const CLI::App* s : level->get_subcommands({})) names.push_back(s->get_name());
  return fmt::format("{}", fmt::join(names, ", "));
}

/// The deepest command parsed and the words of the line left over.
std::pair<const CLI::App*, std::vector<std::string>> leftover(const CLI::App& app) {
  const CLI::App* level = deepest(app);
  auto rest = level->remaining();
  if (rest.empty()) rest = app.remaining();  // a word a subcommand does not know falls through to the top
  return {level, rest};
}

/// "unknown subcommand 'x' of bench; one of: ..." when the word after the
/// deepest command parsed names none of its subcommands (CLI11 says only
/// that one is required).
std::optional<std::string> unknown_subcommand(const CLI::App& app) {
  const auto [level, rest] = leftover(app);
  if (rest.empty() || level->get_subcommands({}).empty() || rest.front().rfind('-', 0) == 0) return std::nullopt;
  return fmt::format("unknown subcommand '{}' of {}; one of: {}", rest.front(),
                     level == &app ? std::string("ktune") : level->get_name(), subcommand_names(level));
}

/// "bench needs a subcommand, one of: adam, e2e, ..." for CLI11's "A
/// subcommand is required" (`ktune`, `ktune bench`).
std::optional<std::string> missing_subcommand(const CLI::App& app, const CLI::ParseError& e) {
  if (!dynamic_cast<const CLI::RequiredError*>(&e)) return std::nullopt;
  const CLI::App* level = deepest(app);
  if (level->get_subcommands({}).empty()) return std::nullopt;
  return fmt::format("{}, one of: {}", level == &app ? std::string("give a command") : level->get_name() +
                     " needs a subcommand", subcommand_names(level));
}

/// "unknown option '--famly' of tune (did you mean '--family'?)" for the
/// first word of the line left over that reads as an option (CLI11 lists all
/// the words it did not take, in its own order).
std::optional<std::string> unknown_option(const CLI::App& app) {
  const auto [level, rest] = leftover(app);
  const auto option =
      std::find_if(rest.begin(), rest.end(), [](const std::string& w) { return w.rfind("--", 0) == 0; });
  if (option == rest.end()) return std::nullopt;
  const std::string given = option->substr(0, option->find('='));
  std::vector<std::string> names;
  for (const CLI::App* a : {level, &app})
    for (const CLI::Option* o : a->get_options())
      for (const auto& n : o->get_lnames()) names.push_back("--" + n);
  return fmt::format("unknown option '{}' of {}{}", given, level == &app ? std::string("ktune") : level->get_name(),
                     ktune::did_you_mean(given, names));
}

/// "--steps is given 2 times; give it once" for CLI11's "--steps: At Most 1
/// required but received 2" (an option repeated on the line).
std::optional<std::string> repeated_option(const std::string& what) {
  static const std::regex kRepeated(R"(^(\S+): At Most 1 required but received (\d+)$)");
  std::smatch m;
  if (!std::regex_match(what, m, kRepeated)) return std::nullopt;
  return fmt::format("{} is given {} times; give it once", m[1].str(), m[2].str());
}

/// What a command that found no device could do instead: the emulation,
/// where the command takes --backend.
std::string no_device_hint(const CLI::App& app) {
  const CLI::App* level = deepest(app);
  return level != &app && level->get_option_no_throw("--backend")
             ? "; --backend emu runs it without one, on the CPU under the host emulation"
             : "";
}

/// Says once, as a command ends, what of its compiles the binary cache could not keep (a read-only or full cache
/// folder): the command stands, and the next run compiles them again.
struct NotStoredWarning {
  NotStoredWarning() = default;
  NotStoredWarning(const NotStoredWarning&) = delete;
  NotStoredWarning& operator=(const NotStoredWarning&) = delete;
  ~NotStoredWarning() {
    const auto n = ktune::tuner::not_stored_so_far();
    if (n.compiles == 0) return;
    std::cerr << fmt::format("warning: the binary cache did not keep {} compiled source{} ({}); the next run "
                             "compiles {} again (KTUNE_CACHE_DIR names another folder for it)\n",
                             n.compiles, n.compiles == 1 ? "" : "s", n.why, n.compiles == 1 ? "it" : "them");
  }
};

}  // namespace

int main(int argc, char** argv) {
  // A write past the file-size limit (ulimit -f) fails with EFBIG, said as
  // any failed write is, instead of ending the process without a word.
  std::signal(SIGXFSZ, SIG_IGN);
  const NotStoredWarning not_stored_warning;
  CLI::App app{"ktune: JIT-compiling CUDA kernel autotuner and transformer training runtime"};
  app.require_subcommand(1);
  // Every option's --help shows its default; subcommands inherit this.
  app.option_defaults()->always_capture_default();
  app.set_version_flag("--version", "ktune 0.1.0");
  ktune::cli::Global global;
  app.add_flag("--json", global.json, "Machine-readable JSON on stdout (before or after the subcommand)");
  // A subcommand hands the options it does not know to its parent, so --json
  // is taken anywhere on the line (subcommands inherit this).
  app.fallthrough();
  app.footer("--json, before or after the subcommand: machine-readable JSON on stdout");
  ktune::cli::add_devices_command(app, global);
  ktune::cli::add_render_command(app, global);
  ktune::cli::add_compile_command(app, global);
  ktune::cli::add_tune_command(app, global);
  ktune::cli::add_bench_command(app, global);
  ktune::cli::add_train_command(app, global);
  ktune::cli::add_eval_command(app, global);
  ktune::cli::add_generate_command(app, global);
  ktune::cli::add_replay_command(app, global);
  ktune::cli::add_cache_command(app, global);
  ktune::cli::add_run_command(app, global);
  ktune::cli::add_families_command(app, global);
  ktune::cli::add_log_command(app, global);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    // `ktune verfy --help`: the word names no command, which the top-level help would not say.
    if (const auto unknown = unknown_subcommand(app)) {
      std::cerr << "ktune: " << *unknown << " (see --help)\n";
      return 2;
    }
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::optional<std::string> said = unknown_subcommand(app);
    // An unknown option is named where CLI11 says only that a subcommand is required (`ktune --frob`).
    if (!said && (dynamic_cast<const CLI::ExtrasError*>(&e) || dynamic_cast<const CLI::RequiredError*>(&e)))
      said = unknown_option(app);
    if (!said) said = repeated_option(e.what());
    if (!said) said = missing_subcommand(app, e);
    std::cerr << "ktune: " << said.value_or(e.what()) << " (see --help)\n";
    return 2;
  } catch (const ktune::Error& e) {
    if (e.kind() == ktune::ErrorKind::kNoDevice) {
      std::cerr << "ktune: no CUDA device: " << e.what() << no_device_hint(app) << "\n";
      return 2;
    }
    std::cerr << "ktune: " << e.what() << "\n";
    const bool bad_input = e.kind() == ktune::ErrorKind::kInvalidInput || e.kind() == ktune::ErrorKind::kCache;
    return bad_input ? 2 : 1;
  } catch (const nlohmann::json::exception& e) {
    // A JSON value of the wrong type that escaped a check: an internal error,
    // said without nlohmann's exception id.
    std::cerr << "ktune: internal error: " << ktune::json_error_reason(e) << "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "ktune: " << ktune::kOutOfHostMemory << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "ktune: internal error: " << e.what() << "\n";
    return 1;
  }
  // What did not reach stdout (a full disk under a redirect) is a failed run, not a quiet one.
  std::cout.flush();
  if (!std::cout || std::fflush(stdout) != 0 || std::ferror(stdout)) {
    if (global.exit_code == 128 + SIGPIPE) return global.exit_code;  // a run stopped by it has said why
    std::cerr << "ktune: cannot write standard output: " << std::strerror(errno) << "\n";
    return 1;
  }
  return global.exit_code;
}
