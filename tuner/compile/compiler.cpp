#include "tuner/compile/compiler.hpp"

#include <dlfcn.h>
#include <elf.h>
#include <fmt/format.h>
#include <link.h>
#include <nvrtc.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <regex>
#include <sstream>

#include "base/env.hpp"
#include "base/error.hpp"
#include "base/files.hpp"
#include "base/hash.hpp"
#include "base/json_output.hpp"
#include "base/thread_pool.hpp"
#include "tuner/cuda/check.hpp"

namespace ktune::tuner {
namespace fs = std::filesystem;

namespace {

std::mutex not_stored_mutex;
NotStored not_stored_count;

}  // namespace

NotStored not_stored_so_far() {
  const std::lock_guard lock(not_stored_mutex);
  return not_stored_count;
}

void note_not_stored(const std::string& why) {
  const std::lock_guard lock(not_stored_mutex);
  if (not_stored_count.compiles++ == 0) not_stored_count.why = why;
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

const std::string& nvrtc_build() {
  static const std::string id = [] {
    Dl_info info{};
    if (::dladdr(reinterpret_cast<void*>(&nvrtcVersion), &info) == 0 || !info.dli_fbase) return std::string();
    // The loaded object holding nvrtcVersion, and its GNU build-id note.
    struct Search {
      const void* base;
      std::string id;
    } search{info.dli_fbase, {}};
    ::dl_iterate_phdr(
        [](dl_phdr_info* object, std::size_t, void* data) {
          auto& s = *static_cast<Search*>(data);
          for (int i = 0; i < object->dlpi_phnum; ++i) {
            const ElfW(Phdr)& ph = object->dlpi_phdr[i];
            if (ph.p_type != PT_LOAD || ph.p_offset != 0) continue;
            if (reinterpret_cast<const void*>(object->dlpi_addr + ph.p_vaddr) != s.base) return 0;
          }
          for (int i = 0; i < object->dlpi_phnum; ++i) {
            const ElfW(Phdr)& ph = object->dlpi_phdr[i];
            if (ph.p_type != PT_NOTE) continue;
            const auto* at = reinterpret_cast<const unsigned char*>(object->dlpi_addr + ph.p_vaddr);
            const auto* end = at + ph.p_memsz;
            while (at + sizeof(ElfW(Nhdr)) <= end) {
              const auto* note = reinterpret_cast<const ElfW(Nhdr)*>(at);
              const unsigned char* name = at + sizeof(ElfW(Nhdr));
              const unsigned char* desc = name + ((note->n_namesz + 3) & ~3u);
              if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0 &&
                  desc + note->n_descsz <= end) {
                for (unsigned k = 0; k < note->n_descsz; ++k) s.id += fmt::format("{:02x}", desc[k]);
                return 1;
              }
              at = desc + ((note->n_descsz + 3) & ~3u);
            }
          }
          return 0;
        },
        &search);
    return search.id;
  }();
  return id;
}

std::vector<KernelResources> parse_ptxas_report(const std::string& log) {
  static const std::regex entry(R"re(Compiling entry function '([^']+)')re");
  static const std::regex props(R"re(Function properties for (\S+))re");
  static const std::regex frame(
      R"re((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)re");
  static const std::regex used(R"re(Used (\d+) registers)re");
  static const std::regex smem(R"re((\d+) bytes smem)re");
  std::vector<KernelResources> out;
  std::string current_props;  // the function whose properties follow
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, entry)) {
      out.push_back({});
      out.back().lowered_name = m[1];
    } else if (std::regex_search(line, m, props)) {
      current_props = m[1];
    } else if (std::regex_search(line, m, frame)) {
      if (!out.empty() && current_props == out.back().lowered_name) {
        out.back().stack_bytes = std::stoi(m[1]);
        out.back().spill_store_bytes = std::stoi(m[2]);
        out.back().spill_load_bytes = std::stoi(m[3]);
      }
    } else if (std::regex_search(line, m, used) && !out.empty()) {
      out.back().registers = std::stoi(m[1]);
      if (std::smatch s; std::regex_search(line, s, smem)) out.back().static_smem_bytes = std::stoi(s[1]);
    }
  }
  return out;
}

