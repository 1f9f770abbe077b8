// Read-only bytes of a whole file: memory-mapped when possible, otherwise read into memory
// (empty files, pipes, file systems that refuse mmap), or adopted from a buffer. The mapping is
// private and read-only; a file truncated by another process while mapped can still raise
// SIGBUS on access, as with any mmap reader.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace dpft {

class MappedFile {
 public:
  MappedFile() = default;
  // Throws InputError naming `path` if it cannot be opened or read, or is a directory.
  static MappedFile open(const std::filesystem::path& path);
  static MappedFile adopt(std::vector<uint8_t> bytes);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool mapped() const { return map_ != nullptr; }

 private:
  void reset();
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  void* map_ = nullptr;
  std::vector<uint8_t> owned_;
};

}  // namespace dpft
