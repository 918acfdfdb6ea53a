// CPU reference of the token embedding lookup (forward) and its scatter-add
// backward: the single implementation of this op's math, used by the cpu
// backend and, once the family exists, as the kernel reference.
#pragma once
#include <cstdint>

namespace ktune::templates::embedding {

/// out[t, :] = table[tokens[t], :] for t in [0, n).
/// tokens (n,), table (vocab, dim), out (n, dim). Throws kInvalidInput for a
/// token outside [0, vocab).
template <class T>
void embedding_forward(const std::int32_t* tokens, const T* table, T* out, std::int64_t n, std::int64_t dim,
                       std::int64_t vocab);

/// dtable[tokens[t], c] += dout[t, c] for t in [0, n) and columns c in
/// [col_begin, col_end): callers split the columns across threads, so no two
/// threads touch the same element. dout (n, dim), dtable (vocab, dim).
template <class T>
void embedding_backward(const std::int32_t* tokens, const T* dout, T* dtable, std::int64_t n, std::int64_t dim,
                        std::int64_t col_begin, std::int64_t col_end);

}  // namespace ktune::templates::embedding
