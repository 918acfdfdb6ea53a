// What results are stamped with: the NVIDIA driver's release read from the
// kernel module's version text, not the CUDA driver API version.
#include "base/stamp.hpp"

#include <catch2/catch.hpp>

#include <fstream>

#include "support.hpp"

namespace base_stamp_test {

TEST_CASE("the NVIDIA driver's release is read from /proc/driver/nvidia/version's text", "[base]") {
  using ktune::parse_nvidia_driver_release;
  CHECK(parse_nvidia_driver_release("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Oct  2 "
                                    "16:12:41 UTC 2026\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n") ==
        "580.159.04");
  CHECK(parse_nvidia_driver_release("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  575.57.08  Release "
                                    "Build  (dvs-builder@U16-I3-B03-4-3)  Wed May 21 2025\n") == "575.57.08");
  CHECK(parse_nvidia_driver_release("NVRM version: NVIDIA UNIX aarch64 Kernel Module  535.54  Tue Jun 6 2023\n") ==
        "535.54");
  // The GCC line's version is not the driver's; nothing on an NVRM line: none.
  CHECK(parse_nvidia_driver_release("GCC version:  gcc version 12.2.0\n").empty());
  CHECK(parse_nvidia_driver_release("").empty());

  const auto dir = ktune::test::scratch_dir("stamp");
  std::ofstream(dir / "version") << "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Oct  2\n";
  CHECK(ktune::nvidia_driver_release((dir / "version").string()) == "580.159.04");
  CHECK(ktune::nvidia_driver_release((dir / "missing").string()).empty());
}

}  // namespace base_stamp_test
