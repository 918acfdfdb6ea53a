// Residual add forward and backward (see reference.hpp).
#include "templates/residual/reference.hpp"

namespace ktune::templates::residual {

template <class T>
void residual_add(T* x, const T* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) x[i] += y[i];
}

template <class T>
void residual_backward(T* dstream, const T* dbranch_input, std::int64_t n) {
  residual_add(dstream, dbranch_input, n);
}

template void residual_add<float>(float*, const float*, std::int64_t);
template void residual_add<double>(double*, const double*, std::int64_t);
template void residual_backward<float>(float*, const float*, std::int64_t);
template void residual_backward<double>(double*, const double*, std::int64_t);

}  // namespace ktune::templates::residual
