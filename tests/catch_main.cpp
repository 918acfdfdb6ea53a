// Catch2's main, compiled once for every test executable, with one option of
// ours: --emu-schedule ORDER sets KTUNE_EMU_SCHEDULE (base/env.hpp) for the
// run, so that ctest can run the emu tests a second time in another thread
// order (tests/CMakeLists.txt).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

int main(int argc, char* argv[]) {
  Catch::Session session;
  std::string schedule;
  session.cli(session.cli() | Catch::clara::Opt(schedule, "order")["--emu-schedule"](
                                  "KTUNE_EMU_SCHEDULE for this run: in-order, reverse or shuffle[:SEED]"));
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  if (!schedule.empty()) ::setenv("KTUNE_EMU_SCHEDULE", schedule.c_str(), 1);
  return session.run();
}
