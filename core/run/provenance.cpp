#include "core/run/provenance.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"

namespace dpft {

nlohmann::json make_provenance(const RunContext& ctx) {
  const nlohmann::json& lock_data = ctx.privacy_lock.value("settings", nlohmann::json::object())
                                        .value("plan", nlohmann::json::object())
                                        .value("settings", nlohmann::json::object())
                                        .value("data", nlohmann::json::object());
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : lock_data.value("files", nlohmann::json::array()))
    files.push_back({{"name", std::filesystem::path(f.value("path", "")).filename().string()},
                     {"bytes", f.value("bytes", int64_t{-1})},
                     {"sha256", f.value("sha256", "")}});
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
          {"data", {{"files", files}, {"examples", lock_data.value("examples", int64_t{0})}}},
          {"private", noised},
          {"accountant", ledger.options().accountant},
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
    DPFT_CHECK_AS(InputError, j.is_object() && j.value("schema", "") == kProvenanceSchema,
                  "{}: not a dpft provenance record (schema '{}')", where,
                  j.is_object() ? j.value("schema", "") : std::string("none"));
    for (const auto& f : j.at("data").at("files")) p.data_sha256.push_back(f.at("sha256"));
    std::sort(p.data_sha256.begin(), p.data_sha256.end());
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

bool same_private_data(const Provenance& p, const nlohmann::json& data_files) {
  for (const auto& f : data_files)
    if (std::binary_search(p.data_sha256.begin(), p.data_sha256.end(),
                           f.value("sha256", std::string())))
      return true;
  return false;
}

}  // namespace dpft
