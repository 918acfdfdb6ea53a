// Reading and writing the safetensors format: an 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__":
// {...}}, then the raw little-endian tensor bytes.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace ktune::model {

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

}  // namespace ktune::model
