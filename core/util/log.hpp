// Logging setup: one spdlog logger "dpft" writing to stderr and, once a run directory exists,
// also to <run>/log.txt. `--log-level` and `--quiet` (stderr shows warnings and errors only)
// are applied here.
#pragma once
#include <spdlog/spdlog.h>

#include <filesystem>
#include <string>
#include <vector>

namespace dpft {

// level: trace|debug|info|warn|error|off. Throws ConfigError on an unknown level.
void setup_logging(const std::string& level, bool quiet);
// Tee everything at `level` and above into `path` as well (appends).
void add_log_file(const std::filesystem::path& path);
// Data parallel: stderr lines name the rank; ranks other than 0 show warnings and errors only.
void set_rank_logging(int rank);
// Stop writing to the run's log file (flushes it).
void remove_log_files();

// While one is alive, every warning logged is also kept (once per distinct message, at most
// 100), for a run's metrics.json `warnings` list. Nested captures share one list: the
// outermost starts it empty and stops it.
class WarningCapture {
 public:
  WarningCapture();
  ~WarningCapture();
  WarningCapture(const WarningCapture&) = delete;
  WarningCapture& operator=(const WarningCapture&) = delete;
};
// The warnings kept since the outermost live WarningCapture began (empty when none is alive).
std::vector<std::string> captured_warnings();

}  // namespace dpft
