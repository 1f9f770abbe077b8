// Facts about the process and machine for manifests, `dpft version` and start-up checks:
// LibTorch version and threads, which BLAS is actually loaded, host name, peak memory.
#pragma once
#include <string>

namespace dpft {

std::string torch_version();          // e.g. "1.13.0"
int torch_threads();                  // intra-op threads LibTorch uses
void set_torch_threads(int n);        // --threads: LibTorch's intra-op threads and OpenBLAS's pool
int default_thread_count();           // hardware threads available to this process
bool cuda_available();
int cuda_device_count();

struct BlasInfo {
  std::string library;   // resolved path of the loaded libblas (or libopenblas), "" if none found
  std::string config;    // openblas_get_config() when OpenBLAS, else ""
  bool openblas = false;
};
BlasInfo blas_info();
// Logs a loud warning when LibTorch's BLAS is not OpenBLAS (reference BLAS is ~20x slower).
void warn_if_slow_blas();
// Other runnable threads on the machine now (/proc/loadavg's runnable count less this process;
// the least of three snapshots), -1 when unreadable.
int other_runnable();
// Whether `others` runnable threads hold cores that `threads` threads of this process need.
bool cores_taken(int threads, int others, int cores);
// Logs a warning when cores_taken(threads, other_runnable(), the cores of this process).
void warn_if_busy(int threads);

// OpenBLAS's own thread pool (separate from LibTorch's OpenMP threads). Small matrix products
// (KV-cached decoding) run several times slower when both pools compete for the cores, so
// decoding runs with one BLAS thread. No-ops (returning 0) when the BLAS is not OpenBLAS.
int blas_threads();
void set_blas_threads(int n);
struct BlasThreadsGuard {  // sets n for its lifetime, then restores
  explicit BlasThreadsGuard(int n) : saved(blas_threads()) { if (saved > 0) set_blas_threads(n); }
  ~BlasThreadsGuard() { if (saved > 0) set_blas_threads(saved); }
  int saved;
};

// Process-wide glibc malloc policy; dpft's main (and dpft_tests') sets it before anything
// allocates. glibc serves every block above 32 MB (its largest mmap threshold) with a fresh mmap
// and unmaps it on free, so a step that makes and frees (B*T, V) logits page-faults through them
// again each time (40 % of a CTCL generator run's CPU time went to the kernel). The default
// policy `heap` turns chunk mmaps and heap trimming off, so freed blocks stay for the next step,
// and a watcher thread returns the heap's free pages to the kernel (malloc_trim) whenever
// resident memory has grown past heap_grown's mark over its level after the last return: without
// it the heap only grows (fragmentation: a pretraining trial was OOM-killed, docs/BENCHMARKS.md).
// `glibc` (DPFT_MALLOC=glibc, or its old name `default`) leaves glibc as it is, as does any
// glibc.malloc tunable in GLIBC_TUNABLES (the user's settings win). Timings: docs/BENCHMARKS.md.
enum class MallocPolicy { kGlibc, kHeap };
MallocPolicy choose_malloc_policy(const char* dpft_malloc, const char* glibc_tunables);
MallocPolicy apply_malloc_policy();  // reads the environment, applies, remembers
std::string malloc_policy_name();    // "heap", "glibc" or "unset" (never applied)
long resident_bytes();  // this process's resident memory (/proc/self/statm), -1 if unknown
// Whether resident memory `resident` has grown past the mark over `base`: by half of `base`, and
// by at least 256 MiB.
bool heap_grown(long resident, long base);
// One look of the heap policy's watcher: when resident memory has grown past the mark over
// `base`, returns the heap's free pages to the kernel (malloc_trim) and sets `base` to what
// remains resident. The watcher thread polls every half second, from base 0 (so its first look
// trims once the process holds 256 MiB).
struct HeapWatch {
  long base = 0;  // bytes
  bool poll();    // true: it trimmed
};
bool set_heap_mallopts();   // the heap policy's mallopt settings; false if glibc refused them
void start_heap_watcher();  // the watcher thread (once per process)

std::string host_name();
double peak_rss_mb();                 // ru_maxrss of this process, MiB
double available_memory_mb();         // MemAvailable of /proc/meminfo, MiB (0 if unknown)
std::string iso_time_now();           // 2026-11-21T05:30:12Z (UTC)
std::string local_stamp_now();        // 20261121-063012 (local time; run ids)

}  // namespace dpft
