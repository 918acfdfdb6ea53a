// Portable RNG, lazy permutation and point encoding for strategies.
#include "search/sampling.hpp"

#include <algorithm>
#include <cmath>

namespace ktune::search {

namespace {
std::uint64_t splitmix64(std::uint64_t& x) {
  std::uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Rng::Rng(std::uint64_t seed) {
  for (auto& s : s_) s = splitmix64(seed);
}

std::uint64_t Rng::next() {
  const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const std::uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

std::uint64_t Rng::uniform(std::uint64_t n) {
  const std::uint64_t limit = (~std::uint64_t{0}) - (~std::uint64_t{0}) % n;
  std::uint64_t x;
  do x = next();
  while (x >= limit);
  return x % n;
}

double Rng::real() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

double Rng::normal() {
  const double u1 = 1.0 - real();  // (0, 1]
  const double u2 = real();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

std::optional<std::uint64_t> LazyPermutation::next() {
  if (drawn_ >= n_) return std::nullopt;
  const std::uint64_t j = drawn_ + rng_.uniform(n_ - drawn_);
  auto value_at = [&](std::uint64_t i) {
    const auto it = swapped_.find(i);
    return it == swapped_.end() ? i : it->second;
  };
  const std::uint64_t picked = value_at(j);
  swapped_[j] = value_at(drawn_);
  swapped_.erase(drawn_);
  ++drawn_;
  return picked;
}

Point point_of(const Space& space, const Config& config) {
  Point p;
  p.reserve(space.params().size());
  for (const Param& param : space.params()) {
    const auto v = config.at(param.name);
    int pos = 0;
    while (pos < static_cast<int>(param.values.size()) && param.values[pos] != v) ++pos;
    p.push_back(pos < static_cast<int>(param.values.size()) ? pos : 0);
  }
  return p;
}

Config config_of(const Space& space, const Point& point) {
  Config c;
  for (std::size_t i = 0; i < point.size(); ++i) c.set(space.params()[i].name, space.params()[i].values[point[i]]);
  return c;
}

std::uint64_t index_of(const Space& space, const Point& point) {
  std::uint64_t index = 0;
  for (std::size_t i = 0; i < point.size(); ++i)
    index = index * space.params()[i].values.size() + static_cast<std::uint64_t>(point[i]);
  return index;
}

Point point_at(const Space& space, std::uint64_t index) {
  Point p(space.params().size());
  for (std::size_t i = p.size(); i-- > 0;) {
    const auto radix = space.params()[i].values.size();
    p[i] = static_cast<int>(index % radix);
    index /= radix;
  }
  return p;
}

bool valid(const StrategyContext& context, const Config& config) {
  return context.evaluator == nullptr || context.evaluator->is_valid(config);
}

// Evaluator's default (search/evaluator.hpp), here beside config_of.
bool Evaluator::is_valid_at(const std::vector<int>& positions) const {
  return is_valid(config_of(space(), positions));
}

bool valid(const StrategyContext& context, const Point& point) {
  if (context.evaluator == nullptr) return true;
  // The point's positions are in the evaluator's space when the context's space is that one (the usual case).
  if (context.space == &context.evaluator->space()) return context.evaluator->is_valid_at(point);
  return context.evaluator->is_valid(config_of(*context.space, point));
}

std::optional<Point> random_valid_point(const StrategyContext& context, Rng& rng, int tries) {
  const std::uint64_t n = context.space->size();
  if (n == 0) return std::nullopt;
  for (int t = 0; t < tries; ++t) {
    Point p = point_at(*context.space, rng.uniform(n));
    if (valid(context, p)) return p;
  }
  return std::nullopt;
}

std::optional<Point> scan_for_valid_point(const StrategyContext& context, Rng& rng,
                                          const std::function<bool(std::uint64_t)>& fresh, std::uint64_t limit) {
  const std::uint64_t n = context.space->size();
  if (n == 0) return std::nullopt;
  const std::uint64_t start = rng.uniform(n);
  for (std::uint64_t k = 0; k < std::min(n, limit); ++k) {
    const std::uint64_t i = k < n - start ? start + k : k - (n - start);
    if (!fresh(i)) continue;
    Point p = point_at(*context.space, i);
    if (valid(context, p)) return p;
  }
  return std::nullopt;
}

std::optional<Point> random_valid_within_one_step(const StrategyContext& context, Rng& rng, const Point& point) {
  const auto& params = context.space->params();
  std::vector<std::size_t> free;  // parameters with more than one value
  for (std::size_t i = 0; i < params.size(); ++i)
    if (params[i].values.size() > 1) free.push_back(i);
  if (free.empty()) return std::nullopt;
  // Moves -1, 0 or +1 of each free parameter, from `digit(k)` for the k-th.
  auto shifted = [&](auto digit, Point& q) {
    q = point;
    bool moved = false;
    for (std::size_t k = 0; k < free.size(); ++k) {
      const std::size_t i = free[k];
      const int d = digit(k) - 1;
      q[i] += d;
      moved = moved || d != 0;
      if (q[i] < 0 || q[i] >= static_cast<int>(params[i].values.size())) return false;
    }
    return moved && valid(context, q);
  };
  // Rejection sampling is uniform over the valid ones; when it keeps missing
  // and the neighbourhood is small (3^k - 1 points for k free parameters,
  // k <= 8), list it.
  Point q;
  for (int attempt = 0; attempt < 200; ++attempt)
    if (shifted([&](std::size_t) { return static_cast<int>(rng.uniform(3)); }, q)) return q;
  if (free.size() > 8) return std::nullopt;
  std::uint64_t combos = 1;
  for (std::size_t k = 0; k < free.size(); ++k) combos *= 3;
  std::vector<Point> all;
  for (std::uint64_t code = 0; code < combos; ++code) {
    auto digit = [code](std::size_t k) {
      std::uint64_t c = code;
      for (std::size_t j = 0; j < k; ++j) c /= 3;
      return static_cast<int>(c % 3);
    };
    if (shifted(digit, q)) all.push_back(q);
  }
  if (all.empty()) return std::nullopt;
  return all[rng.uniform(all.size())];
}

std::vector<Point> valid_neighbours(const StrategyContext& context, const Point& point, bool adjacent) {
  std::vector<Point> out;
  const auto& params = context.space->params();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const int n = static_cast<int>(params[i].values.size());
    for (int v = 0; v < n; ++v) {
      if (v == point[i] || (adjacent && std::abs(v - point[i]) != 1)) continue;
      Point q = point;
      q[i] = v;
      if (valid(context, q)) out.push_back(std::move(q));
    }
  }
  return out;
}

void shuffle(std::vector<Point>& points, Rng& rng) {
  for (std::size_t i = points.size(); i > 1; --i) std::swap(points[i - 1], points[rng.uniform(i)]);
}

}  // namespace ktune::search
