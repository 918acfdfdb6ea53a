// CPU reference of RMSNorm, forward and backward: the single implementation
// of its math, used by the cpu backend and as the kernel reference.
//   y = x * rstd * w,   rstd = 1 / sqrt(mean(x^2) + eps)   (per row)
#pragma once
#include <cstdint>

namespace ktune::templates::rmsnorm {

/// Normalises `rows` rows of `dim` elements. x, y (rows, dim); w (dim,);
/// rstd (rows,) receives 1/sqrt(mean(x^2)+eps), kept for the backward.
template <class T>
void rmsnorm_forward(const T* x, const T* w, T* y, T* rstd, std::int64_t rows, std::int64_t dim, T eps);

/// Gradients of rmsnorm_forward. With g = w*dy:
///   dx = rstd * (g - x * rstd^2 * mean(g*x))   (written)
///   dw += sum over rows of dy * x * rstd        (accumulated; callers
///   give each thread its own dw and add them up)
template <class T>
void rmsnorm_backward(const T* x, const T* w, const T* rstd, const T* dy, T* dx, T* dw, std::int64_t rows,
                      std::int64_t dim);

}  // namespace ktune::templates::rmsnorm
