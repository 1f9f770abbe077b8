// Progress reporting for long loops. On a TTY: a single redrawn line with a bar, rate and ETA
// (at most 10 redraws/s). Otherwise (CI, Slurm logs, pipes): a plain log line every
// `log_every_s` seconds and at the end, so logs stay readable.
#pragma once
#include <chrono>
#include <cstdio>
#include <string>

namespace dpft {

struct ProgressOptions {
  bool tty = false;          // default: isatty(stderr) and not --quiet
  double log_every_s = 30;   // non-TTY: seconds between log lines
  std::FILE* out = stderr;   // TTY mode writes here
  std::string unit = "it";
};

ProgressOptions default_progress_options();
void set_progress_quiet(bool quiet);  // --quiet: no bars, no periodic lines

class Progress {
 public:
  Progress(std::string label, long total, ProgressOptions opts = default_progress_options());
  ~Progress();
  // A resumed loop: `done` items were done before this process; the rate and ETA count only
  // the items done since (a resumed run at step 5000 of 6000 is not 5000 steps fast).
  void start_at(long done);
  // Advance to `done` items; `extra` is shown after the rate (e.g. "loss 2.31").
  void update(long done, const std::string& extra = "");
  void finish(const std::string& extra = "");
  // The text of the current status line (without ANSI control codes); tests read this.
  std::string status_line() const;

 private:
  using Clock = std::chrono::steady_clock;
  std::string label_;
  long total_, done_ = 0, first_ = 0;
  std::string extra_;
  ProgressOptions opts_;
  Clock::time_point start_, last_draw_, last_log_;
  bool finished_ = false;
  void emit(bool force);
};

}  // namespace dpft
