// The run's release mechanisms (docs/privacy.md, "Releases"): the only code that adds noise to
// a statistic of private data and the only code that writes a run's privacy ledger.
//
// One call takes the statistic and the sensitivity its caller enforced (by clipping, or by
// construction for a histogram), checks the release against the run's plan (its label, noise
// multiplier and sampling rate are a planned release's, and no more of them are made than were
// planned), records it in the ledger and only then draws the noise: a crash between the two
// leaves a release counted that was never made (over-counting, safe), never a release made
// that was not counted.
//
//   GaussianSum    the Gaussian mechanism on a sum of clipped contributions, subsampled when
//                  q < 1: sum + N(0, (sigma S)^2 I) (Dwork & Roth 2014 Thm. A.1; Abadi et al.
//                  2016 Alg. 1, "add noise"; Mironov et al. 2019 for the subsampled accounting)
//   Histogram      counts of a partition (sensitivity 1): CTCL's topic histogram (histogram.hpp)
//   VoteHistogram  Private Evolution's nearest-neighbour votes (sensitivity 1, histogram.hpp)
//   NonPrivate     a release without noise (sigma 0, epsilon inf: `sgd`'s steps, a run with
//                  privacy.epsilon: .inf), recorded and labelled so
// and the releases a run inherits: those an artefact it builds on embodies (a subspace, a model
// or a synthetic set made from the same private data: core/run/provenance.hpp), composed into
// the ledger when the run's Mechanisms are made, before anything of its own.
//
// Methods get these from RunContext::privacy (a Mechanisms) and never see a noise generator or
// a writable ledger; tests/privacy_boundary_test.sh keeps it so. Each noise stream (a name in
// the run's PrivateRandomness, randomness.hpp) is built once per run: two mechanisms on one
// stream (dp-sft's two stages) share it, so no noise is ever drawn twice.
#pragma once
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/privacy/ledger.hpp"
#include "core/privacy/modes.hpp"
#include "core/privacy/noise.hpp"
#include "core/privacy/randomness.hpp"
#include "core/privacy/sampler.hpp"
#include "core/privacy/units.hpp"

namespace dpft::privacy {

class Mechanisms;

// A noise stream of the run: its source, and whether it has drawn in this process (its state
// can be restored from a checkpoint only before that).
struct NoiseStream {
  std::unique_ptr<NoiseSource> source;
  NoiseDraw draw = NoiseDraw::kHost;
  bool drawn = false;
};

// What every mechanism shares: the planned release it makes and the run it records into.
class Mechanism {
 public:
  Mechanism(const Mechanism&) = delete;
  Mechanism& operator=(const Mechanism&) = delete;
  virtual ~Mechanism() = default;
  const Release& planned() const { return planned_; }
  double sigma() const { return planned_.noise_multiplier; }

 protected:
  friend class Mechanisms;
  Mechanism(Mechanisms& run, const Release& planned, NoiseStream* stream)
      : run_(run), planned_(planned), stream_(stream) {}
  // The plan check and the ledger entry of `count` releases.
  void record(int64_t count = 1);
  NoiseSource& noise();
  Mechanisms& run_;
  Release planned_;  // count: 1 per call
  NoiseStream* stream_;

 public:
  // The stream's state for a checkpoint ("" without a stream), and its restore: only before
  // this process drew from it (a rewound stream would repeat noise). InputError for a state
  // of another mode or key; RuntimeError after a draw.
  std::string state() const;
  void set_state(const std::string& s);
  // Whether its float32 noise for a tensor on `device` is drawn there (NoiseSource::draws_on).
  bool draws_on(const torch::Device& device) const {
    return stream_ && stream_->source && stream_->source->draws_on(device);
  }
};

class GaussianSum : public Mechanism {
 public:
  // In place, one release of `sum` (one vector, split across tensors: e.g. a gradient's
  // parameters; float32 or float64, any device) whose per-unit contribution has L2 norm at most
  // `sensitivity` (finite, > 0; unused at sigma 0): sum += N(0, (sigma sensitivity)^2 I).
  // `draw` false records
  // the release without drawing (data-parallel ranks other than 0: their shard sums are added
  // to rank 0's noisy one). float32 tensors draw where the stream's NoiseDraw says
  // (NoiseSource::normal_on); float64 ones on the host. Returns the L2 norm of the noise drawn
  // when `measure` (diagnostics: a float64 pass over the noise), else 0.
  double release(std::vector<torch::Tensor>& sum, double sensitivity, bool draw = true,
                 bool measure = true);
  // One release of k blocks bounded separately (block i's per-unit contribution has L2 norm at
  // most bounds[i]), e.g. GEP's coefficients and residual: block i += N(0, (sigma sqrt(k)
  // bounds[i])^2 I). Scaled by 1 / (sqrt(k) bounds[i]) the blocks form one vector of
  // sensitivity sqrt(k * 1/k) = 1 with noise sigma: one Gaussian release at sigma. Drawn in
  // block order; returns each block's noise norm.
  std::vector<double> release_blocks(std::vector<torch::Tensor>& blocks,
                                     const std::vector<double>& bounds);
  // Data parallel: on a rank other than 0, records the release rank 0 makes (and broadcasts),
  // so that every rank's ledger stays rank 0's.
  void count_remote() { record(); }

