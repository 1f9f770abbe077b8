#include "core/run/export.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <sstream>
#include <system_error>

#include "core/privacy/randomness.hpp"
#include "core/run/privacy_lock.hpp"
#include "core/run/run_dir.hpp"
#include "core/run/runner.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "core/util/sha256.hpp"
#include "core/util/system.hpp"

namespace dpft {

namespace fs = std::filesystem;

namespace {

struct Entry {
  bool shared;      // copied into the export
  const char* cls;  // dp | post-processing | public | non-private
  const char* why;
};

// Every name a run directory may hold (docs/outputs.md). Names not here are left out.
const std::map<std::string, Entry>& run_entries() {
  static const std::map<std::string, Entry> m = {
      {"adapter",
       {true, "dp",
        "the LoRA adapter trained on DP updates: post-processing of the ledger's releases"}},
      {"model",
       {true, "dp",
        "the model trained on DP updates (post-processing of the ledger's releases) "
        "and the base model's tokenizer"}},
      {"synthetic",
       {true, "post-processing",
        "synthetic sets generated from the DP-trained model (and pe-sgd's released noisy "
        "coefficients), or from the base model and prompts alone, or selected by pe / aug-pe's "
        "DP nearest-neighbour histograms (with their noisy counts)"}},
      {"topic_histogram.json",
       {true, "dp",
        "ctcl's topic histogram: true counts + N(0, sigma^2), rounded and clamped, one Gaussian "
        "release in the ledger"}},
      {"subspace.safetensors",
       {true, "post-processing",
        "dp-sft's subspace P: the SVD of the stage-1 trajectory of DP updates (or a given file), "
        "with the parameter names and the base weights' SHA-256"}},
      {"trajectory",
       {true, "post-processing",
        "dp-sft's trajectory rows flat(Theta_t - Theta_0) of the stage-1 DP updates"}},
      {"theta0.safetensors",
       {true, "public", "dp-sft's starting weights Theta_0 (the base model and its PEFT init)"}},
      {"metrics.json",
       {true, "public",
        "the run's identity, settings, privacy ledger and the evaluation of the DP model on the "
        "held-out eval set (post-processing); its non_private block is left out"}},
      {"config.resolved.yaml", {true, "public", "the resolved spec: settings and file paths"}},
      {"manifest.json",
       {true, "public", "provenance: dpft and LibTorch versions, machine, command line, times"}},
      {"metrics.jsonl",
       {false, "non-private",
        "per-step events with non-private statistics of the private batches (loss, realised "
        "batch size, gradient norms, step time)"}},
      {"log.txt", {false, "non-private", "the log prints per-step batch losses and batch sizes"}},
      {"per_sample.jsonl",
       {false, "non-private",
        "one line per evaluation example: the guarantee covers the training examples, not "
        "values that single out evaluation examples"}},
      {kPrivacyLockFile,
       {false, "non-private",
        "holds the private files' SHA-256, a fingerprint that confirms a guessed data set"}},
      {"checkpoint",
       {false, "non-private", "training state, including the noise generator's state"}},
      {"pe_state.json",
       {false, "non-private",
        "pe / aug-pe's checkpoint: populations, ledger and the noise generator's state (which "
        "with the released counts gives the exact votes)"}},
      {".lock", {false, "internal", "the run directory's lock file"}},
      {kSelectionTrialFile,
       {true, "public",
        "marks a trial of dpft select (the selection's directory; exported without the trial's "
        "number and candidate)"}},
      {kSelectionFile,
       {true, "dp",
        "the private selection's output (dpft select): the winning candidate, its noisy score "
        "and the total epsilon the run's outputs carry"}},
      {"noise.key",
       {false, "secret",
        "the run's secret noise key: with it the noise could be replayed and subtracted (a "
        "stopped run keeps it to resume)"}},
  };
  return m;
}

nlohmann::json read_json_file(const fs::path& p) {
  nlohmann::json j = nlohmann::json::parse(read_file(p), nullptr, false);
  DPFT_CHECK_AS(InputError, !j.is_discarded(), "dpft export: {} is not valid JSON", p.string());
  return j;
}

// Files under `p` (itself when a file), with their path relative to `base`.
void list_files(const fs::path& base, const fs::path& p, std::vector<fs::path>* out) {
  if (fs::is_directory(p)) {
    std::vector<fs::path> children;
    for (const auto& e : fs::directory_iterator(p)) children.push_back(e.path());
    std::sort(children.begin(), children.end());
    for (const auto& c : children) list_files(base, c, out);
  } else {
    out->push_back(fs::relative(p, base));
  }
}

// The refusal when the run holds nothing DP to share; empty when it does.
std::string not_dp_reason(const nlohmann::json& privacy) {
  if (!privacy.is_object()) return "its metrics.json has no privacy block";
  const nlohmann::json releases = privacy.value("releases", nlohmann::json::array());
  if (!releases.is_array() || releases.empty())
    return "it made no DP release (nothing private was trained)";
  for (const auto& r : releases)
    if (r.value("mechanism", "") == "non_private" || r.value("noise_multiplier", 0.0) <= 0)
      return fmt::format("its release '{}' is non-private (sigma 0): epsilon is infinite",
                         r.value("label", "?"));
  const nlohmann::json eps = privacy.value("epsilon", nlohmann::json());
  if (!eps.is_number()) return fmt::format("its epsilon is {}", eps.dump());
  return "";
}

// How the run's noise was drawn, from metrics.json's privacy block: {mode, shareable[, label]}.
// Runs from before keyed noise have no "noise" entry: their noise was seeded from `seed`
// unless privacy.secure_noise was true.
nlohmann::json noise_of(const nlohmann::json& privacy) {
  if (privacy.contains("noise") && privacy["noise"].is_object()) return privacy["noise"];
  if (privacy.value("secure_noise", false)) return {{"mode", "os"}, {"shareable", true}};
  return {{"mode", "seeded"},
          {"shareable", false},
          {"label", std::string(privacy::kNoiseSeededLabel) +
                        " (a dpft before keyed noise: derived from the run's seed)"}};
}

bool timing_key(const std::string& k) {
  auto ends = [&](const char* suf) {
    const size_t n = std::char_traits<char>::length(suf);
    return k.size() >= n && k.compare(k.size() - n, n, suf) == 0;
  };
  return k == "seconds" || k == "tokens_per_s" || k == "start_time" || k == "end_time" ||
         ends("_seconds") || ends("_s") || k.rfind("seconds_", 0) == 0;
}

// YAML scalars that are absolute paths, scrubbed in place.
void scrub_yaml(YAML::Node n) {
  if (n.IsScalar()) {
    const std::string v = n.Scalar(), w = scrub_path(v);
    if (w != v) n = w;
  } else if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i) scrub_yaml(n[i]);
  } else if (n.IsMap()) {
    for (auto it = n.begin(); it != n.end(); ++it) scrub_yaml(it->second);
  }
}

}  // namespace

