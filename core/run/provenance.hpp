// The provenance of an artefact a run derives from private data (docs/privacy.md,
// "Provenance"): which run made it, from which private data (each file's keyed fingerprint under
// the data holder's key, core/privacy/data_key.hpp: never the file's SHA-256, which would let
// whoever receives the artefact test a guess of the data), and the releases it embodies, so that a
// later run that reads it can compose those releases into its own ledger or refuse it. Written as
// <dir>/provenance.json beside an adapter, a model or a synthetic set, under the key "provenance"
// of a JSON state file (CTCL's topic histogram) and as the safetensors metadata entry
// "dpft.provenance" (DP-SFT's subspace).
//
// {"schema": "dpft.provenance/2", "run_id", "data": {"key": the data key's id, "files":
//  [{"name", "fingerprint"}], "examples"}, "private": bool (every release noised), "accountant",
//  "delta",
//  "releases": [{"label", "noise_multiplier", "sampling_rate", "count"}]}
#pragma once
#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/privacy/ledger.hpp"
#include "core/run/run_context.hpp"

namespace dpft {

inline constexpr const char* kProvenanceSchema = "dpft.provenance/2";
inline constexpr const char* kProvenanceFile = "provenance.json";
inline constexpr const char* kProvenanceMetadataKey = "dpft.provenance";

// The "data" block of a provenance record for `files` ([{path or name, sha256}], a run's data
// identity as in its privacy lock): file names without their directories and keyed
// fingerprints under the data key (created on first use), and the number of examples.
nlohmann::json provenance_data(const nlohmann::json& files, int64_t examples);
// The run's provenance now: its ledger's releases so far and its private data's identity (the
// privacy lock's).
nlohmann::json make_provenance(const RunContext& ctx);
// Writes make_provenance(ctx) to dir/provenance.json (atomic).
void write_provenance(const std::filesystem::path& dir, const RunContext& ctx);

struct Provenance {
  nlohmann::json json;                     // as written
  std::string data_key;                    // the id of the data key it was written under
  std::vector<std::string> data_files;     // the private files' fingerprints, sorted
  std::vector<privacy::Release> releases;  // what the artefact embodies
  bool is_private = false;                 // releases non-empty, every one noised
};
// Parses a provenance object; InputError naming `where` when it is not one.
Provenance parse_provenance(const nlohmann::json& j, const std::string& where);
// <dir>/provenance.json, or nullopt when there is none.
std::optional<Provenance> read_provenance(const std::filesystem::path& dir);
enum class DataMatch {
  kSame,     // some file in common
  kOther,    // same data key, no file in common
  kUnknown,  // written under another data key: cannot tell
};
// The provenance of a run's input: <dir>/provenance.json for a directory (a model), the one
// beside a file (a synthetic set in synthetic/); nullopt when there is none.
std::optional<Provenance> provenance_of(const std::filesystem::path& input);
// Whether an artefact of `p` was derived from the private files `data_files` (a run's data
// identity: [{path or name, sha256}]), judged under this machine's data key.
DataMatch same_private_data(const Provenance& p, const nlohmann::json& data_files);

// The artefacts a run builds on, judged by their provenance (docs/privacy.md, "Provenance"):
// what the run inherits and why.
struct Inheritance {
  // Composed into the run's plan and ledger before its own releases, labelled "source: <label>"
  // (one entry per label, sigma and q; one artefact per source run counted once).
  std::vector<privacy::Release> releases;
  // One object per input judged: {option, path (file name), run_id, private, decision}.
  nlohmann::json decisions = nlohmann::json::array();
  // The decision about `option`'s input, or nullptr.
  const nlohmann::json* decision(const std::string& option) const;
};

// An input a run reads that may be an artefact of a dpft run: the spec option naming it, its
// path and its provenance (nullopt: none found). `declared_public`: the spec says it carries
// nothing of this run's private data (dp-sft's method.file_public). `needs_provenance`: without
// provenance it is refused unless declared public (dp-sft's subspace file); other inputs
// without one (a base model, public data) are read as the spec names them.
struct InputArtefact {
  std::string option, path;
  std::optional<Provenance> provenance;
  bool declared_public = false;
  bool needs_provenance = false;
};

// Judges each input for a run that is DP (`dp_run`) or not, against its private files
// `data_files` ([{path, sha256}]) where the decision may depend on them:
//   DP artefact                             its releases inherited, whichever data it came from
//                                           (over-counting when the data differ: whether they
//                                           do is a fact about the private data, and no
//                                           output may depend on it); declared public: nothing
//                                           (ConfigError when made from this run's files)
//   non-private artefact, same private data ConfigError for a DP run (inherited otherwise)
//   non-private, other private data         nothing inherited
//   non-private, another data key           ConfigError for a DP run unless declared public
//   no provenance                           needs_provenance: ConfigError unless declared
//                                           public; otherwise read as the spec names it
// A refusal reaches the operator only (nothing is written), so it may depend on the data.
Inheritance inherit(const std::vector<InputArtefact>& inputs, const nlohmann::json& data_files,
                    bool dp_run);

}  // namespace dpft
