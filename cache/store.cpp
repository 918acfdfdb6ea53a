// Cache file I/O: parse with schema checks, canonical serialisation, and
// read-modify-write under the lock with an atomic replace.
#include "cache/store.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <system_error>

#include "base/error.hpp"
#include "base/files.hpp"

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

std::vector<Entry> parse_cache(const std::string& text, const std::string& file) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    throw_error(ErrorKind::kCache,
                fmt::format("cache file {} is corrupt or truncated ({} bytes): {}; fix or move it away, "
                            "ktune will not overwrite it",
                            file, text.size(), e.what()));
  }
  if (!doc.is_object() || doc.value("format", "") != kFormatName)
    throw_error(ErrorKind::kCache,
                fmt::format("{} is not a ktune tuned cache (no \"format\": \"{}\"); ktune will not overwrite it",
                            file, kFormatName));
  if (!doc.contains("schema_version") || !doc["schema_version"].is_number_integer())
    throw_error(ErrorKind::kCache, fmt::format("cache file {} has no integer schema_version", file));
  const int version = doc["schema_version"].get<int>();
  if (version > kSchemaVersion)
    throw_error(ErrorKind::kCache,
                fmt::format("cache file {} has schema version {}, newer than this ktune understands ({}); "
                            "upgrade ktune, it will not overwrite the file",
                            file, version, kSchemaVersion));
  if (version < 1) throw_error(ErrorKind::kCache, fmt::format("cache file {} has bad schema version {}", file, version));
  if (!doc.contains("entries") || !doc["entries"].is_array())
    throw_error(ErrorKind::kCache, fmt::format("cache file {} has no \"entries\" array", file));
  std::vector<Entry> entries;
  entries.reserve(doc["entries"].size());
  for (const json& j : doc["entries"]) entries.push_back(entry_from_json(j, file));
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
  if (!fs::exists(path_, ec)) return {};
  return parse_cache(read_file(path_), path_.string());
}

void CacheFile::update(const std::function<bool(std::vector<Entry>&)>& change) {
  FileLock lock(path_.string() + ".lock");
  std::vector<Entry> entries = load();  // throws before anything is written
  if (change(entries)) write_file_atomic(path_, serialise_cache(std::move(entries)));
}

void CacheFile::put(Entry entry) {
  if (entry.date.empty()) entry.date = utc_now();
  if (entry.ktune_version.empty()) entry.ktune_version = ktune_version();
  const std::string id = entry.key.identity();
  update([&](std::vector<Entry>& entries) {
    for (Entry& e : entries)
      if (e.key.identity() == id) {
        e = entry;
        return true;
      }
    entries.push_back(entry);
    return true;
  });
}

std::size_t CacheFile::merge_from(const std::vector<Entry>& incoming) {
  std::size_t changed = 0;
  update([&](std::vector<Entry>& entries) {
    changed = merge_entries(entries, incoming);
    return changed > 0;
  });
  return changed;
}

}  // namespace ktune::cache
