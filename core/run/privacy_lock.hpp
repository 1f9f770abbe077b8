// The privacy settings a run starts with, fixed for the run's lifetime (docs/privacy.md, "A
// budget nothing can change").
//
// A fresh run writes <run>/privacy_lock.json before its first release: the spec's privacy block,
// seed, train.steps and batch_size, the method and its options, the private data blocks and
// how examples are built from them, the planned releases (sigma, q, count per label), the
// method's resolved DP settings (C, divisor, noise std), the private files' SHA-256 and the
// tokenised set's size, and a random run nonce. `--resume` rebuilds the lock from the run's
// config.resolved.yaml and data as they are now and refuses any difference, naming it; every
// checkpoint carries the lock and an integrity hash over lock + ledger + step, so an edited
// ledger, another run's checkpoint (another seed) or an edited lock file is refused too.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/config/spec.hpp"
#include "core/privacy/ledger.hpp"

namespace dpft {

// What a run will do, from the method's plan (methods/method.hpp), before anything runs.
struct RunPlan {
  std::vector<privacy::Release> releases;  // every DP release the run will make
  // Those of `releases` it inherits from the artefacts it builds on (core/run/provenance.hpp),
  // composed into its ledger first.
  std::vector<privacy::Release> inherited;
  // The method's resolved DP settings and the private data's identity, e.g.
  // {"dp": DpSettings::to_json(), "data": {"files": [{path, bytes, sha256}], "examples": N}},
  // and "inherited": the decisions about those artefacts (Inheritance::decisions).
  nlohmann::json settings = nlohmann::json::object();
};

inline constexpr const char* kPrivacyLockSchema = "dpft.privacy_lock/1";
inline constexpr const char* kPrivacyLockFile = "privacy_lock.json";

// {"schema", "run_nonce", "settings": {...}} for this spec and plan.
nlohmann::json make_privacy_lock(const Spec& spec, const RunPlan& plan, const std::string& nonce);

// One line per setting that differs between two locks' "settings":
// "privacy.epsilon: 1 when the run started, 8 now".
std::vector<std::string> lock_differences(const nlohmann::json& started, const nlohmann::json& now);

// SHA-256 (hex) over the lock, the ledger's JSON and the step: a checkpoint's integrity hash.
std::string checkpoint_integrity(const nlohmann::json& lock, const nlohmann::json& ledger,
                                 int64_t step);

// SHA-256 (hex) over the lock, a state file's kind and its content: the integrity hash of a
// state file a method reads back on --resume (CTCL's topic histogram), so that an edited one is
// refused, never used.
std::string state_integrity(const nlohmann::json& lock, std::string_view kind,
                            const nlohmann::json& content);

// Refuses, with an InputError naming `where` (the checkpoint) and the fix, a checkpoint
// {"privacy_lock", "integrity", "ledger", "step", ...} that lacks its lock or hash, belongs to
// another run (run nonce), was written under other privacy settings than `lock_now` (the run's
// lock), or whose ledger, step or lock was edited (integrity). Returns its step.
int64_t verify_checkpoint_lock(const nlohmann::json& ckpt, const nlohmann::json& lock_now,
                               const std::string& where);

// 128 bits from the OS CSPRNG, as hex: names one run (a checkpoint of another run has another).
std::string new_run_nonce();

}  // namespace dpft
