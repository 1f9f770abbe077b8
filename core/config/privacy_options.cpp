#include "core/config/privacy_options.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/util/error.hpp"

namespace dpft {

const char* name_of(PrivacyEffect e) {
  switch (e) {
    case PrivacyEffect::kSafe:
      return "safe";
    case PrivacyEffect::kNonPrivate:
      return "non-private";
    case PrivacyEffect::kChangesUnit:
      return "changes-unit";
    case PrivacyEffect::kReleases:
      return "releases";
  }
  return "?";
}

namespace {

bool refused_if_dp(PrivacyEffect e) {
  return e == PrivacyEffect::kChangesUnit || e == PrivacyEffect::kReleases;
}

bool method_flag(const Spec& s, const char* key) {
  return s.method.options.IsMap() && s.method.options[key] && s.method.options[key].IsScalar() &&
         s.method.options[key].as<std::string>() == "true";
}

}  // namespace

const std::vector<PrivacyOption>& privacy_options() {
  static const std::vector<PrivacyOption> t = {
      {"data.packing", "true", PrivacyEffect::kChangesUnit,
       "documents are concatenated and cut into max_length blocks, so a block becomes the unit "
       "the noise protects: one document spans many blocks and shifts every later one, while "
       "epsilon is reported per example",
       "set privacy.unit: document (each document packed into its own blocks, one unit), "
       "data.packing: false (one document, one example), or privacy.epsilon: .inf for a "
       "non-private run",
       [](const Spec& s) {
         return s.data.packing && s.privacy.unit != privacy::PrivacyUnit::kDocument;
       }},
      {"privacy.noise_divisor", "realized", PrivacyEffect::kReleases,
       "the noisy sum is divided by the realised batch size M, which the update's scale then "
       "reveals (sigma C sqrt(d) over the update's norm recovers it) and no ledger entry counts",
       "set privacy.noise_divisor: expected (q N, the lot size the analysis assumes)",
       [](const Spec& s) { return s.privacy.noise_divisor == privacy::NoiseDivisor::kRealized; }},
      {"privacy.noise_seed", "set", PrivacyEffect::kNonPrivate,
       "the noise and batches are reproducible from the seed: anyone who knows it can subtract "
       "the noise; outputs are labelled 'noise seeded: not shareable' and dpft export refuses "
       "them",
       "leave privacy.noise_seed unset (keyed noise)",
       [](const Spec& s) { return static_cast<bool>(s.privacy.noise_seed); }},
      {"privacy.epsilon / noise_multiplier", ".inf / 0", PrivacyEffect::kNonPrivate,
       "no noise: the run is non-private (epsilon inf), labelled so; dpft export refuses it",
       "give a finite privacy.epsilon or a noise_multiplier > 0",
       [](const Spec& s) {
         return (s.privacy.noise_multiplier || s.privacy.epsilon) && !s.privacy.is_private();
       }},
      {"output.non_private_stats", "true", PrivacyEffect::kNonPrivate,
       "per-step batch loss, realised batch size, gradient norms, timing and memory of the "
       "private batches, without noise, in metrics.json's non_private block, metrics.jsonl and "
       "log.txt; dpft export leaves them out",
       "set output.non_private_stats: false to compute none of them",
       [](const Spec& s) { return s.output.non_private_stats; }},
      {"method.diagnostics", "true", PrivacyEffect::kNonPrivate,
       "the true private gradients are measured (analysis only, never fed back) into "
       "metrics.json's non_private block",
       "set method.diagnostics: false",
       [](const Spec& s) { return method_flag(s, "diagnostics"); }},
      {"privacy.unit", "user", PrivacyEffect::kSafe,
       "the guarantee protects a user (data.train.user_column), not a row: N, the Poisson "
       "sampling and the clipping count users, each sampled user's first "
       "max_examples_per_user rows summed and clipped as one; rows past that are not trained on",
       "", [](const Spec& s) { return s.privacy.unit == privacy::PrivacyUnit::kUser; }},
      {"privacy.unit", "document", PrivacyEffect::kSafe,
       "the guarantee protects a document (a row of data.train); with data.packing each "
       "document is cut into its own blocks, sampled together and clipped as one",
       "", [](const Spec& s) { return s.privacy.unit == privacy::PrivacyUnit::kDocument; }},
      {"privacy.secure_noise", "true", PrivacyEffect::kSafe,
       "every noise and batch draw from the OS CSPRNG (keyed noise is already unpredictable "
       "without the run's key); not reproducible",
       "", [](const Spec& s) { return s.privacy.secure_noise; }},
      {"data.public", "set", PrivacyEffect::kSafe,
       "declared public: read at no privacy cost, not covered by the guarantee (dp-sft's "
       "method.source: public)",
       "", [](const Spec& s) { return !s.data.public_data.path.empty(); }},
      {"data.eval", "set", PrivacyEffect::kSafe,
       "treated as public held-out data; an eval set that holds training rows moves its "
       "results to the non_private block, with a warning",
       "", [](const Spec& s) { return !s.data.eval.path.empty(); }},
  };
  return t;
}

std::vector<const PrivacyOption*> active_privacy_options(const Spec& spec) {
  std::vector<const PrivacyOption*> out;
  for (const PrivacyOption& o : privacy_options())
    if (o.active(spec)) out.push_back(&o);
  return out;
}

void check_privacy_options(const Spec& spec) {
  if (!spec.privacy.is_private()) return;
  std::string msg;
  for (const PrivacyOption* o : active_privacy_options(spec))
    if (refused_if_dp(o->effect))
      msg += fmt::format("\n  {}: {} ({}): {}; {}", o->key, o->setting, name_of(o->effect), o->why,
                         o->fix);
  if (!msg.empty())
    throw ConfigError(
        "this DP run has options that break its privacy guarantee (docs/privacy.md, "
        "\"Options that touch the guarantee\"):" +
        msg);
}

std::vector<std::string> privacy_verdict(const Spec& spec) {
  std::vector<std::string> lines;
  bool labelled = false;
  for (const PrivacyOption* o : active_privacy_options(spec)) {
    if (o->effect == PrivacyEffect::kSafe) continue;
    labelled |= o->effect == PrivacyEffect::kNonPrivate;
    lines.push_back(
        fmt::format("  {}: {} -> {}: {}", o->key, o->setting, name_of(o->effect), o->why));
  }
  std::string verdict =
      !spec.privacy.is_private()
          ? "privacy: non-private spec (epsilon inf): nothing a run of it writes is DP"
      : labelled ? "privacy: DP spec; the outputs named below are labelled non-private"
                 : "privacy: DP spec; no option weakens its guarantee";
  lines.insert(lines.begin(), verdict);
  return lines;
}

std::string privacy_options_markdown() {
  std::string s =
      "| option | setting | effect | what it does to the guarantee | to keep a DP run |\n"
      "|---|---|---|---|---|\n";
  for (const PrivacyOption& o : privacy_options())
    s += fmt::format("| `{}` | `{}` | {} | {} | {} |\n", o.key, o.setting, name_of(o.effect), o.why,
                     *o.fix ? o.fix : "-");
  return s;
}

}  // namespace dpft
