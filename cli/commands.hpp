// The `ktune` subcommands: one file each, argument parsing and output only;
// every command is a call into the library. Each add_* registers a
// subcommand whose callback throws ktune::Error on failure.
#pragma once
#include <CLI/CLI.hpp>

namespace ktune::cli {

/// Options every subcommand shares.
struct Global {
  bool json = false;  ///< machine-readable output on stdout
  /// The exit status of a command that ends without an error but not as
  /// asked: a run stopped by a signal, 128 + its number.
  int exit_code = 0;
};

void add_devices_command(CLI::App& app, Global& global);
void add_render_command(CLI::App& app, Global& global);
void add_compile_command(CLI::App& app, Global& global);
void add_tune_command(CLI::App& app, Global& global);
void add_bench_command(CLI::App& app, Global& global);
void add_train_command(CLI::App& app, Global& global);
void add_eval_command(CLI::App& app, Global& global);
void add_generate_command(CLI::App& app, Global& global);
/// `bench e2e` and `bench memory`, registered on the `bench` subcommand.
void add_bench_e2e_command(CLI::App& bench, Global& global);
void add_bench_memory_command(CLI::App& bench, Global& global);
void add_bench_attention_command(CLI::App& bench, Global& global);  ///< `bench attention`, on the `bench` subcommand
void add_replay_command(CLI::App& app, Global& global);
void add_cache_command(CLI::App& app, Global& global);
void add_run_command(CLI::App& app, Global& global);
void add_families_command(CLI::App& app, Global& global);
/// `ktune log show`: the summary of a session log.
void add_log_command(CLI::App& app, Global& global);
/// `bench emu`, registered on the `bench` subcommand.
void add_bench_emu_command(CLI::App& bench, Global& global);
void add_bench_ops_command(CLI::App& bench, Global& global);  ///< `bench ops`, on the `bench` subcommand
void add_bench_precision_command(CLI::App& bench, Global& global);  ///< `bench precision`

}  // namespace ktune::cli