std::string scrub_path(const std::string& s) {
  // Each token that starts with '/' at the start of the string or after a space, '=', a quote or
  // '(' and runs to the next space, quote, ',', ';' or ')' is an absolute path.
  auto starts_token = [&](size_t i) {
    if (i == 0) return true;
    const char c = s[i - 1];
    return std::isspace(static_cast<unsigned char>(c)) || c == '=' || c == '\'' || c == '"' ||
           c == '(';
  };
  auto ends_token = [](char c) {
    return std::isspace(static_cast<unsigned char>(c)) || c == '\'' || c == '"' || c == ',' ||
           c == ';' || c == ')';
  };
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == '/' && starts_token(i) && i + 1 < s.size() && !ends_token(s[i + 1])) {
      size_t j = i;
      while (j < s.size() && !ends_token(s[j])) ++j;
      fs::path p(s.substr(i, j - i));
      std::string name = p.filename().string();
      if (name.empty()) name = p.parent_path().filename().string();
      out += "<local>/" + name;
      i = j;
    } else {
      out += s[i++];
    }
  }
  return out;
}

nlohmann::json scrub_export_json(const nlohmann::json& j, bool timing) {
  if (j.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (auto it = j.begin(); it != j.end(); ++it)
      if (!timing || !timing_key(it.key())) out[it.key()] = scrub_export_json(it.value(), timing);
    return out;
  }
  if (j.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& v : j) out.push_back(scrub_export_json(v, timing));
    return out;
  }
  if (j.is_string()) return scrub_path(j.get<std::string>());
  return j;
}

nlohmann::json dp_metrics(const nlohmann::json& metrics) {
  nlohmann::json m = metrics;
  m.erase(kNonPrivate);
  m.erase("warnings");  // the run's logged warnings: some count private rows
  if (m.value("schema", "") == kMetricsSchemaV1)
    for (const char* k : {"history", "timing", "memory", "diagnostics"}) m.erase(k);
  return m;
}

