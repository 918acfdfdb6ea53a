// `ktune cache show | merge | prune | export`: inspect and combine tuned
// caches (cache/SCHEMA.md); `ktune cache size | clean`: what KTUNE_CACHE_DIR
// holds, and emptying it.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <set>

#include "base/env.hpp"
#include "base/error.hpp"
#include "base/files.hpp"
#include "base/json_output.hpp"
#include "cache/store.hpp"
#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "cli/table.hpp"
#include "templates/family.hpp"
#include "tuner/emu/module.hpp"

namespace ktune::cli {
namespace {

struct Filter {
  std::string family = {}, arch = {}, gpu = {}, dtype = {};
  bool matches(const cache::Entry& e) const {
    return (family.empty() || e.key.family == family) && (arch.empty() || e.key.arch == arch) &&
           (gpu.empty() || e.key.gpu_name == gpu) && (dtype.empty() || e.key.dtype == dtype);
  }
};

/// Whether an entry of one of `families` (the built-in ones and the kernel
/// specs the user named: known_families) is usable by this build: "current";
/// "stale" (another kernel source) or "off the space" (a config the
/// family's space does not hold: a parameter's name or value changed, or a
/// file damaged by hand), both of which the run-time lookup passes over; "-"
/// for what this build cannot tell (a kernel spec's entry without --spec, a
/// GEMM's).
std::string source_state(const cache::Entry& e, const std::vector<const templates::Family*>& families) {
  for (const auto* f : families) {
    if (f->name() != e.key.family) continue;
    if (f->source_hash() != e.key.source_hash) return "stale";
    try {
      f->space().check_member(Config::from_json(e.config));
    } catch (const Error&) {
      return "off the space";
    }
    return "current";
  }
  return "-";
}

/// Refuses a filter's value that no entry of the file holds (a typo would
/// otherwise select nothing, or, pruning, drop everything): one line naming
/// the option and the values the file holds.
void require_held(const std::vector<cache::Entry>& entries, const std::string& option, const std::string& value,
                  const std::function<std::string(const cache::Entry&)>& field, const char* none = "no entries") {
  if (value.empty()) return;
  std::set<std::string> held;
  for (const auto& e : entries) held.insert(field(e));
  KTUNE_REQUIRE(held.count(value), fmt::format("{} {}: no entry of the cache has it; it holds {}", option, value,
                                               held.empty() ? none : fmt::format("{}", fmt::join(held, ", "))));
}
void require_held(const std::vector<cache::Entry>& entries, const Filter& f) {
  require_held(entries, "--family", f.family, [](const cache::Entry& e) { return e.key.family; });
  require_held(entries, "--arch", f.arch, [](const cache::Entry& e) { return e.key.arch; });
  require_held(entries, "--gpu", f.gpu, [](const cache::Entry& e) { return e.key.gpu_name; });
  require_held(entries, "--dtype", f.dtype, [](const cache::Entry& e) { return e.key.dtype; });
}

void add_filter_options(CLI::App* cmd, Filter& f) {
  cmd->add_option("--family", f.family, "Only this kernel family")->check(non_empty());
  cmd->add_option("--arch", f.arch, "Only this architecture (sm_90, ...)")->check(non_empty());
  cmd->add_option("--gpu", f.gpu, "Only this GPU name")->check(non_empty());
  cmd->add_option("--dtype", f.dtype,
                  "Only the entries of this dtype (f32, tf32, bf16): the entries' own, not a run's; a bf16 "
                  "run also takes an f32 entry (grad_norm, over the fp32 gradients)")
      ->check(non_empty());
}

constexpr const char* kSessionLogs = "session logs";

/// "1.2 MB": bytes for a person.
std::string human_bytes(std::uint64_t bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1000 && u < 4) v /= 1000, ++u;
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", v, units[u]);
}

struct Usage {
  std::uint64_t files = 0, bytes = 0;
};
Usage usage_of(const std::filesystem::path& dir) {
  Usage u;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code size_ec;
    if (!it->is_regular_file(size_ec)) continue;
    const auto n = it->file_size(size_ec);
    if (size_ec) continue;
    ++u.files;
    u.bytes += n;
  }
  return u;
}

/// The folders of KTUNE_CACHE_DIR (base/env.hpp names them) and what each holds.
struct Part {
  std::string name;
  std::filesystem::path path;
  Usage usage;
};
std::vector<Part> cache_dir_parts() {
  // Sizing or cleaning the cache makes no folder: one not there holds nothing.
  std::vector<Part> parts = {{"compiled binaries", env::binary_cache_dir(/*make=*/false), {}},
                             {"emulation objects", env::emu_cache_dir(/*make=*/false), {}},
                             {kSessionLogs, env::session_log_dir(/*make=*/false), {}}};
  for (auto& p : parts) p.usage = usage_of(p.path);
  return parts;
}

