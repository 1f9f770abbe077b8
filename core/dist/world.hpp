// Multi-process data parallelism on LibTorch's c10d: one process per rank, a TCPStore for the
// rendezvous and ProcessGroupGloo for the collectives (CPU tensors; tensors on a GPU are staged
// through the host). The process-wide world is set up once by `dpft run` (cli/cmd_run.cpp) from
// --nproc or the launcher's environment; with one rank (the default) every collective is a
// no-op, so single-process code pays nothing.
//
// How a step stays exactly DP with W ranks (docs/training.md, "Data parallel"):
//   rank 0 draws the logical batch (Poisson, from the seed or the OS CSPRNG) and broadcasts it;
//   rank r computes the clipped per-sample sum of rows[r], rows[r + W], ...;
//   rank 0 adds the Gaussian noise to its partial sum (drawn once, from its noise source);
//   one all-reduce sums the partial sums (so the noise enters the total exactly once);
//   every rank divides and applies the same update.
// Rank 0 alone writes the run directory (ledger, metrics, checkpoints, model).
#pragma once
#include <torch/torch.h>

#include <string>
#include <vector>

namespace dpft::dist {

struct WorldOptions {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;                     // ranks on this machine (thread budget)
  std::string master_addr = "127.0.0.1";  // where rank 0's TCPStore listens
  int master_port = 29500;
  double timeout_s = 1800;      // rendezvous and every collective (a hung peer ends the run)
  std::string source = "none";  // none | nproc | torchrun | slurm: where the values came from
};

// The world this process belongs to, from its environment:
//   torchrun (and `dpft run --nproc`): RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
//     MASTER_ADDR, MASTER_PORT;
//   srun: SLURM_PROCID, SLURM_STEP_NUM_TASKS (> 1), SLURM_LOCALID, SLURM_STEP_TASKS_PER_NODE,
//     MASTER_ADDR or the first host of SLURM_JOB_NODELIST, MASTER_PORT (default 29500);
//   otherwise one rank. DPFT_DIST_TIMEOUT (seconds) sets timeout_s. ConfigError on malformed
//   or inconsistent values.
WorldOptions options_from_env();

// The first host name of a Slurm node list: "node[07-09,12],gpu3" -> "node07".
std::string first_slurm_host(const std::string& nodelist);

// Joins the world (once per process; size 1 does nothing). RuntimeError when the rendezvous
// times out or this build has no Gloo.
void init(const WorldOptions& o);
void shutdown();  // leaves the world (tests; the process exit does it otherwise)

int rank();
int size();
inline bool is_root() {
  return rank() == 0;
}
inline bool active() {
  return size() > 1;
}
const WorldOptions& options();

// This rank's share of a logical batch: rows[rank], rows[rank + size], ... (all of them with
// one rank). The union over ranks is rows, each row once.
std::vector<int64_t> shard(const std::vector<int64_t>& rows);

// Collectives: every rank must call them in the same order. Each waits at most timeout_s and
// throws RuntimeError naming the collective when a peer failed, was killed or hung.
// In place, over all ranks: ts[i] <- sum over ranks of ts[i] (one all-reduce for the list).
void all_reduce_sum(std::vector<torch::Tensor>& ts, const char* what);
// In place: every rank's ts[i] <- rank 0's ts[i] (same shapes and dtypes on every rank).
void broadcast(std::vector<torch::Tensor>& ts, const char* what);
// Rank 0's value on every rank.
std::string broadcast_string(const std::string& s, const char* what);
std::vector<int64_t> broadcast_rows(const std::vector<int64_t>& rows, const char* what);
// Texts of which every rank filled its own entries and left the others empty (same length on
// every rank): entry i <- the concatenation over ranks of entry i, i.e. its owner's text.
std::vector<std::string> merge_disjoint(const std::vector<std::string>& texts, const char* what);
void barrier(const char* what);
// Every rank compares `value` with rank 0's; when any differs, every rank throws ConfigError
// (exit 2) naming the ranks that differ and `why`, so no rank goes on alone.
void agree(const std::string& value, const char* what, const std::string& why);

// The parent of `dpft run --nproc N`: starts N copies of this executable with `args` (argv
// without --nproc) on this machine, with torchrun's variables set, forwards SIGINT/SIGTERM to
// them, and returns rank 0's exit code (or the first failure's). Once one rank fails, the
// others get timeout_s to end on their own before they are terminated.
int launch_local(int nproc, const std::vector<std::string>& args, double timeout_s);

}  // namespace dpft::dist
