// Template files compiled into the binary (see cmake/Embed.cmake), keyed by
// their path under templates/, e.g. "adamw/adamw.cuh".
#pragma once
#include <map>
#include <string>
#include <string_view>

namespace ktune::templates {

const std::map<std::string, std::string_view>& embedded_files();

/// Text of an embedded file; throws kInternal when absent.
std::string_view embedded_file(const std::string& path);

/// `path`'s text with every `#include "x"` of an embedded file replaced by
/// that file's (recursively expanded) text, each file once: the result is
/// self-contained for NVRTC and nvcc alike. Angle includes stay as written.
std::string expand_includes(const std::string& path);

}  // namespace ktune::templates