 private:
  friend class Mechanisms;
  using Mechanism::Mechanism;
  double add_noise(torch::Tensor& t, double std, bool measure);  // the noise's squared norm
};

// A histogram release: max(0, round(counts + N(0, sigma^2 I_K))) (post-processing as CTCL's code).
class Histogram : public Mechanism {
 public:
  // bin_of_row[i] in [0, K) is training row i's bin; `units` (the run's privacy units) turns
  // them into one bin per unit (unit_bins: a user counts once, in its most common bin), so the
  // counts have L2 sensitivity 1 per unit. RuntimeError for a bin outside [0, K), ConfigError
  // for K < 1.
  std::vector<int64_t> release(const std::vector<int64_t>& bin_of_row, int64_t K,
                               const Units& units);
  // A histogram released earlier in this run and saved (read back on --resume): recorded again
  // in a fresh ledger (one that a checkpoint did not restore), nothing drawn.
  void restore();

 private:
  friend class Mechanisms;
  using Mechanism::Mechanism;
};

// The Gaussian release of a vote vector of L2 sensitivity 1 (nn_votes): votes + N(0, sigma^2 I).
class VoteHistogram : public Mechanism {
 public:
  std::vector<double> release(const std::vector<double>& votes);

 private:
  friend class Mechanisms;
  using Mechanism::Mechanism;
};

// A release without noise (planned sigma 0): recorded as non-private, the value unchanged.
class NonPrivate : public Mechanism {
 public:
  void release();

 private:
  friend class Mechanisms;
  using Mechanism::Mechanism;
};

class Mechanisms {
 public:
  // A run's: its ledger, randomness and plan (every release it may make, with counts). The
  // ledger starts with `inherited` (each a plan entry, its whole count) and nothing else.
  Mechanisms(LedgerOptions ledger, PrivateRandomness randomness, std::vector<Release> plan,
             std::vector<Release> inherited = {});
  Mechanisms(const Mechanisms&) = delete;
  Mechanisms& operator=(const Mechanisms&) = delete;

  // The mechanisms of planned release `planned` (label, sigma, q of a plan entry; ConfigError
  // otherwise), drawing from `stream`. Owned by this object; asking again for the same stream
  // and release returns the same one.
  GaussianSum& gaussian_sum(std::string_view stream, const Release& planned,
                            NoiseDraw draw = NoiseDraw::kHost);
  Histogram& histogram(std::string_view stream, const Release& planned);
  VoteHistogram& votes(std::string_view stream, const Release& planned);
  NonPrivate& non_private(const Release& planned);  // planned sigma must be 0
  // The Poisson sampler of stream `stream` over n units at rate q (each name once per run).
  std::unique_ptr<PoissonSampler> poisson(int64_t n, double q, std::string_view stream) const;

  const PrivacyLedger& ledger() const { return ledger_; }
  // The releases of a checkpoint's ledger (its JSON), into this run's ledger: only while it holds
  // the inherited releases alone (a restore never erases a release made), each checked against
  // the plan; the checkpoint's ledger must hold the inherited ones (it was written after them).
  // The ledger's options stay the run's.
  void restore_ledger(const nlohmann::json& ledger_json);
  const PrivateRandomness& randomness() const { return randomness_; }
  const std::vector<Release>& plan() const { return plan_; }
  // How many releases with this label, sigma and q the ledger holds.
  int64_t recorded(const Release& like) const;

 private:
  friend class Mechanism;
  void record(const Release& r);
  const Release& planned_entry(const Release& r) const;
  NoiseStream* stream(std::string_view name, NoiseDraw draw);
  template <typename M>
  M& get(std::string_view stream, const Release& planned, NoiseDraw draw);

  PrivacyLedger ledger_;
  PrivateRandomness randomness_;
  std::vector<Release> plan_;
  std::vector<Release> inherited_;
  std::map<std::string, NoiseStream, std::less<>> streams_;
  std::vector<std::unique_ptr<Mechanism>> mechanisms_;
};

}  // namespace dpft::privacy
