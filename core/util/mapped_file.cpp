#include "core/util/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/util/error.hpp"

namespace dpft {

MappedFile MappedFile::open(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw InputError(fmt::format("cannot open {}: {}", path.string(), std::strerror(errno)));
  struct stat st {};
  const bool have_stat = ::fstat(fd, &st) == 0;
  if (have_stat && S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw InputError(fmt::format("{} is a directory, not a file", path.string()));
  }
  MappedFile f;
  if (have_stat && S_ISREG(st.st_mode) && st.st_size > 0) {
    void* m = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (m != MAP_FAILED) {
      f.map_ = m;
      f.data_ = static_cast<const uint8_t*>(m);
      f.size_ = static_cast<size_t>(st.st_size);
    }
  }
  if (!f.map_) {  // read from the same descriptor: a pipe cannot be opened twice
    uint8_t buf[1 << 16];
    while (true) {
      ssize_t r = ::read(fd, buf, sizeof buf);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        int e = errno;
        ::close(fd);
        throw InputError(fmt::format("cannot read {}: {}", path.string(), std::strerror(e)));
      }
      if (r == 0) break;
      f.owned_.insert(f.owned_.end(), buf, buf + r);
    }
    f.data_ = f.owned_.data();
    f.size_ = f.owned_.size();
  }
  ::close(fd);  // a mapping stays valid after close
  return f;
}

MappedFile MappedFile::adopt(std::vector<uint8_t> bytes) {
  MappedFile f;
  f.owned_ = std::move(bytes);
  f.data_ = f.owned_.data();
  f.size_ = f.owned_.size();
  return f;
}

void MappedFile::reset() {
  if (map_) ::munmap(map_, size_);
  map_ = nullptr;
  data_ = nullptr;
  size_ = 0;
  owned_.clear();
}

MappedFile::~MappedFile() {
  reset();
}

MappedFile::MappedFile(MappedFile&& o) noexcept {
  *this = std::move(o);
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    reset();
    map_ = o.map_;
    size_ = o.size_;
    owned_ = std::move(o.owned_);
    data_ = map_ ? static_cast<const uint8_t*>(map_) : owned_.data();
    o.map_ = nullptr;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

}  // namespace dpft
