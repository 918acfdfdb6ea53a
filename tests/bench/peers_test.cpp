// The PyTorch peers' own unit tests (bench/peers/test_*.py): the parts that
// need no torch (arguments, the batch file ktune writes, the tables, the
// loss check), run by the python3 the figures use; and bench/test_plot.py,
// plot.py's figures drawn on a stand-in for matplotlib.
#include <catch2/catch.hpp>

#include <string>

#include "support.hpp"

namespace bench_peers_test {

TEST_CASE("bench/peers: the peers' unit tests pass without torch", "[bench]") {
  std::string out;
  const int rc = ktune::test::run_command("python3 -m unittest discover -s " + std::string(KTUNE_SOURCE_DIR) +
                                              "/bench/peers -p 'test_*.py' 2>&1",
                                          &out);
  INFO(out);
  CHECK(rc == 0);
  CHECK_THAT(out, Catch::Contains("OK"));
}

TEST_CASE("bench/plot.py: its figures' labels and values, drawn without matplotlib", "[bench]") {
  std::string out;
  const int rc = ktune::test::run_command("python3 -m unittest discover -s " + std::string(KTUNE_SOURCE_DIR) +
                                              "/bench -p 'test_plot.py' 2>&1",
                                          &out);
  INFO(out);
  CHECK(rc == 0);
  CHECK_THAT(out, Catch::Contains("OK"));
}

}  // namespace bench_peers_test
