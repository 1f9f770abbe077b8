#include "core/util/log.hpp"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <spdlog/sinks/base_sink.h>

#include <algorithm>
#include <mutex>

#include "core/util/error.hpp"
#include "core/util/strings.hpp"

namespace dpft {

namespace {
spdlog::level::level_enum parse_level(const std::string& s) {
  static const std::vector<std::string> names = {"trace", "debug", "info", "warn", "error", "off"};
  for (size_t i = 0; i < names.size(); ++i)
    if (s == names[i]) return i == 5 ? spdlog::level::off : static_cast<spdlog::level::level_enum>(i);
  throw ConfigError(fmt::format("--log-level: unknown level '{}'; use one of {}", s, join(names, ", ")));
}
// Keeps the text of each distinct warning (the first kKeep) for captured_warnings().
class WarningSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  static constexpr size_t kKeep = 100;
  std::vector<std::string> get() {
    std::lock_guard<std::mutex> g(mutex_);
    return kept_;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (msg.level != spdlog::level::warn) return;
    std::string text(msg.payload.data(), msg.payload.size());
    if (kept_.size() < kKeep && std::find(kept_.begin(), kept_.end(), text) == kept_.end())
      kept_.push_back(std::move(text));
  }
  void flush_() override {}

 private:
  std::vector<std::string> kept_;
};

std::shared_ptr<WarningSink> g_warnings;  // the live capture's sink
int g_capture_depth = 0;

}  // namespace

WarningCapture::WarningCapture() {
  if (g_capture_depth++ > 0) return;
  g_warnings = std::make_shared<WarningSink>();
  g_warnings->set_level(spdlog::level::warn);
  spdlog::default_logger()->sinks().push_back(g_warnings);
}

WarningCapture::~WarningCapture() {
  if (--g_capture_depth > 0) return;
  auto& sinks = spdlog::default_logger()->sinks();
  sinks.erase(std::remove(sinks.begin(), sinks.end(),
                          std::static_pointer_cast<spdlog::sinks::sink>(g_warnings)),
              sinks.end());
  g_warnings.reset();
}

std::vector<std::string> captured_warnings() {
  return g_warnings ? g_warnings->get() : std::vector<std::string>{};
}

void setup_logging(const std::string& level, bool quiet) {
  auto lvl = parse_level(level);
  auto err = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  err->set_level(quiet ? std::max(lvl, spdlog::level::warn) : lvl);
  err->set_pattern("[%H:%M:%S] %^%l%$ %v");
  auto logger = std::make_shared<spdlog::logger>("dpft", spdlog::sinks_init_list{err});
  logger->set_level(lvl);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

void add_log_file(const std::filesystem::path& path) {
  auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path.string(), false);
  sink->set_pattern("[%Y-%m-%d %H:%M:%S.%e] %l %v");
  sink->set_level(spdlog::default_logger()->level());
  spdlog::default_logger()->sinks().push_back(sink);
}

void set_rank_logging(int rank) {
  for (auto& sink : spdlog::default_logger()->sinks()) {
    sink->set_pattern(fmt::format("[%H:%M:%S] rank {} %^%l%$ %v", rank));
    if (rank > 0) sink->set_level(std::max(sink->level(), spdlog::level::warn));
  }
}

void remove_log_files() {
  auto& sinks = spdlog::default_logger()->sinks();
  spdlog::default_logger()->flush();
  sinks.erase(std::remove_if(sinks.begin(), sinks.end(),
                             [](const spdlog::sink_ptr& s) {
                               return std::dynamic_pointer_cast<spdlog::sinks::basic_file_sink_mt>(s) != nullptr;
                             }),
              sinks.end());
}

}  // namespace dpft
