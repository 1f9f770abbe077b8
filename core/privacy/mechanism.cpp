#include "core/privacy/mechanism.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/util/error.hpp"

namespace dpft::privacy {

namespace {

// Noise is drawn and added in float32 or float64: rounding to a bfloat16 sum would change the
// mechanism the accountant analyses (docs/privacy.md). Checked before anything is recorded.
void check_dtypes(const std::vector<torch::Tensor>& ts, const std::string& what) {
  for (const auto& t : ts)
    DPFT_CHECK(
        t.defined() && (t.scalar_type() == torch::kFloat32 || t.scalar_type() == torch::kFloat64),
        "release {}: the statistic is {}, not float32 or float64", what,
        t.defined() ? c10::toString(t.scalar_type()) : "undefined");
}

bool same_release(const Release& a, const Release& b) {
  return a.label == b.label && a.noise_multiplier == b.noise_multiplier &&
         a.sampling_rate == b.sampling_rate;
}

std::string describe(const Release& r) {
  return fmt::format("'{}' (sigma {}, q {})", r.label, r.noise_multiplier, r.sampling_rate);
}

}  // namespace

// ---- Mechanism ------------------------------------------------------------------------------

void Mechanism::record(int64_t count) {
  Release r = planned_;
  r.count = count;
  run_.record(r);
}

NoiseSource& Mechanism::noise() {
  DPFT_CHECK(stream_ && stream_->source, "release {}: this mechanism has no noise stream",
             describe(planned_));
  stream_->drawn = true;
  return *stream_->source;
}

std::string Mechanism::state() const {
  return stream_ && stream_->source ? stream_->source->state() : std::string();
}

void Mechanism::set_state(const std::string& s) {
  DPFT_CHECK(stream_ && stream_->source, "release {}: no noise stream to restore",
             describe(planned_));
  DPFT_CHECK(!stream_->drawn,
             "release {}: the noise stream's state is restored after it drew noise in this "
             "process (a rewound stream would repeat its noise)",
             describe(planned_));
  stream_->source->set_state(s);
}

// ---- GaussianSum ----------------------------------------------------------------------------

double GaussianSum::add_noise(torch::Tensor& t, double std, bool measure) {
  const auto dt = t.scalar_type();
  NoiseSource& src = noise();
  const torch::Tensor z = dt == torch::kFloat32 ? src.normal_on(t.sizes(), std, t.device())
                                                : src.normal(t.sizes(), std, dt).to(t.device());
  t.add_(z);
  return measure ? z.to(torch::kFloat64).pow(2).sum().item<double>() : 0.0;
}

double GaussianSum::release(std::vector<torch::Tensor>& sum, double sensitivity, bool draw,
                            bool measure) {
  DPFT_CHECK(sigma() == 0 || (std::isfinite(sensitivity) && sensitivity > 0),
             "release {}: sensitivity {} must be finite and > 0 (the noise is sigma times it)",
             describe(planned_), sensitivity);
  check_dtypes(sum, describe(planned_));
  record();
  if (!draw || sigma() == 0) return 0;
  const double std = sigma() * sensitivity;
  double sq = 0;
  for (auto& t : sum) sq += add_noise(t, std, measure);
  return std::sqrt(sq);
}

std::vector<double> GaussianSum::release_blocks(std::vector<torch::Tensor>& blocks,
                                                const std::vector<double>& bounds) {
  DPFT_CHECK(!blocks.empty() && blocks.size() == bounds.size(),
             "release {}: {} blocks and {} bounds", describe(planned_), blocks.size(),
             bounds.size());
  for (double b : bounds)
    DPFT_CHECK(std::isfinite(b) && b > 0, "release {}: block bound {} must be finite and > 0",
               describe(planned_), b);
  check_dtypes(blocks, describe(planned_));
  record();
  std::vector<double> norms(blocks.size(), 0.0);
  if (sigma() == 0) return norms;
  const double share = std::sqrt(static_cast<double>(blocks.size()));
  for (size_t i = 0; i < blocks.size(); ++i)
    norms[i] = std::sqrt(add_noise(blocks[i], sigma() * share * bounds[i], true));
  return norms;
}

// ---- Histogram, VoteHistogram, NonPrivate ---------------------------------------------------

std::vector<int64_t> Histogram::release(const std::vector<int64_t>& bin_of_row, int64_t K,
                                        const Units& units) {
  DPFT_CHECK_AS(ConfigError, K >= 1, "histogram: need at least one bin, got {}", K);
  for (size_t i = 0; i < bin_of_row.size(); ++i)
    DPFT_CHECK_AS(RuntimeError, bin_of_row[i] >= 0 && bin_of_row[i] < K,
                  "histogram: record {} is in bin {}, outside [0, {})", i, bin_of_row[i], K);
  const std::vector<int64_t> bin_of = unit_bins(units, bin_of_row);  // one entry per unit
  std::vector<int64_t> count(static_cast<size_t>(K), 0);
  for (size_t i = 0; i < bin_of.size(); ++i) {
    DPFT_CHECK_AS(RuntimeError, bin_of[i] >= 0 && bin_of[i] < K,
                  "histogram: record {} is in bin {}, outside [0, {})", i, bin_of[i], K);
    ++count[static_cast<size_t>(bin_of[i])];
  }
  record();  // sigma 0: a non-private release, recorded so
  const torch::Tensor z = noise().normal({K}, sigma(), torch::kFloat64);  // zeros for sigma 0
  const double* zp = z.data_ptr<double>();
  std::vector<int64_t> out(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k)
    out[static_cast<size_t>(k)] = std::max<int64_t>(
        0, std::llround(static_cast<double>(count[static_cast<size_t>(k)]) + zp[k]));
  return out;
}

void Histogram::restore() {
  record();
}

std::vector<double> VoteHistogram::release(const std::vector<double>& votes) {
  record();
  const int64_t M = static_cast<int64_t>(votes.size());
  const torch::Tensor z = noise().normal({M}, sigma(), torch::kFloat64);
  const double* zp = z.data_ptr<double>();
  std::vector<double> out(votes);
  for (int64_t m = 0; m < M; ++m) out[static_cast<size_t>(m)] += zp[m];
  return out;
}

void NonPrivate::release() {
  record();
}

// ---- Mechanisms -----------------------------------------------------------------------------

Mechanisms::Mechanisms(LedgerOptions ledger, PrivateRandomness randomness,
                       std::vector<Release> plan, std::vector<Release> inherited)
    : ledger_(std::move(ledger)),
      randomness_(std::move(randomness)),
      plan_(std::move(plan)),
      inherited_(std::move(inherited)) {
  for (const Release& r : plan_)
    DPFT_CHECK(std::isfinite(r.noise_multiplier) && r.noise_multiplier >= 0 && r.count >= 0,
               "the run's plan has release {} with count {}", describe(r), r.count);
  for (const Release& r : inherited_) record(r);
}

const Release& Mechanisms::planned_entry(const Release& r) const {
  for (const Release& p : plan_)
    if (same_release(p, r)) return p;
  std::string planned;
  for (const Release& p : plan_) planned += (planned.empty() ? "" : ", ") + describe(p);
  throw RuntimeError(fmt::format(
      "privacy: release {} is not one the run planned ({}); the budget was checked for the "
      "plan only. This is a bug in the method: please report it",
      describe(r), planned.empty() ? "none" : planned));
}

int64_t Mechanisms::recorded(const Release& like) const {
  int64_t n = 0;
  for (const Release& r : ledger_.releases())
    if (same_release(r, like)) n += r.count;
  return n;
}

void Mechanisms::record(const Release& r) {
  int64_t planned = 0;
  planned_entry(r);
  for (const Release& p : plan_)
    if (same_release(p, r)) planned += p.count;
  DPFT_CHECK(recorded(r) + r.count <= planned,
             "privacy: release {} would be number {} of a plan of {}; the budget covers the "
             "plan only. This is a bug in the method: please report it",
             describe(r), recorded(r) + r.count, planned);
  ledger_.record(r);
}

void Mechanisms::restore_ledger(const nlohmann::json& ledger_json) {
  DPFT_CHECK(ledger_.releases().size() == inherited_.size(),
             "privacy: a checkpoint's ledger is restored into a ledger that holds {} release(s) "
             "of this run; a restore never replaces releases already made",
             ledger_.releases().size() - inherited_.size());
  const PrivacyLedger saved = PrivacyLedger::from_json(ledger_json);
  for (const Release& r : inherited_) {
    int64_t n = 0;
    for (const Release& s : saved.releases())
      if (same_release(s, r)) n += s.count;
    DPFT_CHECK_AS(InputError, n >= r.count,
                  "privacy: the checkpoint's ledger lacks the inherited release {} x{} (it holds "
                  "{}): it was written by another run; start a new run",
                  describe(r), r.count, n);
  }
  ledger_ = PrivacyLedger(ledger_.options());
  for (const Release& r : saved.releases()) record(r);
}

NoiseStream* Mechanisms::stream(std::string_view name, NoiseDraw draw) {
  auto it = streams_.find(name);
  if (it == streams_.end()) {
    NoiseStream s;
    s.source = randomness_.noise(name, draw);
    s.draw = draw;
    it = streams_.emplace(std::string(name), std::move(s)).first;
  }
  DPFT_CHECK(it->second.draw == draw, "noise stream '{}' asked for with two draw modes ({}, {})",
             std::string(name), name_of(it->second.draw), name_of(draw));
  return &it->second;
}

template <typename M>
M& Mechanisms::get(std::string_view stream_name, const Release& planned, NoiseDraw draw) {
  planned_entry(planned);  // a mechanism for an unplanned release is never handed out
  NoiseStream* s = stream_name.empty() ? nullptr : stream(stream_name, draw);
  for (auto& m : mechanisms_)
    if (auto* p = dynamic_cast<M*>(m.get());
        p && same_release(p->planned(), planned) && p->stream_ == s)
      return *p;
  Release one = planned;
  one.count = 1;
  mechanisms_.push_back(std::unique_ptr<Mechanism>(new M(*this, one, s)));
  return static_cast<M&>(*mechanisms_.back());
}

GaussianSum& Mechanisms::gaussian_sum(std::string_view stream, const Release& planned,
                                      NoiseDraw draw) {
  return get<GaussianSum>(stream, planned, draw);
}

Histogram& Mechanisms::histogram(std::string_view stream, const Release& planned) {
  DPFT_CHECK(planned.sampling_rate == 1, "histogram {}: released over the whole set (q 1)",
             describe(planned));
  return get<Histogram>(stream, planned, NoiseDraw::kHost);
}

VoteHistogram& Mechanisms::votes(std::string_view stream, const Release& planned) {
  DPFT_CHECK(planned.sampling_rate == 1, "vote histogram {}: released over the whole set (q 1)",
             describe(planned));
  return get<VoteHistogram>(stream, planned, NoiseDraw::kHost);
}

NonPrivate& Mechanisms::non_private(const Release& planned) {
  DPFT_CHECK(planned.noise_multiplier == 0,
             "release {}: a non-private release has noise multiplier 0", describe(planned));
  return get<NonPrivate>("", planned, NoiseDraw::kHost);
}

std::unique_ptr<PoissonSampler> Mechanisms::poisson(int64_t n, double q,
                                                    std::string_view stream) const {
  return randomness_.poisson(n, q, stream);
}

}  // namespace dpft::privacy
