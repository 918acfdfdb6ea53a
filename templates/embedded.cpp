#include "templates/embedded.hpp"

#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>

#include "base/error.hpp"

namespace ktune::templates {

std::string_view embedded_file(const std::string& path) {
  const auto& files = embedded_files();
  const auto it = files.find(path);
  if (it == files.end()) throw_error(ErrorKind::kInternal, "template file '" + path + "' is not embedded");
  return it->second;
}

namespace {

void expand_into(const std::string& path, std::set<std::string>& seen, std::ostringstream& out) {
  if (!seen.insert(path).second) return;
  static const std::regex include_line(R"re(^\s*#\s*include\s*"([^"]+)"\s*$)re");
  std::istringstream in{std::string(embedded_file(path))};
  out << "// ---- begin " << path << "\n";
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_match(line, m, include_line) && embedded_files().count(m[1].str())) {
      expand_into(m[1].str(), seen, out);
    } else if (line.find("#pragma once") == std::string::npos) {
      out << line << "\n";
    }
  }
  out << "// ---- end " << path << "\n";
}

}  // namespace

std::string expand_includes(const std::string& path) {
  // The embedded files are the same for the whole run: each is expanded once (a family's source hash, taken
  // for every cache entry shown or looked up, and each variant rendered, expand the same files again).
  static std::mutex mutex;
  static std::map<std::string, std::string> expanded;
  const std::lock_guard lock(mutex);
  auto it = expanded.find(path);
  if (it == expanded.end()) {
    std::set<std::string> seen;
    std::ostringstream out;
    expand_into(path, seen, out);
    it = expanded.emplace(path, out.str()).first;
  }
  return it->second;
}

}  // namespace ktune::templates
