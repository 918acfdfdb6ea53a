// Every environment knob ktune reads, in one place (STYLE.md habit 12).
#pragma once
#include <filesystem>
#include <string>

namespace ktune::env {

/// KTUNE_CACHE_DIR: root of the on-disk caches (compiled binaries, emulation
/// objects). Default: $XDG_CACHE_HOME/ktune, else ~/.cache/ktune.
std::filesystem::path cache_dir();

/// KTUNE_CUDA_INCLUDE: CUDA headers handed to NVRTC. Default: the toolkit
/// include directory found at build time.
std::string cuda_include_dir();

/// KTUNE_COMPILE_THREADS: parallel compilations. Default: hardware threads.
unsigned compile_threads();

/// KTUNE_HOST_CXX: host compiler for the emulation backend. Default: the C++
/// compiler ktune was built with.
std::string host_cxx();

/// KTUNE_NO_DEVICE=1 hides every GPU, as if no driver were installed.
bool no_device();

/// Reads a variable; empty when unset.
std::string get(const char* name);

}  // namespace ktune::env
