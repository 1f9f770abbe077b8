// dpft entry point: signal handlers, then the CLI (cli/app.cpp).
//
// Allocator note (docs/BENCHMARKS.md): glibc serves the large per-step logit / activation
// tensors with fresh mmaps, which costs page faults (sys time ~ user time in training).
// Keeping freed memory in the heap (mallopt M_MMAP_MAX 0 + a high trim threshold) made steps
// 1.3x faster but let the resident size grow without bound (an OOM kill after ~600 pretraining
// steps), so dpft keeps glibc's defaults.
#include "cli/app.hpp"
#include "core/util/signals.hpp"

int main(int argc, char** argv) {
  dpft::install_signal_handlers();
  return dpft::run_cli(argc, argv);
}
