// The primitive ops in fp64 (see reference.hpp).
#include "templates/eager/reference.hpp"

#include <cmath>

namespace ktune::templates::eager {

double unary_reference(Unary op, double x, double alpha) {
  switch (op) {
    case Unary::kNeg: return -x;
    case Unary::kExp: return std::exp(x);
    case Unary::kLog: return std::log(x);
    case Unary::kRsqrt: return 1.0 / std::sqrt(x);
    case Unary::kSqrt: return std::sqrt(x);
    case Unary::kSilu: return x / (1.0 + std::exp(-x));
    case Unary::kSigmoid: return 1.0 / (1.0 + std::exp(-x));
    case Unary::kSquare: return x * x;
    case Unary::kScale: return alpha * x;
    case Unary::kAddScalar: return x + alpha;
  }
  return NAN;
}

double binary_reference(Binary op, double a, double b) {
  switch (op) {
    case Binary::kAdd: return a + b;
    case Binary::kSub: return a - b;
    case Binary::kMul: return a * b;
    case Binary::kDiv: return a / b;
    case Binary::kSiluBackward: {
      const double s = 1.0 / (1.0 + std::exp(-b));
      return a * s * (1.0 + b * (1.0 - s));
    }
    case Binary::kRsqrtBackward: return -0.5 * a * b * b * b;
  }
  return NAN;
}

}  // namespace ktune::templates::eager
