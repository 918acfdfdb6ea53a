// `ktune bench precision`: seeds 003 and 004's mixed-precision accumulation
// (tuner/bench/precision_bench.hpp), run on the GPU or the emulation.
#include <fmt/format.h>

#include <iostream>

#include "base/files.hpp"
#include "cli/bench_stop.hpp"
#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "tuner/bench/precision_bench.hpp"

namespace ktune::cli {

void add_bench_precision_command(CLI::App& bench, Global& global) {
  struct Opts {
    long long count = 1000;
    double value = 0.01;
    std::string json_out, backend = "gpu";
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = bench.add_subcommand(
      "precision", "Mixed-precision accumulation (seeds 003/004): a sum of --count additions of --value in fp32, "
                   "fp16 and bf16 sums and addends, its error split into the addend's rounding and the sum's");
  cmd->add_option("--count", o->count, "Additions")->check(integer_within(1, 1'000'000'000, "in 1..1000000000"))
      ->capture_default_str();
  cmd->add_option("--value", o->value, "The addend, before it is rounded to fp32 and then to its dtype")
      ->check(finite_in(-3.0e38, 3.0e38))
      ->capture_default_str();
  cmd->add_option("--json-out", o->json_out, "Also write the report as JSON to this file")->check(output_file());
  cmd->add_option("--backend", o->backend,
                  "gpu (the CUDA device's conversions and adds), or emu (the host emulation's, no GPU needed)")
      ->check(CLI::IsMember({"gpu", "emu"}))
      ->capture_default_str();
  cmd->callback([o, &global] {
    if (!o->json_out.empty()) writable_target(o->json_out, "--json-out");  // before the work, not after
    // Throws "no CUDA device: ..." (exit 2) without one.
    const auto backend = o->backend == "emu" ? tuner::exec::make_emu_backend() : tuner::exec::make_cuda_backend();
    const auto report = tuner::run_precision_bench(*backend, o->count, o->value);
    write_report(global, o->json_out, report.to_json(), [&] { return report.markdown(); });
  });
}

}  // namespace ktune::cli
