#include "core/util/signals.hpp"

#include <csignal>
#include <cstdlib>
#include <cstring>

namespace dpft {

namespace {
volatile std::sig_atomic_t g_signal = 0;

extern "C" void on_signal(int sig) {
  if (g_signal != 0) {  // second signal: give up on a clean stop
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_signal = sig;
}
}  // namespace

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool interrupted() { return g_signal != 0; }
int interrupt_signal() { return g_signal; }
int interrupt_exit_code() { return g_signal ? 128 + g_signal : 0; }
void reset_interrupt() { g_signal = 0; }

void fault_point(const char* point) {
  // DPFT_CRASH_RANK=r: only data-parallel rank r (its RANK variable) crashes.
  const char* crash_rank = std::getenv("DPFT_CRASH_RANK");
  const char* my_rank = std::getenv("RANK");
  if (crash_rank && std::strcmp(crash_rank, my_rank ? my_rank : "0") != 0) return;
  const char* crash = std::getenv("DPFT_CRASH_AT");
  if (crash && std::strcmp(crash, point) == 0) std::raise(SIGKILL);
  const char* sig = std::getenv("DPFT_SIGNAL_AT");
  if (sig && std::strcmp(sig, point) == 0) std::raise(SIGINT);
}

}  // namespace dpft
