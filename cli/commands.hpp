// The `ktune` subcommands: one file each, argument parsing and output only;
// every command is a call into the library. Each add_* registers a
// subcommand whose callback throws ktune::Error on failure.
#pragma once
#include <CLI/CLI.hpp>

namespace ktune::cli {

/// Options every subcommand shares.
struct Global {
  bool json = false;  ///< machine-readable output on stdout
};

void add_devices_command(CLI::App& app, Global& global);
void add_render_command(CLI::App& app, Global& global);
void add_compile_command(CLI::App& app, Global& global);
void add_tune_command(CLI::App& app, Global& global);
void add_bench_command(CLI::App& app, Global& global);

}  // namespace ktune::cli
