// `dpft export RUN_DIR --out DIR`: a shareable copy of a finished DP run holding only what its
// privacy guarantee covers, and a manifest of everything left out and why (docs/privacy.md,
// "What a run's outputs reveal"; docs/outputs.md has the class of every file and field).
//
// Classes of what a run writes:
//   dp               the DP-trained adapter or model: post-processing of the ledger's releases
//   post-processing  computed from DP outputs and public inputs only (synthetic/ sets, eval of
//                    the DP model on a held-out eval set, which the guarantee treats as public)
//   public           settings and provenance (config.resolved.yaml, manifest.json, the ledger)
//   non-private      statistics of the private data without noise (metrics.json's
//                    `non_private`, metrics.jsonl, log.txt), per-example eval values
//                    (per_sample.jsonl), the private files' hashes (privacy_lock.json),
//                    checkpoints (they hold the noise generator's state)
//   secret           noise.key, the run's noise key (left out; a finished run has removed it)
// A run whose noise was seeded (privacy.noise_seed, or a dpft from before keyed noise, whose
// noise derived from the exported `seed`) is refused: its receiver could replay the noise and
// subtract it. ExportOptions::allow_seeded_noise exports it anyway, labelled "noise seeded: not
// shareable" in export_manifest.json.
// Only the first three are exported; anything a run directory holds that is not classified is
// left out too ("unclassified"), so a new output is private until it is classified. Exported
// JSON and YAML carry no timing of private work (it follows the realised batch sizes) and no
// absolute local paths (they name the machine's user and layout): scrub_export_json.
#pragma once
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace dpft {

inline constexpr const char* kExportManifestFile = "export_manifest.json";
inline constexpr const char* kExportSchema = "dpft.export/1";

struct ExportOptions {
  bool allow_seeded_noise = false;  // --allow-seeded-noise
};

struct ExportResult {
  std::filesystem::path out_dir;
  nlohmann::json manifest;  // what export_manifest.json holds
};

// Copies the DP outputs of the finished run `run_dir` into `out_dir` (which must not exist, or
// be an empty directory), written beside it and renamed into place when complete. Refuses
// (ConfigError, exit 2) a run whose status is not ok and a run with no DP release or a
// non-private one (epsilon inf): there is nothing DP to share; InputError (exit 3) for a
// directory that is not a dpft run. Also refused (ConfigError): a run whose noise was seeded,
// unless `o` allows it (then labelled).
ExportResult export_run(const std::filesystem::path& run_dir, const std::filesystem::path& out_dir,
                        const ExportOptions& o = {});

// metrics.json without its non-private statistics: the `non_private` block, and for
// dpft.metrics/1 files the top-level `history`, `timing`, `memory` and `diagnostics`.
nlohmann::json dp_metrics(const nlohmann::json& metrics);

// What an export writes instead of a JSON file's value: without timing of private work (keys
// "seconds", "*_seconds", "seconds_*", "*_s", "tokens_per_s", "start_time", "end_time") and
// with every absolute local path replaced by "<local>/" + its file name (scrub_path);
// timing false keeps every key (a model's config.json).
nlohmann::json scrub_export_json(const nlohmann::json& j, bool timing = true);
// "/home/me/data/train.csv" -> "<local>/train.csv": each absolute path in `s` (at its start or
// after a space, '=', a quote or '('; up to a space, quote, ',', ';' or ')') becomes
// "<local>/" + its last component; the rest of `s` is kept.
std::string scrub_path(const std::string& s);

}  // namespace dpft
