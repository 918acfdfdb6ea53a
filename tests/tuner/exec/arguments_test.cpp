// A launch's arguments against its kernel's parameters (tuner/exec/arguments.cpp):
// the kinds of a kernel's parameters read from its mangled name, as the GPU
// backend reads them (the driver gives sizes alone), and the one check both
// backends make, by size and, where both sides know it, by kind.
#include <catch2/catch.hpp>

#include <cstdint>
#include <optional>
#include <vector>

#include "base/error.hpp"
#include "tuner/exec/backend.hpp"

namespace tuner_exec_arguments_test {

using namespace ktune;
using templates::ArgKind;
using tuner::exec::check_arguments;
using tuner::exec::parameter_kinds;

constexpr ArgKind F = ArgKind::kFloat, I = ArgKind::kInteger, O = ArgKind::kOther;

TEST_CASE("a kernel's parameter kinds from its mangled name", "[tuner][exec]") {
  // void vector_add<256, 4>(float const*, float const*, float*, int)
  CHECK(parameter_kinds("_Z10vector_addILi256ELi4EEvPKfS1_Pfi") == std::vector{I, I, I, I});
  // void foo<float, 2>(__nv_bfloat16 const*, float, double, unsigned int, long long, unsigned long long)
  CHECK(parameter_kinds("_Z3fooIfLi2EEvPK13__nv_bfloat16fdjxy") == std::vector{I, F, F, I, I, I});
  // void attention<64, half_t>(half_t const*, Strides, int, float, kt::Vec<half_t, 4>, half_t*, double,
  //                            unsigned long long, bool, char): structs and templates (commas inside) are other bytes
  CHECK(parameter_kinds("_Z9attentionILi64E6half_tEvPKT0_7StridesifN2kt3VecIS1_Li4EEEPS1_dybc") ==
        std::vector{I, O, I, F, O, I, F, I, I, I});
  CHECK(parameter_kinds("_Z4nonev") == std::vector<ArgKind>{});  // no parameters
  CHECK_FALSE(parameter_kinds("vector_add").has_value());          // extern "C": its name says nothing
  CHECK_FALSE(parameter_kinds("").has_value());
}

TEST_CASE("a launch's arguments are checked by size, then by kind where both sides know it", "[tuner][exec]") {
  templates::ArgPack args;
  args.add(std::uint64_t{0x1000}).add(std::int32_t{7});
  CHECK_NOTHROW(check_arguments("GPU", "k<1>", {8, 4}, {I, I}, args));
  CHECK_NOTHROW(check_arguments("GPU", "k<1>", {8, 4}, {}, args));      // kinds unknown: sizes alone
  CHECK_NOTHROW(check_arguments("GPU", "k<1>", {8, 4}, {I, O}, args));  // a struct of 4 bytes takes any
  CHECK_THROWS_WITH(check_arguments("GPU", "k<1>", {8, 4, 4}, {}, args),
                    Catch::Contains("GPU: kernel k<1> takes 3 parameters of 8, 4, 4 bytes; the launch passes 2 "
                                    "arguments of 8, 4 bytes"));
  CHECK_THROWS_WITH(check_arguments("GPU", "k<1>", {8, 4}, {I, F}, args),
                    Catch::Contains("GPU: kernel k<1> takes a floating-point number as parameter 2; the launch passes "
                                    "an integer"));
  try {
    check_arguments("emulation", "k<1>", {8, 8}, {}, args);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kCheckFailed);
  }
}

}  // namespace tuner_exec_arguments_test
