// One run's output directory, <out>/<name>/<run-id>/, and the files in it (docs/outputs.md):
//   config.resolved.yaml  the fully resolved spec (defaults < file < --set)
//   manifest.json         versions, machine, seed, command line, start/end, status
//   log.txt               the run's log (also on stderr)
//   metrics.jsonl         one JSON event per line (step, eval, privacy, ...)
//   metrics.json          the final summary (schema "dpft.metrics/2"); its `non_private` block
//                         holds the statistics of private data that no DP mechanism protects
//   privacy_lock.json     the privacy settings the run started with (core/run/privacy_lock.hpp)
//   noise.key             the run's secret noise key (keyed noise, the default; mode 0600):
//                         never exported, removed when the run finishes
//   .lock                 held (flock) by the process working in the directory
// JSON files are replaced atomically (core/util/atomic_file.hpp).
#pragma once
#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>
#include <string>

#include "core/config/spec.hpp"
#include "core/util/atomic_file.hpp"

namespace dpft {

// dpft.metrics/2 moved per-step history, diagnostics, timing and memory (non-private
// statistics of the private data) from the top level into the `non_private` block; /1 files
// (older runs, committed results) are still read by `dpft report`.
inline constexpr const char* kMetricsSchema = "dpft.metrics/2";
inline constexpr const char* kMetricsSchemaV1 = "dpft.metrics/1";
// metrics.json's block (and a step event's field) of non-private statistics.
inline constexpr const char* kNonPrivate = "non_private";
// What kNonPrivate holds, written as its `note`.
inline constexpr const char* kNonPrivateNote =
    "statistics of the private training data computed without noise: not covered by the run's "
    "privacy guarantee; dpft export leaves them out";
inline constexpr const char* kManifestSchema = "dpft.manifest/1";
inline constexpr const char* kNoiseKeyFile = "noise.key";

class RunDir {
 public:
  // Creates a fresh directory <out_root>/<spec.name>/<YYYYmmdd-HHMMSS>-s<seed>[-N] (never reuses
  // one); `name`, when given, replaces <YYYYmmdd-HHMMSS>-s<seed>.
  static RunDir create(const std::string& out_root, const Spec& spec, const std::string& name = "");
  // An existing run directory (for --resume); InputError if it is not one.
  static RunDir open(const fs::path& dir);
  // Both hold an exclusive lock on <dir>/.lock while the RunDir (or a copy) lives: a second
  // process opening the same run (two `--resume` at once) gets a RuntimeError naming the pid
  // that holds it. The kernel drops the lock when the process ends, however it ends.

  const fs::path& path() const { return path_; }
  const std::string& run_id() const { return run_id_; }
  fs::path file(const std::string& name) const { return path_ / name; }

  // Append one event to metrics.jsonl; "event" names its kind, "time" is added.
  void event(const std::string& kind, nlohmann::json fields);
  // Events of this kind in metrics.jsonl so far (all invocations of the run).
  int64_t count_events(const std::string& kind) const;
  void write_metrics(const nlohmann::json& metrics) const;  // metrics.json, atomically
  void write_manifest(const nlohmann::json& manifest) const;

 private:
  fs::path path_;
  std::string run_id_;
  JsonlWriter events_;
  std::shared_ptr<int> lock_fd_;
  void lock();
};

}  // namespace dpft
