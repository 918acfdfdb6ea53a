// The safetensors format (see safetensors.hpp).
#include "model/safetensors.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/files.hpp"
#include "base/json_input.hpp"

namespace ktune::model {

std::int64_t SafeTensor::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

void TensorFile::add(const std::string& name, SafeTensor tensor) {
  if (!tensors.count(name)) order.push_back(name);
  tensors[name] = std::move(tensor);
}

const SafeTensor& TensorFile::at(const std::string& name, const std::string& file) const {
  auto it = tensors.find(name);
  KTUNE_REQUIRE(it != tensors.end(), fmt::format("{} has no tensor '{}'", file, name));
  return it->second;
}

std::int64_t dtype_size(const std::string& dtype) {
  static const std::map<std::string, std::int64_t> sizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4},
      {"I16", 2}, {"I8", 1},  {"U8", 1},  {"U16", 2},  {"U32", 4}, {"BOOL", 1}};
  auto it = sizes.find(dtype);
  KTUNE_REQUIRE(it != sizes.end(), fmt::format("unknown safetensors dtype '{}'", dtype));
  return it->second;
}

TensorFile parse_safetensors(const std::string& bytes, const std::string& name) {
  auto bad = [&](const std::string& why) {
    throw_error(ErrorKind::kInvalidInput, fmt::format("{} is not a valid safetensors file: {}", name, why));
  };
  if (bytes.size() < 8) bad("shorter than its 8-byte header length");
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(bytes[i]);
  if (header_len > bytes.size() - 8) bad(fmt::format("header length {} exceeds the file", header_len));
  const nlohmann::json header = parse_json_input(std::string_view(bytes).substr(8, header_len),
                                                 fmt::format("the header of safetensors file {}", name),
                                                 ErrorKind::kInvalidInput);
  if (!header.is_object()) bad("header is not a JSON object");
  const std::uint64_t data_start = 8 + header_len;
  const std::uint64_t data_size = bytes.size() - data_start;
  TensorFile file;
  // Keep the file's order of data offsets, so a round trip is byte-stable.
  std::vector<std::pair<std::uint64_t, std::string>> by_offset;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) bad("__metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m)
        file.metadata[m.key()] = m->is_string() ? m->get<std::string>() : m->dump();
      continue;
    }
    const auto& t = *it;
    if (!t.is_object() || !t.contains("dtype") || !t.contains("shape") || !t.contains("data_offsets"))
      bad(fmt::format("tensor '{}' lacks dtype, shape or data_offsets", it.key()));
    SafeTensor st;
    try {
      st.dtype = t.at("dtype").get<std::string>();
      st.shape = t.at("shape").get<std::vector<std::int64_t>>();
      const auto offsets = t.at("data_offsets").get<std::vector<std::uint64_t>>();
      if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > data_size)
        bad(fmt::format("tensor '{}' has data offsets outside the data", it.key()));
      const std::int64_t expected = st.numel() * dtype_size(st.dtype);
      if (static_cast<std::int64_t>(offsets[1] - offsets[0]) != expected)
        bad(fmt::format("tensor '{}' spans {} bytes, its dtype and shape need {}", it.key(), offsets[1] - offsets[0],
                        expected));
      st.bytes = bytes.substr(data_start + offsets[0], offsets[1] - offsets[0]);
      by_offset.emplace_back(offsets[0], it.key());
    } catch (const nlohmann::json::exception& e) {
      bad(fmt::format("tensor '{}': {}", it.key(), e.what()));
    }
    file.tensors[it.key()] = std::move(st);
  }
  std::sort(by_offset.begin(), by_offset.end());
  for (auto& [offset, tname] : by_offset) file.order.push_back(tname);
  return file;
}

TensorFile read_safetensors(const std::filesystem::path& path) {
  return parse_safetensors(read_file(path), path.string());
}

std::string serialize_safetensors(const TensorFile& file) {
  nlohmann::ordered_json header;
  if (!file.metadata.empty()) header["__metadata__"] = file.metadata;
  std::uint64_t offset = 0;
  for (const auto& name : file.order) {
    const auto& t = file.tensors.at(name);
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  std::string out(8, '\0');
  std::uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += text;
  for (const auto& name : file.order) out += file.tensors.at(name).bytes;
  return out;
}

void write_safetensors(const std::filesystem::path& path, const TensorFile& file) {
  write_file_atomic(path, serialize_safetensors(file));
}

}  // namespace ktune::model
