// The tuned cache on disk: one JSON file of entries (cache/SCHEMA.md).
// Writes are read-modify-write under an exclusive lock on `<file>.lock` and
// land atomically (temp file, fsync, rename), so concurrent writers from
// several processes lose nothing and a killed writer leaves the old file.
// A corrupt, truncated or newer-schema file is one kCache error naming the
// file, and is never rewritten.
#pragma once
#include <filesystem>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cache/entry.hpp"

namespace ktune::cache {

/// How a lookup was answered.
enum class Match {
  kExact,    ///< an entry with the query's full key
  kNearest,  ///< the nearest tuned shape of the same family/dtype/arch
  kNone,     ///< nothing usable: the caller uses the family default
};
const char* to_string(Match match);

/// The answer to a lookup.
struct LookupResult {
  Match match = Match::kNone;
  std::optional<Entry> entry;
  double distance = 0;                ///< log2-shape distance for kNearest, 0 otherwise
  std::vector<std::string> warnings;  ///< stale entries that were ignored, one line each
};

/// What a lookup may use.
struct LookupOptions {
  bool allow_nearest = true;
  /// Extra filter for nearest candidates (e.g. "the config is valid for my
  /// problem"); empty accepts all.
  std::function<bool(const Entry&)> accept;
};

/// Exact key, else the nearest problem of the same family, dtype and source
/// hash on the same arch (with the same NVRTC version), else kNone. Nearest
/// distance: Euclidean over log2 of the shape dimensions (dims named in only
/// one of the two problems make it ineligible); ties prefer the same driver
/// version (another driver runs the same code: its entries stand in, the
/// query's own problem at distance 0), then the same GPU name, then the
/// smaller problem key. Stale entries (same problem and GPU, other source
/// hash or NVRTC; another driver too where nearest shapes are not allowed)
/// are skipped with a warning.
LookupResult lookup(const std::vector<Entry>& entries, const Key& query, const LookupOptions& options = {});

/// Log2-scaled distance between two shapes; nullopt when their dimension
/// names differ.
std::optional<double> shape_distance(const std::map<std::string, std::int64_t>& a,
                                     const std::map<std::string, std::int64_t>& b);

/// True when `a` should be kept over `b` for the same key (the merge rule in
/// cache/SCHEMA.md): one of kSpreadRepetitions or more repetitions over one
/// of fewer, then the lower p80 (where the [p20, p80] intervals are
/// disjoint, the faster entry's; where they overlap, the one whose slow end
/// is faster), then lower spread, then more repetitions, then more
/// evaluations, then the newer date, then the smaller config text. A strict
/// weak order: a merge keeps the same entry whatever the order of its inputs.
bool better_than(const Entry& a, const Entry& b);
/// Repetitions from which an entry's spread measures its noise.
constexpr std::int64_t kSpreadRepetitions = 3;

/// `kept`, the entry kept of two with the same key, takes `other`'s
/// deterministic pick where that is faster or `kept` has none (a key names
/// one problem on one GPU, source and toolchain: either measurement holds);
/// returns whether it did.
bool keep_faster_pick(Entry& kept, const Entry& other);

/// Keeps one entry per full key (the better_than one, where the first of
/// them stood, with the faster of their deterministic picks); returns how
/// many went.
std::size_t collapse_duplicates(std::vector<Entry>& entries);

/// What a merge did with the keys of its input (each key once, however many
/// entries of it the input holds).
struct MergeCount {
  std::size_t added = 0;     ///< keys the target did not hold
  std::size_t replaced = 0;  ///< the input's entry kept over the target's (better_than)
  std::size_t picks = 0;     ///< the target's entry kept, with the input's faster deterministic pick
  std::size_t kept = 0;      ///< the target's entry kept as it was
  std::size_t changed() const { return added + replaced + picks; }
};
/// Merges `incoming` into `into` (whose duplicates collapse first) by full
/// key with better_than (the entry kept takes the faster of the two
/// deterministic picks), so merging a file into its own copy changes nothing.
MergeCount merge_entries(std::vector<Entry>& into, const std::vector<Entry>& incoming);

/// What `ktune cache prune` drops.
struct PruneOptions {
  /// Entries with the same family, problem, dtype, arch and GPU as a newer
  /// entry (by date) go; where `usable` is given, an entry it says this build
  /// can use is kept over any it says not, whatever their dates.
  bool superseded = true;
  /// Whether this build can use an entry (its family's kernel source is this
  /// build's, and its config is in the space); empty: every entry can.
  std::function<bool(const Entry&)> usable;
  /// When non-empty, only this family's entries are pruned (every rule);
  /// the others stay as they are.
  std::string family;
  /// When non-empty: entries (of `family`, or all when empty) whose
  /// source_hash / nvrtc_version / driver_version differ from these go
  /// (entries with an empty nvrtc_version, gemm entries, compiled nothing
  /// and are not filtered by it).
  std::string source_hash;
  std::string nvrtc_version;
  std::string driver_version;
};
/// Removes entries per `options`; returns how many went.
std::size_t prune_entries(std::vector<Entry>& entries, const PruneOptions& options);

/// Entries in canonical order (by identity), as files store them.
void sort_entries(std::vector<Entry>& entries);

/// Largest cache file read: a bigger one is refused (kCache) before parsing.
inline constexpr std::uintmax_t kMaxCacheFileBytes = std::uintmax_t{64} << 20;

/// Parses a whole cache file's text; throws kCache naming `file` when it is
/// not one (corrupt, truncated, over kMaxCacheFileBytes, nested deeper than
/// kMaxJsonDepth, wrong format, newer schema, a malformed entry), one line
/// quoting at most a short excerpt of the text.
std::vector<Entry> parse_cache(const std::string& text, const std::string& file);
/// The file's text for `entries` (sorted, schema header, trailing newline).
std::string serialise_cache(std::vector<Entry> entries);

/// One cache file.
class CacheFile {
 public:
  explicit CacheFile(std::filesystem::path path);
  const std::filesystem::path& path() const { return path_; }

