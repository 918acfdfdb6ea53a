// Problems: the key and its inverse, and the form a family's problems take
// (read from its problem classes), which the one dims check uses.
#include "templates/problem.hpp"

#include <catch2/catch.hpp>

#include "base/error.hpp"
#include "templates/family.hpp"

namespace templates_problem_test {

using namespace ktune::templates;

TEST_CASE("a problem key reads back into the same problem", "[templates]") {
  const Problem p{"bf16", {{"tensors", 4}, {"numel", 16384}}};
  CHECK(Problem::from_key(p.key()) == p);
  CHECK(Problem::from_key("f32") == Problem{"f32", {}});
  CHECK_THROWS_AS(Problem::from_key("f32;numel"), ktune::Error);
  CHECK_THROWS_AS(Problem::from_key("f32;numel=x"), ktune::Error);
}

TEST_CASE("a family's problem form: dims every class names are required, the others optional", "[templates]") {
  const auto form = ProblemForm::of({Problem{"f16", {{"heads", 2}, {"seq", 8}}},
                                     Problem{"bf16", {{"heads", 4}, {"kv_heads", 2}, {"seq", 8}}}});
  CHECK(form.dtypes == std::vector<std::string>{"bf16", "f16"});
  CHECK(form.required == std::vector<std::string>{"heads", "seq"});
  CHECK(form.optional == std::vector<std::string>{"kv_heads"});
  CHECK(form.dims_text() == "heads, kv_heads (optional), seq");
  CHECK_NOTHROW(require_dims("f", Problem{"f16", {{"heads", 2}, {"seq", 8}}}, form));
  CHECK_THROWS_WITH(require_dims("f", Problem{"f16", {{"heads", 2}}}, form),
                    "f: dimension 'seq' is missing; f's dims: heads, kv_heads (optional), seq");
  CHECK_THROWS_WITH(require_dims("f", Problem{"f16", {}}, form),
                    Catch::Contains("dimensions 'heads', 'seq' are missing"));
  CHECK_THROWS_WITH(require_dims("f", Problem{"f16", {{"heads", 2}, {"seq", 8}, {"x", 1}}}, form),
                    Catch::Contains("unknown dimension 'x'"));
  // Every registered family's classes pass its own check.
  for (const auto* f : all_families())
    for (const auto& p : f->problem_classes()) CHECK_NOTHROW(f->check(p));
}

}  // namespace templates_problem_test
