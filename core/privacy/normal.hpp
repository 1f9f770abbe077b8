// Numerically careful standard-normal helpers for the accountants: log Phi(x) accurate far
// into the lower tail (down to x ~ -1e150), and log-space subtraction.
#pragma once

namespace dpft::privacy {

double norm_cdf(double x);         // Phi(x)
double log_norm_cdf(double x);     // log Phi(x), finite for all finite x
double log_erfc(double x);         // log erfc(x) = log 2 + log Phi(-sqrt(2) x)
// log(exp(a) - exp(b)) for a >= b; -inf when equal.
double log_sub_exp(double a, double b);
// log(exp(a) + exp(b)).
double log_add_exp(double a, double b);

}  // namespace dpft::privacy
