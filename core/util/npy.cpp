#include "core/util/npy.hpp"

#include <fmt/format.h>

#include <string>

#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"

namespace dpft {

void write_npy(const std::filesystem::path& path, const torch::Tensor& t) {
  const char* descr = nullptr;
  switch (t.scalar_type()) {
    case torch::kFloat32:
      descr = "<f4";
      break;
    case torch::kFloat64:
      descr = "<f8";
      break;
    case torch::kInt64:
      descr = "<i8";
      break;
    case torch::kInt32:
      descr = "<i4";
      break;
    default:
      throw ConfigError(
          fmt::format("write_npy: dtype {} is not supported (float32, float64, "
                      "int64, int32)",
                      c10::toString(t.scalar_type())));
  }
  std::string shape;  // Python tuple syntax: (), (5,), (3, 4)
  for (int64_t i = 0; i < t.dim(); ++i) shape += (i ? ", " : "") + std::to_string(t.size(i));
  if (t.dim() == 1) shape += ",";
  std::string dict =
      fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", descr, shape);
  // Magic (6) + version (2) + header length (2) + dict + '\n', padded to a multiple of 64.
  const size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict.push_back('\n');
  std::string head = "\x93NUMPY";
  head.push_back('\x01');
  head.push_back('\x00');
  head.push_back(static_cast<char>(dict.size() & 0xff));
  head.push_back(static_cast<char>((dict.size() >> 8) & 0xff));
  head += dict;
  const torch::Tensor c = t.detach().to(torch::kCPU).contiguous();
  AtomicFileWriter w(path);
  w.write(head.data(), head.size());
  w.write(c.data_ptr(), static_cast<size_t>(c.numel()) * c.element_size());
  w.commit();
}

}  // namespace dpft