ExportResult export_run(const fs::path& run_dir, const fs::path& out_dir, const ExportOptions& o) {
  const fs::path metrics_path = run_dir / "metrics.json";
  DPFT_CHECK_AS(InputError, fs::is_directory(run_dir) && fs::is_regular_file(metrics_path),
                "dpft export {}: not a dpft run directory (no metrics.json); give the directory "
                "a run printed as 'done: <dir>/metrics.json'",
                run_dir.string());
  const nlohmann::json metrics = read_json_file(metrics_path);
  const std::string schema = metrics.is_object() ? metrics.value("schema", "") : "";
  DPFT_CHECK_AS(InputError, schema == kMetricsSchema || schema == kMetricsSchemaV1,
                "dpft export {}: metrics.json has schema '{}', not a dpft run's", run_dir.string(),
                schema);
  const std::string status = metrics.value("status", "");
  DPFT_CHECK_AS(ConfigError, status == "ok",
                "dpft export {}: the run's status is '{}': only a finished run (status ok) is "
                "exported{}",
                run_dir.string(), status,
                status == "stopped" || status == "interrupted"
                    ? fmt::format("; finish it with dpft run --resume {}", run_dir.string())
                    : "");
  const nlohmann::json privacy = metrics.value("privacy", nlohmann::json());
  const std::string why_not = not_dp_reason(privacy);
  DPFT_CHECK_AS(ConfigError, why_not.empty(),
                "dpft export {}: refused: {}; an export holds only DP outputs and this run has "
                "none",
                run_dir.string(), why_not);
  // A trial of `dpft select`: only the winner is covered, by the selection's total epsilon,
  // and its eval (rows of the private training file) is not part of the selection's output.
  const bool trial = fs::exists(run_dir / kSelectionTrialFile);
  DPFT_CHECK_AS(ConfigError, !trial || fs::exists(run_dir / kSelectionFile),
                "dpft export {}: refused: the run is a trial of a private selection (dpft select, "
                "{}) that did not win it, or whose selection has not finished: only the winner "
                "is covered by the selection's epsilon; export the run its selection.json names",
                run_dir.string(),
                read_json_file(run_dir / kSelectionTrialFile).value("selection", "?"));
  nlohmann::json privacy_out = privacy;
  if (trial) {
    const nlohmann::json sel = read_json_file(run_dir / kSelectionFile);
    privacy_out["trial_epsilon"] = privacy.value("epsilon", nlohmann::json());
    privacy_out["epsilon"] = sel.at("privacy").at("epsilon");
    privacy_out["selection"] = sel.at("privacy");
    privacy_out["trial_accountant"] =
        privacy.value("accountant_used", privacy.value("accountant", ""));
    privacy_out["accountant_used"] = sel.at("privacy").at("accountant");
  }
  const nlohmann::json noise = noise_of(privacy);
  const bool seeded = !noise.value("shareable", false);
  DPFT_CHECK_AS(ConfigError, !seeded || o.allow_seeded_noise,
                "dpft export {}: refused: the run's noise was seeded ({}): anyone who has the "
                "export can replay the noise from that seed and subtract it, so its outputs are "
                "not DP to them. Run it again without privacy.noise_seed (keyed noise, the "
                "default), or pass --allow-seeded-noise to export it labelled '{}'",
                run_dir.string(),
                noise.contains("noise_seed")
                    ? fmt::format("privacy.noise_seed: {}", noise["noise_seed"].dump())
                    : noise.value("label", "seeded"),
                privacy::kNoiseSeededLabel);

  std::error_code ec;
  if (fs::exists(out_dir)) {
    DPFT_CHECK_AS(ConfigError, fs::is_directory(out_dir) && fs::is_empty(out_dir),
                  "dpft export: --out {} exists and is not an empty directory; choose a new "
                  "path",
                  out_dir.string());
    fs::remove(out_dir, ec);
  }
  const fs::path parent = out_dir.parent_path().empty() ? fs::path(".") : out_dir.parent_path();
  fs::create_directories(parent, ec);
  DPFT_CHECK_AS(InputError, fs::is_directory(parent),
                "dpft export: cannot create the directory {} for --out ({})", parent.string(),
                ec.message());
  const fs::path tmp =
      parent / fmt::format(".{}.tmp-{}", out_dir.filename().string(), static_cast<long>(getpid()));
  remove_tree(tmp);
  fs::create_directories(tmp);

  nlohmann::json included = nlohmann::json::array(), left_out = nlohmann::json::array();
  auto include = [&](const fs::path& rel, const Entry& e) {
    included.push_back({{"path", rel.generic_string()},
                        {"class", e.cls},
                        {"bytes", fs::file_size(tmp / rel)},
                        {"sha256", sha256_file_hex(tmp / rel)}});
  };
  std::vector<fs::path> top;
  for (const auto& e : fs::directory_iterator(run_dir)) top.push_back(e.path().filename());
  std::sort(top.begin(), top.end());
  try {
    for (const fs::path& name : top) {
      auto it = run_entries().find(name.string());
      if (it == run_entries().end()) {
        left_out.push_back({{"path", name.generic_string()},
                            {"class", "unclassified"},
                            {"why", "not an output dpft classifies: left out until it is"}});
        continue;
      }
      const Entry& e = it->second;
      if (!e.shared) {
        left_out.push_back({{"path", name.generic_string()}, {"class", e.cls}, {"why", e.why}});
        continue;
      }
      if (name == "metrics.json") {
        nlohmann::json m = dp_metrics(metrics);
        m["privacy"] = privacy_out;
        if (trial) {
          m.erase("eval");
          left_out.push_back({{"path", "metrics.json#eval"},
                              {"class", "non-private"},
                              {"why",
                               "a selection trial's eval set is held-out rows of the "
                               "private training file; selection.json has the noisy score"}});
        }
        write_json_atomic(tmp / name, scrub_export_json(m));
        include(name, e);
        left_out.push_back({{"path", "metrics.json#non_private"},
                            {"class", "non-private"},
                            {"why", kNonPrivateNote}});
        if (metrics.contains("warnings"))
          left_out.push_back({{"path", "metrics.json#warnings"},
                              {"class", "non-private"},
                              {"why",
                               "the run's warnings, as log.txt has them: some count "
                               "private rows (blank rows dropped, eval rows also in "
                               "training)"}});
        // The ledger on its own: what epsilon the outputs carry and how it was computed.
        write_json_atomic(tmp / "ledger.json", scrub_export_json(privacy_out));
        include("ledger.json", {true, "public", "the privacy ledger (metrics.json's privacy)"});
        continue;
      }
      std::vector<fs::path> files;
      list_files(run_dir, run_dir / name, &files);
      for (const fs::path& rel : files) {
        DPFT_CHECK_AS(InputError, fs::is_regular_file(run_dir / rel),
                      "dpft export: {} is not a regular file; the run directory was altered",
                      (run_dir / rel).string());
        fs::create_directories((tmp / rel).parent_path());
        const std::string base = rel.filename().string();
        if (rel == "config.resolved.yaml") {  // settings: without absolute local paths
          YAML::Node y = YAML::LoadFile((run_dir / rel).string());
          scrub_yaml(y);
          YAML::Emitter out;
          out << y;
          write_file_atomic(tmp / rel, std::string(out.c_str()) + "\n");
        } else if (rel == kSelectionTrialFile) {  // the mark alone: not the trial's number
          write_json_atomic(
              tmp / rel,
              {{"selection",
                scrub_export_json(read_json_file(run_dir / rel).value("selection", ""))}});
        } else if (rel == kSelectionFile) {  // no local paths
          write_json_atomic(tmp / rel, scrub_export_json(read_json_file(run_dir / rel)));
        } else if (rel == "manifest.json") {  // provenance: without times and local paths
          write_json_atomic(tmp / rel, scrub_export_json(read_json_file(run_dir / rel)));
        } else if (rel == "topic_histogram.json") {
          // Without its resume check: a hash over the privacy lock, which holds the private
          // files' SHA-256 (whoever knows the rest of the lock could test a guess of the data).
          nlohmann::json h = read_json_file(run_dir / rel);
          h.erase("integrity");
          write_json_atomic(tmp / rel, h);
        } else if (base == "adapter_config.json" || base == "config.json") {  // base model path
          write_json_atomic(tmp / rel,
                            scrub_export_json(read_json_file(run_dir / rel), /*timing=*/false));
        } else {
          fs::copy_file(run_dir / rel, tmp / rel);
        }
        fsync_path(tmp / rel);
        include(rel, e);
      }
    }
    if (!fs::exists(run_dir / "adapter") && !fs::exists(run_dir / "model"))
      spdlog::warn("dpft export: the run saved no adapter or model (output.save_model: false); "
                   "the export holds its metrics only");
    nlohmann::json manifest = {
        {"schema", kExportSchema},
        {"source", scrub_path(fs::weakly_canonical(run_dir).string())},
        {"run", metrics.value("run", nlohmann::json())},
        {"privacy",
         {{"epsilon", privacy_out.value("epsilon", nlohmann::json())},
          {"delta", privacy.value("delta", nlohmann::json())},
          {"accountant", privacy_out.value("accountant_used", privacy_out.value("accountant", ""))},
          {"noise", noise}}},
        {"exported", iso_time_now()},
        {"shareable", !seeded},
        {"included", included},
        {"left_out", left_out},
        {"note",
         "included files are the DP outputs of the run, post-processing of them, and public "
         "settings; see docs/privacy.md (What a run's outputs reveal)"}};
    write_json_atomic(tmp / kExportManifestFile, manifest);
    for (const auto& e : fs::recursive_directory_iterator(tmp))
      if (e.is_directory()) fsync_path(e.path());
    fsync_path(tmp);
    fs::rename(tmp, out_dir);
    fsync_path(parent);
    return {out_dir, manifest};
  } catch (...) {
    remove_tree(tmp, ec);
    throw;
  }
}

}  // namespace dpft
