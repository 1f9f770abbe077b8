// NumPy .npy files (format version 1.0: magic, little-endian header dict, raw C-order data), so
// that embeddings and other matrices open with numpy.load. Written atomically.
#pragma once
#include <torch/torch.h>

#include <filesystem>

namespace dpft {

// Writes a float32, float64, int64 or int32 tensor of any shape (copied to the CPU, made
// contiguous). RuntimeError naming the path on failure; ConfigError for another dtype.
void write_npy(const std::filesystem::path& path, const torch::Tensor& t);

}  // namespace dpft
