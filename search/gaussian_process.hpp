// A Gaussian-process regression model for model-guided search: Matérn-5/2
// kernel with a length scale per dimension on points of [0, 1]^d (automatic
// relevance determination), unit signal variance on
// standardised targets, a noise term, and a constant prior mean (the mean of
// the targets). Observations are added one at a time (incremental Cholesky),
// and the posterior at a fixed set of candidate points is kept up to date, so
// adding the n-th observation costs O(n) per candidate instead of O(n²).
#pragma once
#include <cstddef>
#include <vector>

namespace ktune::search {

class GaussianProcess {
 public:
  struct Hyper {
    std::vector<double> length_scales;  ///< one per dimension, in units of the [0, 1] coordinates
    double noise = 1e-3;                ///< variance added to the diagonal, relative to the signal's
  };

  explicit GaussianProcess(std::size_t dims)
      : dims_(dims), hyper_{std::vector<double>(dims, 0.3), 1e-3}, inverse_scales_(dims, 1 / 0.3) {}

  std::size_t dims() const { return dims_; }
  std::size_t observations() const { return y_.size(); }
  const Hyper& hyper() const { return hyper_; }

  /// Adds a candidate point (dims() coordinates); returns its id.
  std::size_t add_candidate(const double* x);
  std::size_t candidates() const { return state_.size(); }
  /// Stops tracking a candidate for good (it has been measured).
  void retire(std::size_t id) { state_[id] = kRetired; }
  /// Stops updating a candidate's posterior until the next reset (it looks
  /// hopeless); predict() on it gives a stale answer meanwhile.
  void set_dormant(std::size_t id) {
    if (state_[id] == kActive) state_[id] = kDormant;
  }
  bool retired(std::size_t id) const { return state_[id] == kRetired; }
  bool active(std::size_t id) const { return state_[id] == kActive; }

  /// Replaces every observation and the hyperparameters, refactorising from
  /// scratch; every candidate not retired becomes active again.
  void reset(const std::vector<std::vector<double>>& xs, const std::vector<double>& ys, Hyper hyper);
  /// Adds one observation (incremental: O(n²) for the factor, O(n) per active candidate).
  void observe(const double* x, double y);

  /// Posterior mean and standard deviation of the latent function at a
  /// candidate, in the units of the targets.
  void predict(std::size_t id, double* mean, double* sd) const;

  /// Hyperparameters by marginal likelihood of (xs, ys): the best of a grid
  /// of one shared length scale and a few noise levels, then each dimension's
  /// length scale refined in turn (coordinate search in log space).
  static Hyper fit(const std::vector<std::vector<double>>& xs, const std::vector<double>& ys);

 private:
  double kernel(const double* a, const double* b) const;
  void refresh_candidate(std::size_t id);  ///< recomputes its cached solves from scratch

  std::size_t dims_;
  Hyper hyper_;
  std::vector<double> inverse_scales_;  ///< 1 / length scale, per dimension
  // Observations: coordinates (n × dims), targets, the Cholesky factor of
  // K + noise·I by rows (row i holds i + 1 entries), and L⁻¹y, L⁻¹1.
  std::vector<double> x_;
  std::vector<double> y_;
  std::vector<std::vector<double>> l_;
  std::vector<double> zy_, z1_;
  double sum_y_ = 0, sum_y2_ = 0;
  // Candidates: coordinates, whether still updated, v = L⁻¹k(X, c), and the
  // running dot products v·v, v·zy, v·z1 that give the posterior in O(1).
  enum State : unsigned char { kActive, kDormant, kRetired };
  std::vector<double> cx_;
  std::vector<State> state_;
  std::vector<std::vector<double>> v_;
  std::vector<double> vv_, vzy_, vz1_;
};

}  // namespace ktune::search
