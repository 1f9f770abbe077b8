// Every spec option that touches the privacy guarantee, with its effect, in one table
// (docs/privacy.md, "Options that touch the guarantee", is printed from it by
// `dpft config privacy-options --markdown`). parse_spec consults it: a DP run
// (PrivacySpec::is_private()) with an option that changes the privacy unit or releases
// something outside the ledger is refused before anything is loaded, trained or written;
// options that make outputs non-private are allowed and their outputs labelled.
#pragma once
#include <string>
#include <vector>

#include "core/config/spec.hpp"

namespace dpft {

enum class PrivacyEffect {
  kSafe,         // changes the numbers the accountant computes, not whether the guarantee holds
  kNonPrivate,   // some outputs are not covered: labelled, and left out of exports
  kChangesUnit,  // the privacy unit is no longer the example the ledger counts: refused if DP
  kReleases,     // releases private information outside the ledger: refused if DP
};

const char* name_of(PrivacyEffect e);  // safe | non-private | changes-unit | releases

struct PrivacyOption {
  const char* key;      // the spec key, e.g. "data.packing"
  const char* setting;  // the setting the effect is about, e.g. "true"
  PrivacyEffect effect;
  const char* why;              // what it does to the guarantee
  const char* fix;              // how to keep a DP run ("" for safe options)
  bool (*active)(const Spec&);  // whether `spec` has that setting
};

const std::vector<PrivacyOption>& privacy_options();

// The entries whose setting `spec` has, in table order.
std::vector<const PrivacyOption*> active_privacy_options(const Spec& spec);

// ConfigError naming each option and its fix when a DP spec has an option that changes the unit
// or releases something. Called by parse_spec.
void check_privacy_options(const Spec& spec);

// The verdict ("privacy: DP spec; no option weakens its guarantee", ...), then one line per
// active option that is not safe, for `dpft config validate`.
std::vector<std::string> privacy_verdict(const Spec& spec);

// The table as Markdown (docs/privacy.md's copy is this text).
std::string privacy_options_markdown();

}  // namespace dpft
