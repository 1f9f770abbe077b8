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

}  // namespace dpft
