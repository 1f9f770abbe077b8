// Shared pieces of the model benchmarks (cmd_bench_model.cpp, cmd_bench_train.cpp).
#pragma once
#include <cstdint>

#include "core/model/transformer.hpp"

namespace dpft {

// Measured fp32 matmul rate (1024^3 sgemm, best of 5), GFLOP/s.
double sgemm_gflops();
// Forward matmul FLOPs per token of `m` at sequence length `seq`: 2 x (linear weights + tied
// lm_head) + attention scores and mixing (4 x seq/2 x heads x head_dim per layer).
double forward_flops_per_token(model::CausalLM& m, int64_t seq);

}  // namespace dpft
