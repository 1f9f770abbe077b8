// Cooperative interruption: SIGINT/SIGTERM set a flag that long loops poll; the run then ends
// cleanly (status "interrupted" in manifest.json and metrics.json, exit 130 or 143).
// A second signal restores the default action, so a stuck process still dies on Ctrl-C twice.
#pragma once

namespace dpft {

void install_signal_handlers();
bool interrupted();          // a SIGINT or SIGTERM has arrived
int interrupt_signal();      // which one (0 if none)
int interrupt_exit_code();   // 128 + signal number (130 for SIGINT, 143 for SIGTERM)
void reset_interrupt();      // tests only

// Fault injection for crash-consistency tests (tests/resume_tamper_test.sh): at the named point,
// DPFT_CRASH_AT=<point> kills the process (SIGKILL: nothing is flushed or cleaned up) and
// DPFT_SIGNAL_AT=<point> sends it SIGINT (as a user's Ctrl-C would); with DPFT_CRASH_RANK=r only
// data-parallel rank r does either (tests/dist_test.sh). Unset in normal use; the
// points are named in docs/outputs.md ("Crash consistency").
void fault_point(const char* point);

}  // namespace dpft
