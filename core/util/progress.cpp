#include "core/util/progress.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include "core/util/strings.hpp"

namespace dpft {

namespace {
bool g_quiet = false;
}

void set_progress_quiet(bool quiet) { g_quiet = quiet; }

ProgressOptions default_progress_options() {
  ProgressOptions o;
  o.tty = !g_quiet && ::isatty(STDERR_FILENO);
  o.log_every_s = g_quiet ? 1e30 : 30;
  return o;
}

Progress::Progress(std::string label, long total, ProgressOptions opts)
    : label_(std::move(label)), total_(total), opts_(opts) {
  start_ = last_log_ = Clock::now();
  last_draw_ = start_ - std::chrono::seconds(1);
}

Progress::~Progress() {
  if (!finished_ && opts_.tty) std::fputc('\n', opts_.out);
}

std::string Progress::status_line() const {
  double el = std::chrono::duration<double>(Clock::now() - start_).count();
  double rate = el > 0 ? (done_ - first_) / el : 0;
  std::string s = fmt::format("{} {}/{}", label_, done_, total_);
  if (total_ > 0) s += fmt::format(" ({:.0f}%)", 100.0 * done_ / total_);
  s += fmt::format(" {:.2f} {}/s", rate, opts_.unit);
  if (rate > 0 && total_ > done_) s += " ETA " + format_duration((total_ - done_) / rate);
  s += " elapsed " + format_duration(el);
  if (!extra_.empty()) s += " | " + extra_;
  return s;
}

void Progress::emit(bool force) {
  auto now = Clock::now();
  if (opts_.tty) {
    if (!force && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    int width = 24;
    int fill = total_ > 0 ? static_cast<int>(width * done_ / total_) : 0;
    std::string bar = std::string(fill, '#') + std::string(width - fill, '.');
    std::fprintf(opts_.out, "\r\033[2K[%s] %s", bar.c_str(), status_line().c_str());
    std::fflush(opts_.out);
  } else {
    if (!force && std::chrono::duration<double>(now - last_log_).count() < opts_.log_every_s) return;
    last_log_ = now;
    spdlog::info("{}", status_line());
  }
}

void Progress::start_at(long done) {
  done_ = first_ = done;
  start_ = Clock::now();
}

void Progress::update(long done, const std::string& extra) {
  done_ = done;
  extra_ = extra;
  emit(false);
}

void Progress::finish(const std::string& extra) {
  if (finished_) return;
  if (!extra.empty()) extra_ = extra;
  if (!g_quiet || opts_.tty) emit(true);
  if (opts_.tty) std::fputc('\n', opts_.out);
  finished_ = true;
}

}  // namespace dpft
