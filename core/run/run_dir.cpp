#include "core/run/run_dir.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "core/util/error.hpp"
#include "core/util/system.hpp"

namespace dpft {

RunDir RunDir::create(const std::string& out_root, const Spec& spec) {
  fs::path group = fs::path(out_root) / spec.name;
  std::error_code ec;
  fs::create_directories(group, ec);
  if (ec)
    throw RuntimeError(
        fmt::format("cannot create output directory {}: {} (set output.dir or --out)",
                    group.string(), ec.message()));
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
  std::string base = fmt::format("{}-s{}", stamp, spec.seed);
  RunDir d;
  for (int i = 1;; ++i) {
    std::string id = i == 1 ? base : fmt::format("{}-{}", base, i);
    fs::path p = group / id;
    if (::mkdir(p.c_str(), 0755) == 0) {  // mkdir claims the name atomically
      d.path_ = p;
      d.run_id_ = id;
      break;
    }
    if (errno != EEXIST || i > 1000)
      throw RuntimeError(
          fmt::format("cannot create run directory {}: {}", p.string(), std::strerror(errno)));
  }
  d.events_ = JsonlWriter(d.path_ / "metrics.jsonl");
  return d;
}

RunDir RunDir::open(const fs::path& dir) {
  if (!fs::exists(dir / "config.resolved.yaml"))
    throw InputError(
        fmt::format("{} is not a dpft run directory (no config.resolved.yaml); pass the directory "
                    "`dpft run` printed",
                    dir.string()));
  RunDir d;
  d.path_ = dir;
  d.run_id_ = dir.filename().string();
  d.events_ = JsonlWriter(d.path_ / "metrics.jsonl");
  return d;
}

void RunDir::event(const std::string& kind, nlohmann::json fields) {
  nlohmann::json e = {{"event", kind}, {"time", iso_time_now()}};
  if (fields.is_object()) e.update(fields);
  events_.write(e);
}

void RunDir::write_metrics(const nlohmann::json& metrics) const {
  write_json_atomic(path_ / "metrics.json", metrics);
}

void RunDir::write_manifest(const nlohmann::json& manifest) const {
  write_json_atomic(path_ / "manifest.json", manifest);
}

}  // namespace dpft
