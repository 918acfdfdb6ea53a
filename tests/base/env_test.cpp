// KTUNE_EMU_SCHEDULE: the three orders and a seed are read; anything else is
// refused with one line naming the variable and what it accepts.
#include "base/env.hpp"

#include <catch2/catch.hpp>
#include <cstdlib>

#include "base/error.hpp"

namespace base_env_test {

namespace {

using ktune::env::EmuSchedule;

// Sets KTUNE_EMU_SCHEDULE for one scope (unset when `value` is null).
struct ScheduleVariable {
  explicit ScheduleVariable(const char* value) {
    if (value) ::setenv("KTUNE_EMU_SCHEDULE", value, 1);
    else ::unsetenv("KTUNE_EMU_SCHEDULE");
  }
  ~ScheduleVariable() { ::unsetenv("KTUNE_EMU_SCHEDULE"); }
};

EmuSchedule read(const char* value) {
  ScheduleVariable v(value);
  return ktune::env::emu_schedule();
}

}  // namespace

TEST_CASE("KTUNE_EMU_SCHEDULE: shuffled (seed 1) by default, in-order, reverse, shuffle with the seed given",
          "[base][env]") {
  // Shuffled unless told: a kernel missing a barrier fails a check as it may on a GPU, not only now and then.
  CHECK(read(nullptr).order == EmuSchedule::Order::kShuffle);
  CHECK(read(nullptr).seed == 1);
  CHECK(read("").order == EmuSchedule::Order::kShuffle);
  CHECK(read("in-order").order == EmuSchedule::Order::kInOrder);
  CHECK(read("reverse").order == EmuSchedule::Order::kReverse);
  CHECK(read("shuffle").order == EmuSchedule::Order::kShuffle);
  CHECK(read("shuffle").seed == 1);
  CHECK(read("shuffle:0").seed == 0);
  CHECK(read("shuffle:18446744073709551615").seed == 18446744073709551615ull);
}

TEST_CASE("KTUNE_EMU_SCHEDULE: any other value is refused in one line", "[base][env]") {
  for (const char* bad : {"random", "Reverse", "shuffle:", "shuffle:-1", "shuffle:1x", "shuffle: 3",
                          "shuffle:18446744073709551616", "in-order "}) {
    INFO(bad);
    ScheduleVariable v(bad);
    try {
      ktune::env::emu_schedule();
      FAIL("accepted");
    } catch (const ktune::Error& e) {
      CHECK(e.kind() == ktune::ErrorKind::kInvalidInput);
      CHECK_THAT(e.what(), Catch::Contains("KTUNE_EMU_SCHEDULE must be in-order, reverse or shuffle[:SEED]"));
      CHECK(std::string(e.what()).find('\n') == std::string::npos);
    }
  }
}

}  // namespace base_env_test
