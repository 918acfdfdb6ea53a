// Reading and writing the safetensors format: an 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__":
// {...}}, then the raw little-endian tensor bytes.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/files.hpp"

namespace ktune {

/// One tensor: dtype as safetensors spells it ("F32", "F64", "I32", ...),
/// shape, and its raw bytes.
struct SafeTensor {
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::string bytes;

  std::int64_t numel() const;
};

/// A whole file: tensors in the order they are written, and string metadata.
struct TensorFile {
  std::vector<std::string> order;
  std::map<std::string, SafeTensor> tensors;
  std::map<std::string, std::string> metadata;

  void add(const std::string& name, SafeTensor tensor);
  /// Tensor by name; throws kInvalidInput naming `file` when absent.
  const SafeTensor& at(const std::string& name, const std::string& file = "the file") const;
};

/// Bytes per element of a safetensors dtype; throws kInvalidInput for an
/// unknown dtype.
std::int64_t dtype_size(const std::string& dtype);

/// Parses a file; throws kIo when unreadable and kInvalidInput, naming the
/// file, when the header or offsets are malformed.
TensorFile read_safetensors(const std::filesystem::path& path);
TensorFile parse_safetensors(const std::string& bytes, const std::string& name);

/// Serialises (header padded to 8 bytes) and writes atomically.
std::string serialize_safetensors(const TensorFile& file);
void write_safetensors(const std::filesystem::path& path, const TensorFile& file);

/// A tensor's place in a file: its name, dtype and shape (the bytes it
/// spans follow from them).
struct TensorEntry {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;

  std::int64_t bytes() const;
};

/// Where a tensor lies in a file: its entry and its bytes [begin, end),
/// counted from the start of the data (after the header).
struct TensorSpan {
  TensorEntry entry;
  std::uint64_t begin = 0, end = 0;
};

/// Writes a safetensors file a tensor at a time, for files larger than what
/// should be held in memory at once: the header (every entry and the
/// metadata) at construction, then each tensor's bytes by `write`, in the
/// entries' order, then `commit`. Atomic as write_file_atomic: without a
/// commit the target is untouched.
class SafetensorsWriter {
 public:
  SafetensorsWriter(const std::filesystem::path& path, std::vector<TensorEntry> entries,
                    const std::map<std::string, std::string>& metadata);
  /// The next entry's bytes; throws kInternal when they are not its size or
  /// every entry is written.
  void write(std::string_view bytes);
  /// Throws kInternal unless every entry was written.
  void commit();

 private:
  AtomicFile file_;
  std::vector<TensorEntry> entries_;
  std::size_t next_ = 0;
};

/// A file's header, its tensors read from the file on demand (one at a time,
/// not the whole file). Throws as read_safetensors at construction.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::filesystem::path& path);
  const std::filesystem::path& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// Tensor names in the order of their data.
  const std::vector<std::string>& order() const { return order_; }
  bool contains(const std::string& name) const { return spans_.count(name) > 0; }
  /// A tensor's name, dtype and shape, its bytes unread; null when it is absent.
  const TensorEntry* entry(const std::string& name) const {
    const auto it = spans_.find(name);
    return it == spans_.end() ? nullptr : &it->second.entry;
  }
  /// Throws kInvalidInput naming the file and the tensor when it is absent.
  SafeTensor read(const std::string& name) const;

 private:
  std::filesystem::path path_;
  std::map<std::string, std::string> metadata_;
  std::vector<std::string> order_;
  std::map<std::string, TensorSpan> spans_;
  std::uint64_t data_start_ = 0;
};

}  // namespace ktune
