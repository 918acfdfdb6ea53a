// `ktune devices`: the GPUs the driver sees, or one line saying why none.
#include <fmt/format.h>

#include <filesystem>
#include <iostream>

#include "base/env.hpp"
#include "base/error.hpp"
#include "base/json_output.hpp"
#include "cli/commands.hpp"
#include "tuner/cuda/device.hpp"
#include "tuner/cuda/gpu_marks.hpp"

namespace ktune::cli {

void add_devices_command(CLI::App& app, Global& global) {
  auto* cmd = app.add_subcommand("devices", "List CUDA devices (name, arch, memory, SMs, L2, clocks) and the ktune "
                                            "processes using each now");
  cmd->callback([&global] {
    std::vector<tuner::DeviceInfo> devices;
    try {
      devices = tuner::list_devices();  // throws kNoDevice: "no CUDA device: <reason>", exit 2
    } catch (const Error& e) {
      // A machine-readable answer even then: an empty list (the reason on stderr).
      if (global.json && e.kind() == ErrorKind::kNoDevice) std::cout << "[]\n";
      throw;
    }
    // The ktune processes marked on each GPU (tuner/cuda/gpu_marks.hpp): a tuning session started beside one
    // times its kernels beside that process's work.
    const std::filesystem::path marks = env::gpu_mark_dir();
    const auto users = [&](const tuner::DeviceInfo& d) { return tuner::marked_on(marks, d.uuid); };
    if (global.json) {
      nlohmann::json j = nlohmann::json::array();
      for (const auto& d : devices) {
        j.push_back(d.to_json());
        j.back()["ktune_processes"] = users(d);
      }
      std::cout << dump_json(j, 2) << "\n";
      return;
    }
    std::cout << fmt::format("{:>3}  {:<28} {:<7} {:>9} {:>4} {:>7} {:>9} {:>9} {:>9}\n", "#", "name", "arch",
                             "memory", "SMs", "L2", "clock", "mem clock", "peak BW");
    for (const auto& d : devices) {
      std::cout << fmt::format("{:>3}  {:<28} {:<7} {:>6.1f}GiB {:>4} {:>4}MiB {:>6}MHz {:>6}MHz {:>6.0f}GB/s\n",
                               d.ordinal, d.name, d.arch(), d.memory_bytes / double(1 << 30), d.sm_count,
                               d.l2_bytes >> 20, d.clock_khz / 1000, d.memory_clock_khz / 1000,
                               d.peak_bandwidth_gbs());
      for (const auto& user : users(d)) std::cout << fmt::format("       in use by ktune: {}\n", user);
    }
  });
}

}  // namespace ktune::cli
