// The list of kernel families. A new family adds one line here; the
// primitive families of the eager decompositions come as one list.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "base/json_input.hpp"
#include "templates/adamw/adamw.hpp"
#include "templates/attention/attention.hpp"
#include "templates/cast/cast.hpp"
#include "templates/cross_entropy/cross_entropy.hpp"
#include "templates/eager/primitive.hpp"
#include "templates/embedding/embedding.hpp"
#include "templates/family.hpp"
#include "templates/grad_norm/grad_norm.hpp"
#include "templates/rmsnorm/rmsnorm.hpp"
#include "templates/rope/rope.hpp"
#include "templates/softmax/softmax.hpp"
#include "templates/swiglu/swiglu.hpp"

namespace ktune::templates {

const std::vector<const Family*>& all_families() {
  static const std::vector<const Family*> families = [] {
    std::vector<const Family*> fused = {
      &adamw::multi_tensor_family(),
      &adamw::single_tensor_family(),
      &adamw::eager_family(),
      &attention::forward_family(),
      &attention::backward_family(),
      &cast::to_bf16_family(),
      &cast::to_f32_family(),
      &cross_entropy::forward_family(),
      &cross_entropy::backward_family(),
      &embedding::forward_family(),
      &embedding::backward_family(),
      &grad_norm::family(),
      &rmsnorm::forward_family(),
      &rmsnorm::backward_family(),
      &rmsnorm::residual_forward_family(),
      &rmsnorm::residual_backward_family(),
      &rope::forward_family(),
      &rope::backward_family(),
      &softmax::forward_family(),
      &softmax::backward_family(),
      &swiglu::forward_family(),
      &swiglu::backward_family(),
    };
    const auto primitives = eager::primitive_families();  // the eager decompositions' building blocks
    fused.insert(fused.end(), primitives.begin(), primitives.end());
    return fused;
  }();
  return families;
}

const Family* family_named(const std::string& name) {
  for (const Family* f : all_families())
    if (f->name() == name) return f;
  return nullptr;
}

const Family& find_family(const std::string& name) {
  if (const Family* f = family_named(name)) return *f;
  std::vector<std::string> known;
  for (const Family* f : all_families()) known.push_back(f->name());
  throw_error(ErrorKind::kInvalidInput, fmt::format("unknown family '{}'{}; known families: {}", name,
                                                    did_you_mean(name, known), fmt::join(known, ", ")));
}

}  // namespace ktune::templates
