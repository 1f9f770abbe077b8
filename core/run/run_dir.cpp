#include "core/run/run_dir.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>

#include "core/util/error.hpp"
#include "core/util/system.hpp"

namespace dpft {

RunDir RunDir::create(const std::string& out_root, const Spec& spec, const std::string& name) {
  fs::path group = fs::path(out_root) / spec.name;
  std::error_code ec;
  fs::create_directories(group, ec);
  if (ec)
    throw RuntimeError(
        fmt::format("cannot create output directory {}: {} (set output.dir or --out)",
                    group.string(), ec.message()));
  const std::string base =
      !name.empty() ? name : fmt::format("{}-s{}", local_stamp_now(), spec.seed);
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
  d.lock();
  d.events_ = JsonlWriter(d.path_ / "metrics.jsonl");
  return d;
}

void RunDir::lock() {
  const fs::path p = path_ / ".lock";
  int fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    throw RuntimeError(fmt::format("cannot open the run directory's lock file {}: {}", p.string(),
                                   std::strerror(errno)));
  lock_fd_ = std::shared_ptr<int>(new int(fd), [](int* f) {
    ::close(*f);
    delete f;
  });
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[32] = {0};
    ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    std::string holder = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "unknown";
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    if (err == EWOULDBLOCK)
      throw RuntimeError(fmt::format(
          "run directory {} is in use by another dpft process (pid {}); wait for it to end (or "
          "stop it) before resuming",
          path_.string(), holder));
    throw RuntimeError(
        fmt::format("cannot lock {}: {}", p.string(), std::strerror(err)));
  }
  std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0)
    throw RuntimeError(fmt::format("cannot write {}: {}", p.string(), std::strerror(errno)));
}

RunDir RunDir::open(const fs::path& dir) {
  if (!fs::exists(dir / "config.resolved.yaml"))
    throw InputError(
        fmt::format("{} is not a dpft run directory (no config.resolved.yaml); pass the directory "
                    "`dpft run` printed",
                    dir.string()));
  RunDir d;
  fs::path clean = dir.lexically_normal();
  if (clean.filename().empty()) clean = clean.parent_path();  // "runs/x/id/"
  d.path_ = clean;
  d.run_id_ = clean.filename().string();
  d.lock();
  d.events_ = JsonlWriter(d.path_ / "metrics.jsonl");
  return d;
}

void RunDir::event(const std::string& kind, nlohmann::json fields) {
  nlohmann::json e = {{"event", kind}, {"time", iso_time_now()}};
  if (fields.is_object()) e.update(fields);
  events_.write(e);
}

int64_t RunDir::count_events(const std::string& kind) const {
  std::ifstream in(path_ / "metrics.jsonl");
  int64_t n = 0;
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json e = nlohmann::json::parse(line, nullptr, false);  // a torn last line: skipped
    if (e.is_object() && e.value("event", "") == kind) ++n;
  }
  return n;
}

void RunDir::write_metrics(const nlohmann::json& metrics) const {
  write_json_atomic(path_ / "metrics.json", metrics);
}

void RunDir::write_manifest(const nlohmann::json& manifest) const {
  write_json_atomic(path_ / "manifest.json", manifest);
}

}  // namespace dpft