// Without the cache, its folder is never resolved: --no-cache gets past a cache setting that names no folder.
Compiler::Compiler(bool use_cache) : Compiler(use_cache ? env::binary_cache_dir().string() : "", use_cache) {}
Compiler::Compiler(std::string cache_dir, bool use_cache) : cache_dir_(std::move(cache_dir)), use_cache_(use_cache) {
  env::cuda_include_dir();  // a KTUNE_CUDA_INCLUDE that names no folder, refused before any compile fails on it
}

namespace {

std::vector<std::string> options_for(const std::string& arch) {
  return {"--gpu-architecture=" + arch, "-std=c++17", "--ptxas-options=-v", "-lineinfo",
          "-I" + env::cuda_include_dir(), "-default-device"};
}

nlohmann::json to_json(const KernelResources& k) {
  return {{"name_expression", k.name_expression}, {"lowered_name", k.lowered_name}, {"registers", k.registers},
          {"spill_store_bytes", k.spill_store_bytes}, {"spill_load_bytes", k.spill_load_bytes},
          {"stack_bytes", k.stack_bytes}, {"static_smem_bytes", k.static_smem_bytes}};
}

KernelResources kernel_from_json(const nlohmann::json& j) {
  KernelResources k;
  k.name_expression = j.at("name_expression").get<std::string>();
  k.lowered_name = j.at("lowered_name").get<std::string>();
  k.registers = j.at("registers").get<int>();
  k.spill_store_bytes = j.at("spill_store_bytes").get<int>();
  k.spill_load_bytes = j.at("spill_load_bytes").get<int>();
  k.stack_bytes = j.at("stack_bytes").get<int>();
  k.static_smem_bytes = j.at("static_smem_bytes").get<int>();
  return k;
}

/// A cache entry is <key>.cubin plus <key>.json (written last, so its
/// presence means the entry is complete); the JSON records the cubin's hash,
/// so a damaged binary is a miss, never a crash.
bool load_cached(const fs::path& dir, CompileResult& r) {
  const fs::path meta_path = dir / (r.key + ".json");
  const fs::path bin_path = dir / (r.key + ".cubin");
  std::error_code ec;
  if (!fs::exists(meta_path, ec) || !fs::exists(bin_path, ec)) return false;
  try {
    const auto meta = nlohmann::json::parse(read_file(meta_path));
    std::string cubin = read_file(bin_path);
    if (hash_hex(cubin) != meta.at("cubin_hash").get<std::string>()) return false;
    r.cubin = std::move(cubin);
    r.log = meta.at("log").get<std::string>();
    r.kernels.clear();
    for (const auto& k : meta.at("kernels")) r.kernels.push_back(kernel_from_json(k));
    r.ok = true;
    r.cache_hit = true;
    return true;
  } catch (const std::exception&) {
    return false;  // corrupt entry: recompile and overwrite
  }
}

void store_cached(const fs::path& dir, const CompileResult& r) {
  nlohmann::json meta = {{"arch", r.arch}, {"options", r.options}, {"nvrtc", nvrtc_version()},
                         {"cubin_hash", hash_hex(r.cubin)}, {"log", r.log}, {"kernels", nlohmann::json::array()}};
  for (const auto& k : r.kernels) meta["kernels"].push_back(to_json(k));
  write_file_atomic(dir / (r.key + ".cubin"), r.cubin);
  // The log quotes source lines, which may be in another encoding than UTF-8 (a Latin-1 comment under a warning).
  write_file_atomic(dir / (r.key + ".json"), dump_json(meta, 1));
}

std::string program_log(nvrtcProgram prog) {
  size_t n = 0;
  nvrtcGetProgramLogSize(prog, &n);
  std::string log(n, '\0');
  if (n) nvrtcGetProgramLog(prog, log.data());
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

}  // namespace

namespace {

/// A result with its arch, options and cache key filled in, nothing compiled.
CompileResult prepared(const templates::Rendered& rendered, const std::string& device_arch) {
  const std::string arch = rendered.arch_specific && device_arch == "sm_90" ? "sm_90a" : device_arch;
  CompileResult r;
  r.arch = arch;
  r.options = options_for(arch);
  Hasher h;
  h.add(rendered.source).add(arch).add(nvrtc_version()).add(nvrtc_build());
  for (const auto& o : r.options) h.add(o);
  for (const auto& k : rendered.kernels) h.add(k);
  r.key = h.hex();
  return r;
}

}  // namespace

bool Compiler::cached(const templates::Rendered& rendered, const std::string& arch) const {
  CompileResult r = prepared(rendered, arch);
  return use_cache_ && load_cached(cache_dir_, r);
}

std::string Compiler::key(const templates::Rendered& rendered, const std::string& arch) const {
  return prepared(rendered, arch).key;
}

CompileResult Compiler::compile(const templates::Rendered& rendered, const std::string& arch) const {
  CompileResult r = prepared(rendered, arch);
  if (use_cache_ && load_cached(cache_dir_, r)) {
    for (std::size_t i = 0; i < r.kernels.size() && i < rendered.kernels.size(); ++i)
      r.kernels[i].name_expression = rendered.kernels[i];
    return r;
  }

  const auto start = std::chrono::steady_clock::now();
  nvrtcProgram prog{};
  KT_CHECK_NVRTC(nvrtcCreateProgram(&prog, rendered.source.c_str(), "kernel.cu", 0, nullptr, nullptr));
  struct Destroy {
    nvrtcProgram* p;
    ~Destroy() { nvrtcDestroyProgram(p); }
  } destroy{&prog};
  for (const auto& k : rendered.kernels) KT_CHECK_NVRTC(nvrtcAddNameExpression(prog, k.c_str()));
  std::vector<const char*> opts;
  for (const auto& o : r.options) opts.push_back(o.c_str());
  const nvrtcResult rc = nvrtcCompileProgram(prog, static_cast<int>(opts.size()), opts.data());
  r.log = program_log(prog);
  r.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (rc != NVRTC_SUCCESS) {
    r.log = std::string(nvrtcGetErrorString(rc)) + "\n" + r.log;
    return r;
  }
  size_t size = 0;
  KT_CHECK_NVRTC(nvrtcGetCUBINSize(prog, &size));
  r.cubin.resize(size);
  KT_CHECK_NVRTC(nvrtcGetCUBIN(prog, r.cubin.data()));
  const auto report = parse_ptxas_report(r.log);
  for (const auto& expr : rendered.kernels) {
    const char* lowered = nullptr;
    KT_CHECK_NVRTC(nvrtcGetLoweredName(prog, expr.c_str(), &lowered));
    KernelResources k;
    k.lowered_name = lowered;
    for (const auto& found : report)
      if (found.lowered_name == k.lowered_name) k = found;
    k.name_expression = expr;
    r.kernels.push_back(k);
  }
  r.ok = true;
  if (use_cache_) {
    try {
      store_cached(cache_dir_, r);
    } catch (const Error& e) {
      r.not_stored = e.what();
      note_not_stored(r.not_stored);
    }
  }
  return r;
}

std::vector<CompileResult> Compiler::compile_many(const std::vector<templates::Rendered>& sources,
                                                  const std::string& arch, unsigned threads,
                                                  const std::function<void(std::size_t, const CompileResult&)>& done)
    const {
  ThreadPool pool(threads ? threads : env::compile_threads());
  std::vector<std::future<CompileResult>> futures;
  for (const auto& s : sources) futures.push_back(pool.submit([this, &s, &arch] {
    try {
      return compile(s, arch);
    } catch (const Error& e) {
      CompileResult r;
      r.arch = arch;
      r.log = e.what();
      return r;
    }
  }));
  std::vector<CompileResult> out;
  for (auto& f : futures) {
    out.push_back(f.get());
    if (done) done(out.size(), out.back());
  }
  return out;
}

}  // namespace ktune::tuner
