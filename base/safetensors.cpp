// The safetensors format (see safetensors.hpp).
#include "base/safetensors.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/files.hpp"
#include "base/json_input.hpp"

namespace ktune {

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

namespace {

void require_internal(bool cond, const std::string& message) {
  if (!cond) throw_error(ErrorKind::kInternal, message);
}

struct Header {
  bool complete = false;  // false: `head` ended before the header did
  std::uint64_t data_start = 0;
  std::map<std::string, std::string> metadata;
  std::vector<TensorSpan> tensors;  // in the order of their data
};

// `head` starts with the file's first bytes and holds at least the header;
// `file_size` is the whole file's.
Header parse_header(std::string_view head, std::uint64_t file_size, const std::string& name) {
  auto bad = [&](const std::string& why) {
    throw_error(ErrorKind::kInvalidInput, fmt::format("{} is not a valid safetensors file: {}", name, why));
  };
  if (head.size() < 8) bad("shorter than its 8-byte header length");
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(head[i]);
  if (header_len > file_size - 8) bad(fmt::format("header length {} exceeds the file", header_len));
  if (header_len > head.size() - 8) return {false, 8 + header_len, {}, {}};  // the caller reads more, asks again
  const nlohmann::json header = parse_json_input(head.substr(8, header_len),
                                                 fmt::format("the header of safetensors file {}", name),
                                                 ErrorKind::kInvalidInput);
  if (!header.is_object()) bad("header is not a JSON object");
  Header out;
  out.complete = true;
  out.data_start = 8 + header_len;
  const std::uint64_t data_size = file_size - out.data_start;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) bad("__metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m)
        out.metadata[m.key()] = m->is_string() ? m->get<std::string>() : m->dump();
      continue;
    }
    const auto& t = *it;
    if (!t.is_object() || !t.contains("dtype") || !t.contains("shape") || !t.contains("data_offsets"))
      bad(fmt::format("tensor '{}' lacks dtype, shape or data_offsets", it.key()));
    TensorSpan l;
    l.entry.name = it.key();
    try {
      l.entry.dtype = t.at("dtype").get<std::string>();
      // Whole numbers (nlohmann would take 128.5 as 128).
      if (!t.at("shape").is_array() ||
          !std::all_of(t.at("shape").begin(), t.at("shape").end(), [](const auto& d) { return d.is_number_integer(); }))
        bad(fmt::format("tensor '{}' has shape {}, which no file holds", it.key(), excerpt(t.at("shape").dump())));
      l.entry.shape = t.at("shape").get<std::vector<std::int64_t>>();
      const auto offsets = t.at("data_offsets").get<std::vector<std::uint64_t>>();
      if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > data_size)
        bad(fmt::format("tensor '{}' has data offsets outside the data", it.key()));
      // The shape's bytes, refused before they overflow (or a negative dimension makes them look right).
      std::int64_t expected = dtype_size(l.entry.dtype);
      for (const std::int64_t d : l.entry.shape) {
        if (d < 0 || (d > 0 && expected > std::numeric_limits<std::int64_t>::max() / d))
          bad(fmt::format("tensor '{}' has shape {}, which no file holds", it.key(), t.at("shape").dump()));
        expected *= d;
      }
      if (static_cast<std::int64_t>(offsets[1] - offsets[0]) != expected)
        bad(fmt::format("tensor '{}' spans {} bytes, its dtype and shape need {}", it.key(), offsets[1] - offsets[0],
                        expected));
      l.begin = offsets[0];
      l.end = offsets[1];
    } catch (const nlohmann::json::exception& e) {
      bad(fmt::format("tensor '{}': {}", it.key(), e.what()));
    }
    out.tensors.push_back(std::move(l));
  }
  // Keep the file's order of data offsets, so a round trip is byte-stable; an empty tensor before one that starts
  // where it does (both are at its offset).
  std::stable_sort(out.tensors.begin(), out.tensors.end(), [](const TensorSpan& a, const TensorSpan& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // As the format requires: the tensors' bytes tile the data, none shared by
  // two tensors (a write to one would change the other) and none held by no
  // tensor.
  std::uint64_t end = 0;
  for (const TensorSpan& l : out.tensors) {
    if (l.begin < end) bad(fmt::format("tensor '{}' overlaps the bytes of another", l.entry.name));
    if (l.begin > end) bad(fmt::format("bytes {}..{} of the data belong to no tensor", end, l.begin));
    end = l.end;
  }
  if (end != data_size) bad(fmt::format("bytes {}..{} of the data belong to no tensor", end, data_size));
  return out;
}

// The 8-byte length and the JSON header (padded to 8 bytes) of tensors laid
// out back to back in the entries' order.
std::string header_bytes(const std::vector<TensorEntry>& entries, const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const auto& e : entries) {
    const auto size = static_cast<std::uint64_t>(e.bytes());
    header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + size}}};
    offset += size;
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  std::string out(8, '\0');
  const std::uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + text;
}

