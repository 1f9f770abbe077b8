// dpft entry point: allocator settings, signal handlers, then the CLI (cli/app.cpp).
#include <malloc.h>

#include <cstdlib>
#include <cstring>

#include "cli/app.hpp"
#include "core/util/signals.hpp"

int main(int argc, char** argv) {
  // Training allocates and frees activation / logit tensors of hundreds of MB every step. glibc
  // serves blocks above 32 MB with fresh mmaps, so each step paid for page faults on all of them
  // (sys time ~ user time). Keeping freed memory in the heap instead made a pretraining step 1.5x
  // faster (docs/BENCHMARKS.md). DPFT_MALLOC=system keeps glibc's defaults.
  const char* m = std::getenv("DPFT_MALLOC");
  if (!m || std::strcmp(m, "system") != 0) {
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, 2147483647);
    mallopt(M_TOP_PAD, 256 << 20);
  }
  dpft::install_signal_handlers();
  return dpft::run_cli(argc, argv);
}
