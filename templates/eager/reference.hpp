// CPU reference of the primitive ops (templates/eager/primitive.cuh): the
// single implementation of their math, in fp64. The eager decompositions are
// checked against the fused families' own references instead.
#pragma once

namespace ktune::templates::eager {

/// The ops, in the order of the prim::UnaryOp / BinaryOp / ReduceOp enums of primitive.cuh.
enum class Unary { kNeg, kExp, kLog, kRsqrt, kSqrt, kSilu, kSigmoid, kSquare, kScale, kAddScalar };
enum class Binary { kAdd, kSub, kMul, kDiv, kSiluBackward, kRsqrtBackward };
enum class Reduce { kSum, kMax, kMean };

double unary_reference(Unary op, double x, double alpha);
/// kSiluBackward: a = the gradient of silu(b); kRsqrtBackward: a = the gradient of r = rsqrt(.), b = r.
double binary_reference(Binary op, double a, double b);

}  // namespace ktune::templates::eager
