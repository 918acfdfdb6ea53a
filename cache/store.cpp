// Cache file I/O: parse with schema checks, canonical serialisation, and
// read-modify-write under the lock with an atomic replace.
#include "cache/store.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <system_error>

#include "base/error.hpp"
#include "base/files.hpp"
#include "base/json_input.hpp"

namespace ktune::cache {
namespace fs = std::filesystem;
using nlohmann::json;

const char* to_string(Match match) {
  switch (match) {
    case Match::kExact: return "exact";
    case Match::kNearest: return "nearest";
    case Match::kNone: return "none";
  }
  return "?";
}

void sort_entries(std::vector<Entry>& entries) {
  std::stable_sort(entries.begin(), entries.end(),
                   [](const Entry& a, const Entry& b) { return a.key.identity() < b.key.identity(); });
}

namespace {
[[noreturn]] void too_big(const std::string& file, std::uintmax_t bytes) {
  throw_error(ErrorKind::kCache, fmt::format("cache file {} is {} bytes, more than the {} a tuned cache may hold; "
                                             "ktune will not read or overwrite it",
                                             file, bytes, kMaxCacheFileBytes));
}
}  // namespace

std::vector<Entry> parse_cache(const std::string& text, const std::string& file) {
  if (text.size() > kMaxCacheFileBytes) too_big(file, text.size());
  json doc;
  try {
    doc = parse_json_input(text, fmt::format("cache file {} ({} bytes)", file, text.size()), ErrorKind::kCache);
  } catch (const Error& e) {
    throw_error(ErrorKind::kCache,
                fmt::format("{}; the file is corrupt or truncated: fix or move it away, ktune will not overwrite it",
                            e.what()));
  }
  if (!doc.is_object() || !doc.contains("format") || doc["format"] != kFormatName)
    throw_error(ErrorKind::kCache,
                fmt::format("{} is not a ktune tuned cache (no \"format\": \"{}\"); ktune will not overwrite it",
                            file, kFormatName));
  const std::optional<std::int64_t> version =
      doc.contains("schema_version") ? exact_int64(doc["schema_version"]) : std::nullopt;
  if (!version)
    throw_error(ErrorKind::kCache, fmt::format("cache file {} has no integer schema_version", file));
  if (*version > kSchemaVersion)
    throw_error(ErrorKind::kCache,
                fmt::format("cache file {} has schema version {}, newer than this ktune understands ({}); "
                            "upgrade ktune, it will not overwrite the file",
                            file, *version, kSchemaVersion));
  if (*version < 1)
    throw_error(ErrorKind::kCache, fmt::format("cache file {} has bad schema version {}", file, *version));
  if (!doc.contains("entries") || !doc["entries"].is_array())
    throw_error(ErrorKind::kCache, fmt::format("cache file {} has no \"entries\" array", file));
  std::vector<Entry> entries;
  entries.reserve(doc["entries"].size());
  for (const json& j : doc["entries"]) entries.push_back(entry_from_json(j, file, entries.size()));
  return entries;
}

std::string serialise_cache(std::vector<Entry> entries) {
  sort_entries(entries);
  json doc = {{"format", kFormatName}, {"schema_version", kSchemaVersion}, {"entries", json::array()}};
  for (const Entry& e : entries) doc["entries"].push_back(to_json(e));
  return doc.dump(1) + "\n";
}

CacheFile::CacheFile(fs::path path) : path_(std::move(path)) {}

std::vector<Entry> CacheFile::load() const {
  std::error_code ec;
  const auto status = fs::status(path_, ec);
  if (!fs::exists(status)) return {};
  KTUNE_REQUIRE(fs::is_regular_file(status),
                fmt::format("cache file {} is {}; give the path of a cache file", path_.string(),
                            fs::is_directory(status) ? "a directory" : "not a regular file"));
  const auto bytes = fs::file_size(path_, ec);
  if (!ec && bytes > kMaxCacheFileBytes) too_big(path_.string(), bytes);
  if (!ec && bytes == 0) return {};  // an empty cache (mktemp made it): nothing in it to lose
  return parse_cache(read_file(path_), path_.string());
}

std::vector<Entry> CacheFile::load_input() const {
  std::error_code ec;
  KTUNE_REQUIRE(fs::exists(path_, ec), fmt::format("cache file {} does not exist", path_.string()));
  return load();
}

void CacheFile::check_writable() const { writable_target(path_, "cache file"); }

void CacheFile::update(const std::function<bool(std::vector<Entry>&)>& change) {
  const fs::path target = writable_target(path_, "cache file");  // before the lock file is made
  FileLock lock(lock_path(target));
  std::vector<Entry> entries = load();  // throws before anything is written
  if (change(entries)) write_file_atomic(target, serialise_cache(std::move(entries)));
}

void CacheFile::put(Entry entry) {
  if (entry.date.empty()) entry.date = utc_now();
  if (entry.ktune_version.empty()) entry.ktune_version = ktune_version();
  const std::string id = entry.key.identity();
  update([&](std::vector<Entry>& entries) {
    // The newer tuning wins, with the faster deterministic pick of the two.
    for (const Entry& e : entries)
      if (e.key.identity() == id) keep_faster_pick(entry, e);
    std::erase_if(entries, [&](const Entry& e) { return e.key.identity() == id; });
    entries.push_back(entry);
    return true;
  });
}

std::optional<Entry> CacheFile::put_winner(Entry entry, const std::vector<Entry>& seen) {
  if (entry.date.empty()) entry.date = utc_now();
  if (entry.ktune_version.empty()) entry.ktune_version = ktune_version();
  const std::string id = entry.key.identity();
  std::optional<Entry> kept;
  update([&](std::vector<Entry>& entries) {
    // The winner replaces what it competed with; an entry another process wrote since never did, and the better
    // of the two stays.
    for (const Entry& e : entries) {
      if (e.key.identity() != id) continue;
      const nlohmann::json held = to_json(e);
      const bool competed = std::any_of(seen.begin(), seen.end(), [&](const Entry& s) { return to_json(s) == held; });
      if (!competed && !better_than(entry, e) && (!kept || better_than(e, *kept))) kept = e;
    }
    Entry& stays = kept ? *kept : entry;
    for (const Entry& e : entries)
      if (e.key.identity() == id) keep_faster_pick(stays, e);
    if (kept) keep_faster_pick(*kept, entry);
    const Entry out = stays;
    std::erase_if(entries, [&](const Entry& e) { return e.key.identity() == id; });
    entries.push_back(out);
    return true;
  });
  return kept;
}

CacheFile::PickPut CacheFile::put_deterministic_pick(const Entry& winner, const std::vector<Entry>& seen,
                                                     const std::function<bool(const nlohmann::json&)>& atomic) {
  const std::string id = winner.key.identity();
  const auto same = [](const DeterministicPick& a, const DeterministicPick& b) {
    return a.config == b.config && a.time_ms == b.time_ms;
  };
  PickPut put;
  update([&](std::vector<Entry>& entries) {
    put = {};
    bool changed = false;
    for (Entry& e : entries) {
      if (e.key.identity() != id || !atomic(e.config)) continue;
      put.beside = true;
      const bool competed =
          !e.deterministic || std::any_of(seen.begin(), seen.end(), [&](const Entry& s) {
            return s.key.identity() == id && s.deterministic && same(*s.deterministic, *e.deterministic);
          });
      if (!competed && e.deterministic->time_ms <= winner.time_ms) {
        put.kept = e.deterministic;
        continue;
      }
      e.deterministic = DeterministicPick{winner.config, winner.time_ms};
      changed = true;
    }
    return changed;
  });
  return put;
}

std::size_t CacheFile::merge_from(const std::vector<Entry>& incoming) {
  std::size_t changed = 0;
  update([&](std::vector<Entry>& entries) {
    const std::size_t collapsed = collapse_duplicates(entries);
    changed = merge_entries(entries, incoming).changed();
    return changed > 0 || collapsed > 0;
  });
  return changed;
}

}  // namespace ktune::cache
