// Batch -> (B, T) int64 tensors (see batch_tensors.hpp).
#include "core/tokenizer/batch_tensors.hpp"

#include "core/util/error.hpp"

namespace dpft::tok {

BatchTensors to_tensors(const Batch& batch) {
  const int64_t B = static_cast<int64_t>(batch.input_ids.size());
  const int64_t T = B ? static_cast<int64_t>(batch.input_ids[0].size()) : 0;
  DPFT_CHECK(batch.attention_mask.size() == batch.input_ids.size(),
             "batch has {} rows of ids but {} of masks", batch.input_ids.size(),
             batch.attention_mask.size());
  BatchTensors t{torch::empty({B, T}, torch::kInt64), torch::empty({B, T}, torch::kInt64)};
  auto ids = t.input_ids.accessor<int64_t, 2>();
  auto mask = t.attention_mask.accessor<int64_t, 2>();
  for (int64_t b = 0; b < B; ++b) {
    DPFT_CHECK(static_cast<int64_t>(batch.input_ids[b].size()) == T &&
                   static_cast<int64_t>(batch.attention_mask[b].size()) == T,
               "batch row {} has {} ids and {} mask entries, expected {}", b,
               batch.input_ids[b].size(), batch.attention_mask[b].size(), T);
    for (int64_t i = 0; i < T; ++i) {
      ids[b][i] = batch.input_ids[b][i];
      mask[b][i] = batch.attention_mask[b][i];
    }
  }
  return t;
}

}  // namespace dpft::tok