/// Removes what `dir` holds but the files a running ktune writes now (a temp
/// file, an emulation compile's source and object: a tune would take the
/// compile for a failed config; a held lock file and the file it guards: a
/// tuning session's log, removed under its lock where it is free); what
/// another process removed meanwhile is no error.
/// Returns what it removed and, in `kept`, what it left.
Usage clean_folder(const std::filesystem::path& dir, Usage& kept) {
  namespace fs = std::filesystem;
  const auto gone = [](const std::error_code& ec) { return !ec || ec == std::errc::no_such_file_or_directory; };
  Usage removed;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code e;
    const bool folder = it->is_directory(e);
    const std::uintmax_t size = folder ? 0 : it->file_size(e);
    if (!folder && e == std::errc::no_such_file_or_directory) continue;  // gone meanwhile: a lock let go
    const Usage u = folder ? usage_of(it->path()) : Usage{1, e ? 0 : size};
    const auto remove = [&] {
      if (!folder) {
        if (temp_file_in_progress(name) || tuner::emu::compile_in_progress(name)) return false;
        // A file that is not a lock is removed under its lock, taken at once: a session that starts after the
        // look (its log replaced anew) finds the lock held, and its new log is not removed under it.
        if (!name.ends_with(".lock")) return remove_unless_locked(it->path());
        if (lock_held(it->path())) return false;
      }
      fs::remove_all(it->path(), e);
      KTUNE_REQUIRE(gone(e), fmt::format("cannot remove {}: {}", it->path().string(), e.message()));
      return true;
    };
    if (!remove()) {
      kept.files += u.files;
      kept.bytes += u.bytes;
      continue;
    }
    removed.files += u.files;
    removed.bytes += u.bytes;
  }
  KTUNE_REQUIRE(gone(ec), fmt::format("cannot remove what {} holds: {}", dir.string(), ec.message()));
  ::rmdir(dir.c_str());  // where it is empty now: a compile makes it again
  return removed;
}

std::string usage_table(const std::vector<Part>& parts) {
  Table table({{"part"}, {"folder"}, {"files", true}, {"size", true}});
  Usage total;
  for (const auto& p : parts) {
    table.add({p.name, p.path.string(), std::to_string(p.usage.files), human_bytes(p.usage.bytes)});
    total.files += p.usage.files;
    total.bytes += p.usage.bytes;
  }
  table.add({"total", env::cache_dir(/*make=*/false).string(), std::to_string(total.files),
             human_bytes(total.bytes)});
  return table.str();
}

}  // namespace

