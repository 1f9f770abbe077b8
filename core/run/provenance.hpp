// The provenance of an artefact a run derives from private data (docs/privacy.md,
// "Provenance"): which run made it, from which private data (SHA-256 of each file), and the
// releases it embodies, so that a later run that reads it can compose those releases into its
// own ledger or refuse it. Written as <dir>/provenance.json beside an adapter, a model or a
// synthetic set, under the key "provenance" of a JSON state file (CTCL's topic histogram) and
// as the safetensors metadata entry "dpft.provenance" (DP-SFT's subspace).
//
// {"schema": "dpft.provenance/1", "run_id", "data": {"files": [{"name", "bytes", "sha256"}],
//  "examples"}, "private": bool (every release noised), "accountant", "delta",
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

inline constexpr const char* kProvenanceSchema = "dpft.provenance/1";
inline constexpr const char* kProvenanceFile = "provenance.json";
inline constexpr const char* kProvenanceMetadataKey = "dpft.provenance";

// The run's provenance now: its ledger's releases so far and its private data's identity (the
// privacy lock's, file names without their directories).
nlohmann::json make_provenance(const RunContext& ctx);
// Writes make_provenance(ctx) to dir/provenance.json (atomic).
void write_provenance(const std::filesystem::path& dir, const RunContext& ctx);

struct Provenance {
  nlohmann::json json;                     // as written
  std::vector<std::string> data_sha256;    // the private files' SHA-256, sorted
  std::vector<privacy::Release> releases;  // what the artefact embodies
  bool is_private = false;                 // releases non-empty, every one noised
};
// Parses a provenance object; InputError naming `where` when it is not one.
Provenance parse_provenance(const nlohmann::json& j, const std::string& where);
// <dir>/provenance.json, or nullopt when there is none.
std::optional<Provenance> read_provenance(const std::filesystem::path& dir);
// Whether an artefact of `p` was derived from the private files `data_files` (a run's data
// identity: [{path or name, bytes, sha256}]): some file in common.
bool same_private_data(const Provenance& p, const nlohmann::json& data_files);

}  // namespace dpft
