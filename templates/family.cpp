#include "templates/family.hpp"

#include "base/hash.hpp"
#include "templates/embedded.hpp"

namespace ktune::templates {

std::string Family::source_hash() const {
  Hasher h;
  h.add(name());
  for (const auto& f : source_files()) h.add(f).add(expand_includes(f));
  return h.hex();
}

std::vector<BufferShape> Family::buffer_shapes(const Problem& problem) const {
  std::vector<BufferShape> shapes;
  for (const auto& b : make_workload(problem, 1).buffers) shapes.push_back({b.name, b.role, b.dtype, b.bytes.size()});
  return shapes;
}

ProblemForm Family::problem_form() const { return ProblemForm::of(problem_classes()); }

void Family::check(const Problem& problem) const {
  require_dims(name(), problem, problem_form());
  check_problem(problem);
}

}  // namespace ktune::templates
