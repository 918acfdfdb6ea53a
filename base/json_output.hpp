// JSON that ktune writes for programs to read (--json on stdout, --json-out
// and other report files): nlohmann's dump throws at a string that is not
// UTF-8, as a file name in another encoding is, after the work that made it.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace ktune {

/// `j` as text, `indent` as nlohmann's dump takes it (-1: one line), a byte
/// of a string that is not UTF-8 written as U+FFFD instead of the write
/// refused.
template <class Json>
std::string dump_json(const Json& j, int indent = -1) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

}  // namespace ktune