std::vector<TensorEntry> entries_of(const TensorFile& file) {
  std::vector<TensorEntry> entries;
  for (const auto& name : file.order) {
    const auto& t = file.tensors.at(name);
    entries.push_back({name, t.dtype, t.shape});
    require_internal(static_cast<std::int64_t>(t.bytes.size()) == entries.back().bytes(),
                     fmt::format("tensor '{}' holds {} bytes, its dtype and shape need {}", name, t.bytes.size(),
                                 entries.back().bytes()));
  }
  return entries;
}

}  // namespace

TensorFile parse_safetensors(const std::string& bytes, const std::string& name) {
  const Header header = parse_header(bytes, bytes.size(), name);
  TensorFile file;
  file.metadata = header.metadata;
  for (const auto& l : header.tensors)
    file.add(l.entry.name, {l.entry.dtype, l.entry.shape, bytes.substr(header.data_start + l.begin, l.end - l.begin)});
  return file;
}

TensorFile read_safetensors(const std::filesystem::path& path) {
  return parse_safetensors(read_file(path), path.string());
}

std::string serialize_safetensors(const TensorFile& file) {
  std::string out = header_bytes(entries_of(file), file.metadata);
  for (const auto& name : file.order) out += file.tensors.at(name).bytes;
  return out;
}

void write_safetensors(const std::filesystem::path& path, const TensorFile& file) {
  SafetensorsWriter writer(path, entries_of(file), file.metadata);
  for (const auto& name : file.order) writer.write(file.tensors.at(name).bytes);
  writer.commit();
}

std::int64_t TensorEntry::bytes() const {
  std::int64_t n = dtype_size(dtype);
  for (auto d : shape) n *= d;
  return n;
}

SafetensorsWriter::SafetensorsWriter(const std::filesystem::path& path, std::vector<TensorEntry> entries,
                                     const std::map<std::string, std::string>& metadata)
    : file_(path), entries_(std::move(entries)) {
  file_.append(header_bytes(entries_, metadata));
}

void SafetensorsWriter::write(std::string_view bytes) {
  require_internal(next_ < entries_.size(), "every tensor of the file is already written");
  const TensorEntry& e = entries_[next_];
  require_internal(static_cast<std::int64_t>(bytes.size()) == e.bytes(),
                   fmt::format("tensor '{}' needs {} bytes, got {}", e.name, e.bytes(), bytes.size()));
  file_.append(bytes);
  ++next_;
}

void SafetensorsWriter::commit() {
  require_internal(next_ == entries_.size(), fmt::format("{} of {} tensors written", next_, entries_.size()));
  file_.commit();
}

namespace {

// Reads `size` bytes at `offset`; throws kIo naming the path on a short read.
std::string read_at(std::ifstream& in, const std::filesystem::path& path, std::uint64_t offset, std::uint64_t size) {
  std::string out(size, '\0');
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(out.data(), static_cast<std::streamsize>(size));
  if (!in || static_cast<std::uint64_t>(in.gcount()) != size)
    throw_error(ErrorKind::kIo, fmt::format("cannot read {} bytes at offset {} of {}", size, offset, path.string()));
  return out;
}

}  // namespace

SafetensorsReader::SafetensorsReader(const std::filesystem::path& path) : path_(path) {
  std::ifstream in(path, std::ios::binary);
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (!in || ec) throw_error(ErrorKind::kIo, fmt::format("cannot read {}: {}", path.string(),
                                                         ec ? ec.message() : std::strerror(errno)));
  std::string head = read_at(in, path, 0, std::min<std::uint64_t>(size, 8));
  Header header = parse_header(head, size, path.string());
  if (!header.complete) {
    head = read_at(in, path, 0, header.data_start);
    header = parse_header(head, size, path.string());
  }
  metadata_ = std::move(header.metadata);
  data_start_ = header.data_start;
  for (auto& l : header.tensors) {
    order_.push_back(l.entry.name);
    spans_[l.entry.name] = std::move(l);
  }
}

SafeTensor SafetensorsReader::read(const std::string& name) const {
  const auto it = spans_.find(name);
  KTUNE_REQUIRE(it != spans_.end(), fmt::format("{} has no tensor '{}'", path_.string(), name));
  std::ifstream in(path_, std::ios::binary);
  if (!in) throw_error(ErrorKind::kIo, fmt::format("cannot read {}: {}", path_.string(), std::strerror(errno)));
  const TensorSpan& span = it->second;
  return {span.entry.dtype, span.entry.shape, read_at(in, path_, data_start_ + span.begin, span.end - span.begin)};
}

}  // namespace ktune
