// `ktune cache show | merge | prune | export`: inspect and combine tuned
// caches (cache/SCHEMA.md).
#include <fmt/format.h>

#include <iostream>

#include "cache/store.hpp"
#include "cli/commands.hpp"

namespace ktune::cli {
namespace {

struct Filter {
  std::string family, arch, gpu, dtype;
  bool matches(const cache::Entry& e) const {
    return (family.empty() || e.key.family == family) && (arch.empty() || e.key.arch == arch) &&
           (gpu.empty() || e.key.gpu_name == gpu) && (dtype.empty() || e.key.dtype == dtype);
  }
};

void add_filter_options(CLI::App* cmd, Filter& f) {
  cmd->add_option("--family", f.family, "Only this kernel family");
  cmd->add_option("--arch", f.arch, "Only this architecture (sm_90, ...)");
  cmd->add_option("--gpu", f.gpu, "Only this GPU name");
  cmd->add_option("--dtype", f.dtype, "Only this dtype");
}

}  // namespace

void add_cache_command(CLI::App& app, Global& global) {
  auto* cmd = app.add_subcommand("cache", "Show, merge, prune or export tuned caches");
  cmd->require_subcommand(1);

  struct Args {
    std::string file;
    std::vector<std::string> inputs;
    std::string out;
    Filter filter;
    cache::PruneOptions prune;
    bool keep_superseded = false;
  };
  auto args = std::make_shared<Args>();

  auto* show = cmd->add_subcommand("show", "List the entries of a cache file");
  show->add_option("file", args->file, "Cache file")->required();
  add_filter_options(show, args->filter);
  show->callback([args, &global] {
    const auto entries = cache::CacheFile(args->file).load_input();
    nlohmann::json j = nlohmann::json::array();
    std::size_t shown = 0;
    if (!global.json)
      std::cout << fmt::format("{:<16} {:<34} {:<6} {:<24} {:>10} {:>7} {:>6}  {}\n", "family", "problem", "arch",
                               "gpu", "time ms", "spread", "evals", "config");
    for (const auto& e : entries) {
      if (!args->filter.matches(e)) continue;
      ++shown;
      if (global.json) {
        j.push_back(cache::to_json(e));
        continue;
      }
      std::cout << fmt::format("{:<16} {:<34} {:<6} {:<24} {:>10.4f} {:>6.1f}% {:>6}  {}\n", e.key.family,
                               e.key.problem_key, e.key.arch, e.key.gpu_name, e.time_ms, e.spread * 100,
                               e.evaluations, e.config.dump());
    }
    if (global.json) std::cout << j.dump(2) << "\n";
    else std::cout << fmt::format("{} of {} entries in {}\n", shown, entries.size(), args->file);
  });

  auto* merge = cmd->add_subcommand("merge", "Merge cache files into one (better-measured entry wins per key)");
  merge->add_option("--into", args->file, "Cache file to merge into (created if missing)")->required();
  merge->add_option("inputs", args->inputs, "Cache files to merge in")->required();
  merge->callback([args, &global] {
    // All or nothing: every input is read and checked before the one write.
    std::vector<std::vector<cache::Entry>> incoming;
    for (const auto& input : args->inputs) incoming.push_back(cache::CacheFile(input).load_input());
    std::vector<std::size_t> changed(incoming.size(), 0);
    cache::CacheFile(args->file).update([&](std::vector<cache::Entry>& entries) {
      const std::size_t collapsed = cache::collapse_duplicates(entries);
      std::size_t total = 0;
      for (std::size_t i = 0; i < incoming.size(); ++i) total += changed[i] = cache::merge_entries(entries, incoming[i]);
      return total > 0 || collapsed > 0;
    });
    nlohmann::json j = {{"into", args->file}, {"inputs", nlohmann::json::array()}};
    for (std::size_t i = 0; i < incoming.size(); ++i) {
      j["inputs"].push_back({{"file", args->inputs[i]}, {"entries", incoming[i].size()}, {"changed", changed[i]}});
      if (!global.json)
        std::cout << fmt::format("{}: {} entries, {} added or replaced in {}\n", args->inputs[i],
                                 incoming[i].size(), changed[i], args->file);
    }
    if (global.json) std::cout << j.dump(2) << "\n";
  });

  auto* prune = cmd->add_subcommand("prune", "Drop superseded or out-of-date entries");
  prune->add_option("file", args->file, "Cache file")->required();
  prune->add_flag("--keep-superseded", args->keep_superseded,
                  "Keep older entries of the same family/problem/dtype/arch/GPU");
  prune->add_option("--family", args->prune.family, "Apply the version filters to this family only");
  prune->add_option("--source-hash", args->prune.source_hash, "Drop entries with another source hash");
  prune->add_option("--nvrtc", args->prune.nvrtc_version, "Drop entries compiled with another NVRTC version");
  prune->add_option("--driver", args->prune.driver_version, "Drop entries measured under another driver version");
  prune->callback([args, &global] {
    args->prune.superseded = !args->keep_superseded;
    std::size_t dropped = 0;
    cache::CacheFile file(args->file);
    file.load_input();  // a missing file is an error, not an empty cache
    file.update([&](std::vector<cache::Entry>& entries) {
      dropped = cache::prune_entries(entries, args->prune);
      return dropped > 0;
    });
    if (global.json)
      std::cout << nlohmann::json{{"file", args->file}, {"dropped", dropped}}.dump(2) << "\n";
    else
      std::cout << fmt::format("{}: {} entries dropped\n", args->file, dropped);
  });

  auto* exp = cmd->add_subcommand("export", "Write a filtered copy of a cache (for another host or the runtime)");
  exp->add_option("file", args->file, "Cache file")->required();
  exp->add_option("--out", args->out, "Destination cache file (default: stdout)");
  add_filter_options(exp, args->filter);
  exp->callback([args] {
    std::vector<cache::Entry> selected;
    for (const auto& e : cache::CacheFile(args->file).load_input())
      if (args->filter.matches(e)) selected.push_back(e);
    const std::string text = cache::serialise_cache(selected);
    if (args->out.empty()) {
      std::cout << text;
      return;
    }
    // Through the cache's locked update, so a bad existing file is refused, not overwritten.
    cache::CacheFile(args->out).update([&](std::vector<cache::Entry>& entries) {
      entries = selected;
      return true;
    });
    std::cerr << fmt::format("{} entries written to {}\n", selected.size(), args->out);
  });
}

}  // namespace ktune::cli
