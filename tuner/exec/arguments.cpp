// A launch's arguments against its kernel's parameters: the check both
// backends make before a launch (see backend.hpp), and the kinds of a
// kernel's parameters read from its mangled name (the GPU's, which the driver
// does not give).
#include <cxxabi.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <memory>
#include <set>
#include <sstream>

#include "base/error.hpp"
#include "tuner/exec/backend.hpp"

namespace ktune::tuner::exec {

namespace {

/// One parameter's declared type, as the demangler spells it ("float const*", "unsigned int", "Strides").
templates::ArgKind kind_of_type(const std::string& type) {
  if (type.find_first_of("*&[") != std::string::npos) return templates::ArgKind::kInteger;  // an address
  std::istringstream words(type);
  std::string word, plain;
  while (words >> word)
    if (word != "const" && word != "volatile") plain += (plain.empty() ? "" : " ") + word;
  static const std::set<std::string> kFloats = {"float", "double"};
  static const std::set<std::string> kIntegers = {
      "bool",  "char",         "signed char",   "unsigned char",      "short",    "unsigned short",
      "int",   "unsigned int", "long",          "unsigned long",      "long long", "unsigned long long",
      "wchar_t", "char8_t",    "char16_t",      "char32_t",           "__int128", "unsigned __int128"};
  if (kFloats.count(plain)) return templates::ArgKind::kFloat;
  if (kIntegers.count(plain)) return templates::ArgKind::kInteger;
  return templates::ArgKind::kOther;
}

}  // namespace

std::optional<std::vector<templates::ArgKind>> parameter_kinds(const std::string& mangled) {
  int status = 0;
  const std::unique_ptr<char, decltype(&std::free)> name(
      abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status), &std::free);
  if (status != 0 || !name) return std::nullopt;  // extern "C", or not a name
  const std::string signature = name.get();
  if (signature.empty() || signature.back() != ')') return std::nullopt;
  // The parameter list: from the '(' that closes with the last ')', split at its own commas.
  int depth = 0;
  std::size_t open = std::string::npos;
  for (std::size_t i = signature.size(); i-- > 0;) {
    const char c = signature[i];
    depth += c == ')' || c == '>' || c == ']' ? 1 : c == '(' || c == '<' || c == '[' ? -1 : 0;
    if (depth == 0) {
      open = i;
      break;
    }
  }
  if (open == std::string::npos) return std::nullopt;
  const std::string list = signature.substr(open + 1, signature.size() - open - 2);
  std::vector<templates::ArgKind> kinds;
  if (list.empty() || list == "void") return kinds;
  std::size_t start = 0;
  depth = 0;
  for (std::size_t i = 0; i <= list.size(); ++i) {
    const char c = i < list.size() ? list[i] : ',';
    depth += c == '(' || c == '<' || c == '[' ? 1 : c == ')' || c == '>' || c == ']' ? -1 : 0;
    if (c == ',' && depth == 0) {
      kinds.push_back(kind_of_type(list.substr(start, i - start)));
      start = i + 1;
    }
  }
  return kinds;
}

void check_arguments(const std::string& where, const std::string& kernel, const std::vector<std::size_t>& sizes,
                     const std::vector<templates::ArgKind>& kinds, const templates::ArgPack& args) {
  const std::vector<std::size_t>& given = args.sizes();
  if (sizes != given)
    throw_error(ErrorKind::kCheckFailed,
                fmt::format("{}: kernel {} takes {} parameters of {} bytes; the launch passes {} arguments of {} bytes "
                            "(a kernel spec's args must match the kernel's parameters, in order)",
                            where, kernel, sizes.size(), fmt::join(sizes, ", "), given.size(), fmt::join(given, ", ")));
  // Of the same sizes, a float where the kernel takes an integer (or the other way) is read as other bytes.
  using templates::ArgKind;
  const auto name = [](ArgKind a) { return a == ArgKind::kFloat ? "a floating-point number" : "an integer"; };
  const auto& passed = args.kinds();
  for (std::size_t i = 0; i < kinds.size() && i < passed.size(); ++i)
    if (kinds[i] != ArgKind::kOther && passed[i] != ArgKind::kOther && kinds[i] != passed[i])
      throw_error(ErrorKind::kCheckFailed,
                  fmt::format("{}: kernel {} takes {} as parameter {}; the launch passes {} (a kernel spec's args "
                              "must match the kernel's parameters, in order)",
                              where, kernel, name(kinds[i]), i + 1, name(passed[i])));
}

}  // namespace ktune::tuner::exec