void add_cache_command(CLI::App& app, Global& global) {
  auto* cmd = app.add_subcommand("cache", "Show, merge, prune or export tuned caches; size or clean KTUNE_CACHE_DIR");
  cmd->require_subcommand(1);

  struct Args {
    std::string file;
    std::vector<std::string> inputs;
    std::string out;
    Filter filter;
    cache::PruneOptions prune;
    bool keep_superseded = false;
    bool stale = false;
    bool clean_logs = false;
    std::vector<std::string> specs;
    /// The built-in families and the kernel specs named by --spec, loaded: source_state's families.
    std::vector<const templates::Family*> known_families() const {
      std::vector<const templates::Family*> out = templates::all_families();
      for (const auto& s : specs) out.push_back(&family_arg("", s));
      return out;
    }
  };
  auto args = std::make_shared<Args>();
  const auto add_spec_option = [&args](CLI::App* sub) {
    sub->add_option("--spec", args->specs,
                    "Kernel spec whose entries to tell current, stale (against its source now) or off the space "
                    "(repeatable)")
        ->check(input_file());
  };

  auto* show = cmd->add_subcommand("show", "List the entries of a cache file (with their NVRTC, driver and date, "
                                           "which prune acts on, where two share a family, problem, arch and GPU)");
  show->add_option("file", args->file, "Cache file")->required();
  add_filter_options(show, args->filter);
  add_spec_option(show);
  show->callback([args, &global] {
    const auto families = args->known_families();
    const auto entries = cache::CacheFile(args->file).load_input();
    require_held(entries, args->filter);
    nlohmann::json j = nlohmann::json::array();
    // Entries of one family, problem, dtype, arch and GPU differ in what prune acts on (NVRTC, driver, date):
    // where two are shown, so are those, or their rows read alike.
    std::map<std::string, int> per_where;
    for (const auto& e : entries)
      if (args->filter.matches(e)) ++per_where[e.key.where()];
    const bool versions =
        std::any_of(per_where.begin(), per_where.end(), [](const auto& w) { return w.second > 1; });
    std::vector<Table::Column> columns = {{"family"},       {"problem"},      {"arch"},        {"gpu"},
                                          {"time ms", true}, {"spread", true}, {"evals", true}, {"source"}};
    if (versions) columns.insert(columns.end(), {{"nvrtc"}, {"driver"}, {"date"}});
    columns.push_back({"config"});
    Table table(columns);
    for (const auto& e : entries) {
      if (!args->filter.matches(e)) continue;
      const std::string source = source_state(e, families);
      j.push_back(cache::to_json(e));
      j.back()["source"] = source;
      std::vector<std::string> row = {e.key.family, e.key.problem_key, e.key.arch, e.key.gpu_name,
                                      fmt::format("{:.4f}", e.time_ms), fmt::format("{:.1f}%", e.spread * 100),
                                      std::to_string(e.evaluations), source};
      if (versions) row.insert(row.end(), {e.key.nvrtc_version, e.key.driver_version, e.date});
      // A --deterministic run's config beside a winner that sums by atomics.
      row.push_back(e.config.dump() + (e.deterministic ? fmt::format("; deterministic: {} at {:.4f} ms",
                                                                     e.deterministic->config.dump(),
                                                                     e.deterministic->time_ms)
                                                       : ""));
      table.add(std::move(row));
    }
    if (global.json) {
      std::cout << dump_json(j, 2) << "\n";
      return;
    }
    std::cout << table.str()
              << fmt::format("{} of {} entries in {} ({})\n", table.rows(), entries.size(), args->file,
                             human_bytes(std::filesystem::file_size(args->file)));
  });

  auto* size = cmd->add_subcommand("size", "What KTUNE_CACHE_DIR holds: compiled binaries, emulation objects, "
                                           "session logs (files and bytes each)");
  size->callback([&global] {
    const auto parts = cache_dir_parts();
    if (global.json) {
      nlohmann::json j = {{"dir", env::cache_dir(/*make=*/false).string()}, {"parts", nlohmann::json::array()}};
      for (const auto& p : parts)
        j["parts"].push_back({{"name", p.name}, {"path", p.path.string()}, {"files", p.usage.files},
                              {"bytes", p.usage.bytes}});
      std::cout << dump_json(j, 2) << "\n";
      return;
    }
    std::cout << usage_table(parts);
  });

  auto* clean = cmd->add_subcommand("clean", "Empty KTUNE_CACHE_DIR's compiled binaries and emulation objects "
                                             "(rebuilt on demand); with --logs, its session logs too");
  clean->add_flag("--logs", args->clean_logs, "Also remove the session logs (--resume then starts anew)");
  clean->callback([args, &global] {
    std::uint64_t files = 0, bytes = 0;
    Usage kept;
    nlohmann::json j = {{"dir", env::cache_dir(/*make=*/false).string()}, {"removed", nlohmann::json::array()}};
    for (const auto& p : cache_dir_parts()) {
      if (p.name == kSessionLogs && !args->clean_logs) continue;
      const Usage removed = clean_folder(p.path, kept);
      files += removed.files;
      bytes += removed.bytes;
      j["removed"].push_back({{"name", p.name}, {"path", p.path.string()}, {"files", removed.files},
                              {"bytes", removed.bytes}});
    }
    j["kept_in_progress"] = {{"files", kept.files}, {"bytes", kept.bytes}};
    if (global.json) std::cout << dump_json(j, 2) << "\n";
    else
      std::cout << fmt::format("removed {} file{} ({}) from {}{}\n", files, files == 1 ? "" : "s",
                               human_bytes(bytes), env::cache_dir(/*make=*/false).string(),
                               kept.files == 0 ? ""
                                               : fmt::format("; kept {} that running ktune processes are writing",
                                                             kept.files));
  });

  auto* merge = cmd->add_subcommand("merge", "Merge cache files into one (better-measured entry wins per key)");
  merge->add_option("--into", args->file, "Cache file to merge into (created if missing)")
      ->check(output_file())
      ->required();
  merge->add_option("inputs", args->inputs, "Cache files to merge in")->required();
  merge->callback([args, &global] {
    for (const auto& input : args->inputs)
      KTUNE_REQUIRE(!same_file(input, args->file),
                    fmt::format("{} is the --into file itself, {}: merged into itself it changes nothing; give the "
                                "caches to merge into it",
                                input, args->file));
    // All or nothing: every input is read and checked before the one write, and where it goes first of all.
    cache::CacheFile(args->file).check_writable();
    std::vector<std::vector<cache::Entry>> incoming;
    for (const auto& input : args->inputs) incoming.push_back(cache::CacheFile(input).load_input());
    std::vector<cache::MergeCount> counts(incoming.size());
    cache::CacheFile(args->file).update([&](std::vector<cache::Entry>& entries) {
      const std::size_t collapsed = cache::collapse_duplicates(entries);
      std::size_t total = 0;
      for (std::size_t i = 0; i < incoming.size(); ++i) {
        counts[i] = cache::merge_entries(entries, incoming[i]);
        total += counts[i].changed();
      }
      return total > 0 || collapsed > 0;
    });
    nlohmann::json j = {{"into", args->file}, {"inputs", nlohmann::json::array()}};
    for (std::size_t i = 0; i < incoming.size(); ++i) {
      const cache::MergeCount& c = counts[i];
      j["inputs"].push_back({{"file", args->inputs[i]}, {"entries", incoming[i].size()}, {"changed", c.changed()},
                             {"added", c.added}, {"replaced", c.replaced}, {"picks_taken", c.picks},
                             {"kept", c.kept}});
      if (global.json) continue;
      std::string what = fmt::format("{} added, {} replaced", c.added, c.replaced);
      if (c.picks > 0) what += fmt::format(", {} given a faster deterministic pick", c.picks);
      if (c.kept > 0) what += fmt::format(", {} left as {} {}", c.kept, c.kept == 1 ? "it" : "they",
                                          c.kept == 1 ? "was" : "were");
      std::cout << fmt::format("{}: {} {}; in {}: {}\n", args->inputs[i], incoming[i].size(),
                               incoming[i].size() == 1 ? "entry" : "entries", args->file, what);
    }
    if (global.json) std::cout << dump_json(j, 2) << "\n";
  });

  auto* prune = cmd->add_subcommand("prune", "Drop superseded or out-of-date entries");
  prune->add_option("file", args->file, "Cache file")->required();
  prune->add_flag("--keep-superseded", args->keep_superseded,
                  "Keep older entries of the same family/problem/dtype/arch/GPU");
  add_spec_option(prune);
  prune->add_flag("--stale", args->stale,
                  "Drop the entries of built-in families (and of --spec's kernels) whose kernel source is not this "
                  "build's, or whose config its space does not hold (`cache show` marks them stale or off the "
                  "space: the run-time lookup passes over them)");
  prune->add_option("--family", args->prune.family,
                    "Prune this family's entries only (superseded, version filters, --stale); the others stay");
  prune->add_option("--source-hash", args->prune.source_hash, "Drop entries with another source hash")
      ->check(non_empty());
  prune->add_option("--nvrtc", args->prune.nvrtc_version, "Drop entries compiled with another NVRTC version")
      ->check(non_empty());
  prune->add_option("--driver", args->prune.driver_version, "Drop entries measured under another driver version");
  prune->callback([args, &global] {
    KTUNE_REQUIRE(args->specs.empty() || args->stale,
                  "--spec tells a kernel spec's entries stale: it goes with --stale");
    const auto families = args->known_families();
    args->prune.superseded = !args->keep_superseded;
    // Of one problem's entries, one this build can use outlives a newer one it cannot (another ktune's).
    args->prune.usable = [&families](const cache::Entry& e) {
      const std::string state = source_state(e, families);
      return state != "stale" && state != "off the space";
    };
    cache::CacheFile file(args->file);
    const auto held = file.load_input();  // a missing file is an error, not an empty cache
    const auto& p = args->prune;
    require_held(held, Filter{.family = p.family});
    if (!p.source_hash.empty() && p.family.empty()) {  // each family's source has its own hash
      std::set<std::string> held_families;
      for (const auto& e : held) held_families.insert(e.key.family);
      KTUNE_REQUIRE(held_families.size() <= 1,
                    fmt::format("--source-hash is one family's: give --family too ({} holds entries of {}, whose "
                                "sources hash apart, so every other family's entries would go)",
                                args->file, fmt::join(held_families, ", ")));
    }
    // A version no entry (of --family) has would drop every one of them.
    std::vector<cache::Entry> selected;
    for (const auto& e : held)
      if (p.family.empty() || e.key.family == p.family) selected.push_back(e);
    require_held(selected, "--source-hash", p.source_hash, [](const cache::Entry& e) { return e.key.source_hash; });
    // GEMM entries compile nothing (an empty NVRTC version), and --nvrtc leaves them alone.
    std::vector<cache::Entry> compiled;
    for (const auto& e : selected)
      if (!e.key.nvrtc_version.empty()) compiled.push_back(e);
    require_held(
        compiled, "--nvrtc", p.nvrtc_version, [](const cache::Entry& e) { return e.key.nvrtc_version; },
        "no entries compiled by NVRTC (GEMM entries compile nothing, and --nvrtc leaves them alone)");
    require_held(selected, "--driver", p.driver_version, [](const cache::Entry& e) { return e.key.driver_version; });
    std::vector<cache::Entry> gone;  // what went, to be named
    file.update([&](std::vector<cache::Entry>& entries) {
      const std::vector<cache::Entry> before = entries;
      if (args->stale)
        std::erase_if(entries, [&](const cache::Entry& e) {
          const std::string state = source_state(e, families);
          return (p.family.empty() || e.key.family == p.family) && (state == "stale" || state == "off the space");
        });
      cache::prune_entries(entries, args->prune);
      std::multiset<std::string> kept;
      for (const auto& e : entries) kept.insert(cache::to_json(e).dump());
      for (const auto& e : before)
        if (const auto it = kept.find(cache::to_json(e).dump()); it != kept.end()) kept.erase(it);
        else gone.push_back(e);
      return !gone.empty();
    });
    const std::size_t dropped = gone.size();
    const auto named = [](const cache::Entry& e) {
      return fmt::format("{} {} on {} ({}; NVRTC {}, driver {}, {})", e.key.family, e.key.problem_key,
                         e.key.gpu_name, e.key.arch, e.key.nvrtc_version.empty() ? "-" : e.key.nvrtc_version,
                         e.key.driver_version, e.date);
    };
    if (global.json) {
      nlohmann::json names = nlohmann::json::array();
      for (const auto& e : gone) names.push_back(cache::to_json(e.key));
      std::cout << dump_json(nlohmann::json{{"file", args->file}, {"dropped", dropped}, {"dropped_keys", names}}, 2)
                << "\n";
    } else {
      std::cout << fmt::format("{}: {} {} dropped\n", args->file, dropped, dropped == 1 ? "entry" : "entries");
      for (const auto& e : gone) std::cout << "  " << named(e) << "\n";
    }
  });

  auto* exp = cmd->add_subcommand("export", "Write a filtered copy of a cache (for another host or the runtime)");
  exp->add_option("file", args->file, "Cache file")->required();
  exp->add_option("--out", args->out,
                  "Destination cache file (default, or - or /dev/stdout: stdout); one that holds entries is refused "
                  "(`cache merge --into` adds to a cache)")
      ->check(output_file(true));
  add_filter_options(exp, args->filter);
  exp->callback([args, &global] {
    if (args->out == "-" || args->out == "/dev/stdout") args->out.clear();  // stdout, as without --out
    // A copy filtered onto its own input would drop every entry the filters leave out.
    require_distinct_files({{"file", args->file}}, {{"--out", args->out}});
    if (!args->out.empty()) cache::CacheFile(args->out).check_writable();  // before the input is read
    std::vector<cache::Entry> selected;
    const auto entries = cache::CacheFile(args->file).load_input();
    require_held(entries, args->filter);
    for (const auto& e : entries)
      if (args->filter.matches(e)) selected.push_back(e);
    KTUNE_REQUIRE(!entries.empty(), fmt::format("{} holds no entries; nothing written", args->file));
    KTUNE_REQUIRE(!selected.empty(), fmt::format("no entry of {} matches all the filters given; nothing written",
                                                 args->file));
    const std::string text = cache::serialise_cache(selected);
    if (args->out.empty()) {
      std::cout << text;
      return;
    }
    // Through the cache's locked update, so a bad existing file is refused, not overwritten, and so is one
    // that holds entries: a copy written over a live cache would lose them.
    cache::CacheFile(args->out).update([&](std::vector<cache::Entry>& out_entries) {
      KTUNE_REQUIRE(out_entries.empty(),
                    fmt::format("--out {} already holds {} cache {}, which export would replace: `ktune cache merge "
                                "--into {} {}` adds to them, or remove it first; nothing written",
                                args->out, out_entries.size(), out_entries.size() == 1 ? "entry" : "entries",
                                args->out, args->file));
      out_entries = selected;
      return true;
    });
    if (global.json)
      std::cout << dump_json(nlohmann::json{{"file", args->file}, {"out", args->out}, {"entries", selected.size()}}, 2)
                << "\n";
    else
      std::cout << fmt::format("{} {} of {} written to {}\n", selected.size(),
                               selected.size() == 1 ? "entry" : "entries", args->file, args->out);
  });
}

}  // namespace ktune::cli
