// FTRL-Proximal (McMahan et al., "Ad Click Prediction: a View from the Trenches", KDD 2013,
// Algorithm 1): per-coordinate rates alpha/(beta + sqrt(n)) with L1 and L2 regularisation.
// The weights are a function of the state (z, n); the learning rate passed in is alpha.
#pragma once

#include <span>

namespace aiacc::optim {

struct FtrlRule {
  double beta = 1.0;  // smooths the per-coordinate rate at the start
  double l1 = 0.0;    // L1 strength: a weight stays exactly 0 while |z| <= l1
  double l2 = 0.0;    // L2 strength

  // Floats of state per weight element: z and n (sum of squared gradients), both starting at 0.
  int state_per_element() const { return 2; }

  // One step on equal-length spans, `alpha` being the (scheduled) learning rate:
  //   sigma = (sqrt(n + g^2) - sqrt(n)) / alpha;  z += g - sigma*w;  n += g^2
  //   w = 0 if |z| <= l1, else -(z - sign(z)*l1) / ((beta + sqrt(n))/alpha + l2)
  // `w` must hold the weights of the previous step (or the initial weights at the first one).
  void update(std::span<float> w, std::span<const float> g, std::span<float> z, std::span<float> n,
              double alpha) const;

  // The weight the rule derives from one coordinate's state.
  float weight(float z, float n, double alpha) const;
};

}  // namespace aiacc::optim