  /// Every entry; empty when the file does not exist (a cache about to be
  /// written). Throws kCache on a bad file, kInvalidInput when the path is a
  /// directory or another non-regular file.
  std::vector<Entry> load() const;
  /// load() of a file given as an input (`cache show`, merge inputs,
  /// `bench --cache`): a missing file is kInvalidInput, not an empty cache.
  std::vector<Entry> load_input() const;
  /// Refuses (kInvalidInput, writing nothing, no lock file) a cache path
  /// that update() could not write: see writable_target (base/files.hpp).
  /// Commands call it before long work whose result goes into the cache.
  void check_writable() const;
  /// Inserts or replaces (same full key: the newer tuning wins) one entry,
  /// filling date and ktune_version when empty; the entry it replaces
  /// keeps its deterministic pick where this one has none or a slower one.
  void put(Entry entry);
  /// put() of a tuning session's winner, which competed with what the file
  /// held for its key when the session read it (`seen`: the entries read
  /// then). An entry of that key that is not among them was written since
  /// by another process and never competed: the better of the two by the
  /// merge rule (better_than) is kept, with the faster deterministic pick,
  /// not the newer. Returns that entry where it is kept over `entry`, which
  /// is then not written; nullopt where `entry` went in.
  std::optional<Entry> put_winner(Entry entry, const std::vector<Entry>& seen);
  /// What put_deterministic_pick did.
  struct PickPut {
    bool beside = false;  ///< the key has an entry whose config sums by atomics: the winner is its pick
    std::optional<DeterministicPick> kept;  ///< a faster pick another process wrote meanwhile, kept over it
  };
  /// A --deterministic session's winner (`winner`) as the deterministic pick
  /// of its key's entry, where that entry's config sums by atomics
  /// (`atomic`); nothing is written where no such entry is there. It
  /// replaces the pick the session read (`seen`); a pick another process
  /// wrote since never competed with it, and the faster of the two stays,
  /// as put_winner keeps the better entry.
  PickPut put_deterministic_pick(const Entry& winner, const std::vector<Entry>& seen,
                                 const std::function<bool(const nlohmann::json& config)>& atomic);
  /// Runs `change` on the entries under the lock and writes the result
  /// atomically if it returns true. A symlinked cache is written through to
  /// its target, whose `<target>.lock` is taken. Throws kCache (file
  /// untouched) on a bad file, kInvalidInput (no lock file) when the path is
  /// not writable (check_writable).
  void update(const std::function<bool(std::vector<Entry>&)>& change);
  /// Merges another file's entries in; returns the count added or replaced.
  std::size_t merge_from(const std::vector<Entry>& incoming);

 private:
  std::filesystem::path path_;
};

}  // namespace ktune::cache
