#include "core/run/provenance.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/privacy/data_key.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"

namespace dpft {

namespace {

std::string file_name(const nlohmann::json& f) {
  return std::filesystem::path(f.value("path", f.value("name", ""))).filename().string();
}

}  // namespace

nlohmann::json provenance_data(const nlohmann::json& files, int64_t examples) {
  const privacy::DataKey key = privacy::DataKey::load_or_create();
  nlohmann::json out = nlohmann::json::array();
  for (const auto& f : files)
    out.push_back(
        {{"name", file_name(f)}, {"fingerprint", key.fingerprint(f.value("sha256", ""))}});
  return {{"key", key.id()}, {"files", out}, {"examples", examples}};
}

nlohmann::json make_provenance(const RunContext& ctx) {
  const nlohmann::json& lock_data = ctx.privacy_lock.value("settings", nlohmann::json::object())
                                        .value("plan", nlohmann::json::object())
                                        .value("settings", nlohmann::json::object())
                                        .value("data", nlohmann::json::object());
  const privacy::PrivacyLedger& ledger = ctx.privacy.ledger();
  nlohmann::json releases = nlohmann::json::array();
  bool noised = !ledger.releases().empty();
  for (const privacy::Release& r : ledger.releases()) {
    releases.push_back({{"label", r.label},
                        {"noise_multiplier", r.noise_multiplier},
                        {"sampling_rate", r.sampling_rate},
                        {"count", r.count}});
    noised = noised && r.noise_multiplier > 0;
  }
  return {{"schema", kProvenanceSchema},
          {"run_id", ctx.dir.run_id()},
          {"data", provenance_data(lock_data.value("files", nlohmann::json::array()),
                                   lock_data.value("examples", int64_t{0}))},
          {"private", noised},
          {"accountant", privacy::name_of(ledger.options().accountant)},
          {"delta", ledger.options().delta},
          {"releases", releases}};
}

void write_provenance(const std::filesystem::path& dir, const RunContext& ctx) {
  write_json_atomic(dir / kProvenanceFile, make_provenance(ctx));
}

Provenance parse_provenance(const nlohmann::json& j, const std::string& where) {
  Provenance p;
  p.json = j;
  try {
    const std::string schema = j.is_object() ? j.value("schema", "") : std::string("none");
    DPFT_CHECK_AS(InputError, schema != "dpft.provenance/1",
                  "{}: a provenance record of an earlier dpft, which named the private data by "
                  "their SHA-256 (anyone holding the file can test a guess of the data with it); "
                  "make the artefact again with this dpft",
                  where);
    DPFT_CHECK_AS(InputError, schema == kProvenanceSchema,
                  "{}: not a dpft provenance record (schema '{}')", where, schema);
    p.data_key = j.at("data").at("key").get<std::string>();
    for (const auto& f : j.at("data").at("files")) p.data_files.push_back(f.at("fingerprint"));
    std::sort(p.data_files.begin(), p.data_files.end());
    for (const auto& r : j.at("releases"))
      p.releases.push_back({r.at("label").get<std::string>(),
                            r.at("noise_multiplier").get<double>(),
                            r.at("sampling_rate").get<double>(), r.at("count").get<int64_t>()});
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: damaged provenance record ({})", where, e.what()));
  }
  p.is_private = !p.releases.empty();
  for (const auto& r : p.releases) p.is_private = p.is_private && r.noise_multiplier > 0;
  return p;
}

std::optional<Provenance> read_provenance(const std::filesystem::path& dir) {
  const std::filesystem::path f = dir / kProvenanceFile;
  if (!std::filesystem::exists(f)) return std::nullopt;
  return parse_provenance(read_json(f), f.string());
}

std::optional<Provenance> provenance_of(const std::filesystem::path& input) {
  std::error_code ec;
  if (std::filesystem::is_directory(input, ec)) return read_provenance(input);
  if (!std::filesystem::is_regular_file(input, ec)) return std::nullopt;
  return read_provenance(input.parent_path().empty() ? "." : input.parent_path());
}

DataMatch same_private_data(const Provenance& p, const nlohmann::json& data_files) {
  const privacy::DataKey key = privacy::DataKey::load_or_create();
  if (p.data_key != key.id()) return DataMatch::kUnknown;
  for (const auto& f : data_files)
    if (std::binary_search(p.data_files.begin(), p.data_files.end(),
                           key.fingerprint(f.value("sha256", std::string()))))
      return DataMatch::kSame;
  return DataMatch::kOther;
}

const nlohmann::json* Inheritance::decision(const std::string& option) const {
  for (const auto& d : decisions)
    if (d.value("option", "") == option) return &d;
  return nullptr;
}

Inheritance inherit(const std::vector<InputArtefact>& inputs, const nlohmann::json& data_files,
                    bool dp_run) {
  Inheritance out;
  // Per source run, the most of each release any of its artefacts embodies (a run's artefacts
  // are snapshots of one growing ledger: counted once, at the largest).
  std::vector<std::pair<std::string, std::vector<privacy::Release>>> by_run;
  for (const InputArtefact& in : inputs) {
    nlohmann::json d = {{"option", in.option}, {"path", file_name({{"path", in.path}})}};
    if (!in.provenance) {
      DPFT_CHECK_AS(ConfigError, !in.needs_provenance || in.declared_public,
                    "{} {}: the file carries no provenance (which run made it, from which data, "
                    "spending what), so this run cannot tell whether it embodies releases of its "
                    "private data. Write it again with this dpft, or, if it was made from public "
                    "data only, declare so (method.file_public: true)",
                    in.option, in.path);
      if (in.needs_provenance) {
        d["decision"] = "declared public (no provenance)";
        out.decisions.push_back(d);
      }
      continue;
    }
    const Provenance& p = *in.provenance;
    const std::string run_id = p.json.value("run_id", "?");
    d["run_id"] = run_id;
    d["private"] = p.is_private;
    if (p.is_private) {
      // A DP artefact is composed whatever data it was made from, unless the spec declares it
      // not this run's data: whether the files match is a fact about the private data (one
      // record changed makes "other" data of the same people), so no output may depend on it.
      if (in.declared_public) {
        DPFT_CHECK_AS(ConfigError, same_private_data(p, data_files) != DataMatch::kSame,
                      "{} {}: declared not made from this run's data (method.file_public: true), "
                      "but run {} made it from this run's private data files: drop the "
                      "declaration (its releases are then composed)",
                      in.option, in.path, run_id);
        d["decision"] = "declared not this run's data: nothing composed";
        out.decisions.push_back(d);
        continue;
      }
      d["decision"] = "made by a DP run: its releases composed (whichever data it came from)";
    } else {
      // A non-private artefact: refused for a DP run when it may come from this run's data
      // (a refusal, before anything is written, tells the operator only).
      const DataMatch match = same_private_data(p, data_files);
      if (match == DataMatch::kOther) {
        d["decision"] = "non-private, from other private data: nothing composed";
        out.decisions.push_back(d);
        continue;
      }
      if (match == DataMatch::kUnknown && in.declared_public) {
        d["decision"] = "another data key, non-private, declared not this run's data";
        out.decisions.push_back(d);
        continue;
      }
      DPFT_CHECK_AS(ConfigError, !dp_run || match == DataMatch::kSame,
                    "{} {}: run {} made it without noise (non-private) under another data key, "
                    "so this run cannot tell whether it came from its private data. Point "
                    "DPFT_DATA_KEY at the data key of the machine that made it, or, if it was "
                    "made from other data, declare so (method.file_public: true)",
                    in.option, in.path, run_id);
      DPFT_CHECK_AS(ConfigError, !dp_run,
                    "{} {}: run {} made it from this run's private data without noise "
                    "(non-private: epsilon inf), so no DP run can build on it. Make it with a DP "
                    "run (a finite privacy.epsilon), or from public data",
                    in.option, in.path, run_id);
      d["decision"] =
          fmt::format("{}, non-private: its releases composed (this run is non-private too)",
                      match == DataMatch::kSame ? "same private data" : "another data key");
    }
    d["releases"] = p.json.at("releases");
    out.decisions.push_back(d);
    auto it = std::find_if(by_run.begin(), by_run.end(),
                           [&](const auto& e) { return e.first == run_id; });
    if (it == by_run.end()) it = by_run.insert(by_run.end(), {run_id, {}});
    for (privacy::Release r : p.releases) {
      r.label = "source: " + r.label;
      auto same = std::find_if(it->second.begin(), it->second.end(), [&](const auto& x) {
        return x.label == r.label && x.noise_multiplier == r.noise_multiplier &&
               x.sampling_rate == r.sampling_rate;
      });
      if (same == it->second.end())
        it->second.push_back(r);
      else
        same->count = std::max(same->count, r.count);
    }
  }
  for (const auto& [run, releases] : by_run)
    for (const privacy::Release& r : releases) {
      auto same = std::find_if(out.releases.begin(), out.releases.end(), [&](const auto& x) {
        return x.label == r.label && x.noise_multiplier == r.noise_multiplier &&
               x.sampling_rate == r.sampling_rate;
      });
      if (same == out.releases.end())
        out.releases.push_back(r);
      else
        same->count += r.count;
    }
  return out;
}

}  // namespace dpft
