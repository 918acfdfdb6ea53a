// Embedding lookup and its backward (see reference.hpp).
#include "templates/embedding/reference.hpp"

#include <string>

#include "base/error.hpp"

namespace ktune::templates::embedding {

template <class T>
void embedding_forward(const std::int32_t* tokens, const T* table, T* out, std::int64_t n, std::int64_t dim,
                       std::int64_t vocab) {
  for (std::int64_t t = 0; t < n; ++t) {
    const std::int64_t id = tokens[t];
    KTUNE_REQUIRE(id >= 0 && id < vocab,
                  "token " + std::to_string(id) + " at position " + std::to_string(t) +
                      " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    const T* row = table + id * dim;
    T* dst = out + t * dim;
    for (std::int64_t c = 0; c < dim; ++c) dst[c] = row[c];
  }
}

template <class T>
void embedding_backward(const std::int32_t* tokens, const T* dout, T* dtable, std::int64_t n, std::int64_t dim,
                        std::int64_t col_begin, std::int64_t col_end) {
  for (std::int64_t t = 0; t < n; ++t) {
    T* dst = dtable + static_cast<std::int64_t>(tokens[t]) * dim;
    const T* src = dout + t * dim;
    for (std::int64_t c = col_begin; c < col_end; ++c) dst[c] += src[c];
  }
}

#define KTUNE_INSTANTIATE(T)                                                                                      \
  template void embedding_forward<T>(const std::int32_t*, const T*, T*, std::int64_t, std::int64_t, std::int64_t); \
  template void embedding_backward<T>(const std::int32_t*, const T*, T*, std::int64_t, std::int64_t, std::int64_t, \
                                      std::int64_t);
KTUNE_INSTANTIATE(float)
KTUNE_INSTANTIATE(double)
#undef KTUNE_INSTANTIATE

}  // namespace ktune::templates::embedding
