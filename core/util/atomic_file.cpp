#include "core/util/atomic_file.hpp"

#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/util/error.hpp"

namespace dpft {

namespace {

void write_all(int fd, const char* data, size_t n, const fs::path& what) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw RuntimeError(fmt::format("cannot write {}: {}", what.string(), std::strerror(errno)));
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
}

void fsync_dir(const fs::path& dir) {
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace

void fsync_path(const fs::path& path) {
  if (fs::is_directory(path)) {
    fsync_dir(path);
    return;
  }
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    throw RuntimeError(fmt::format("cannot open {}: {}", path.string(), std::strerror(errno)));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0)
    throw RuntimeError(fmt::format("cannot fsync {}: {}", path.string(), std::strerror(errno)));
}

AtomicFileWriter::AtomicFileWriter(const fs::path& path, unsigned mode) : path_(path), tmp_(path) {
  tmp_ += fmt::format(".tmp.{}", ::getpid());
  ::unlink(tmp_.c_str());  // O_CREAT keeps an existing file's mode: start from a new one
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, static_cast<mode_t>(mode));
  if (fd_ < 0)
    throw RuntimeError(fmt::format("cannot create {}: {} (is the output directory writable?)",
                                   tmp_.string(), std::strerror(errno)));
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {  // not committed: leave `path` as it was
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void AtomicFileWriter::write(const void* data, size_t n) {
  DPFT_CHECK(fd_ >= 0, "AtomicFileWriter::write after commit ({})", path_.string());
  write_all(fd_, static_cast<const char*>(data), n, tmp_);
}

void AtomicFileWriter::commit() {
  DPFT_CHECK(fd_ >= 0, "AtomicFileWriter::commit twice ({})", path_.string());
  if (::fsync(fd_) != 0)
    throw RuntimeError(fmt::format("cannot fsync {}: {}", tmp_.string(), std::strerror(errno)));
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp_.c_str());
    throw RuntimeError(fmt::format("cannot rename {} to {}: {}", tmp_.string(), path_.string(),
                                   std::strerror(e)));
  }
  fsync_dir(path_.parent_path());
}

void write_file_atomic(const fs::path& path, const std::string& content) {
  AtomicFileWriter w(path);
  w.write(content.data(), content.size());
  w.commit();
}

void write_json_atomic(const fs::path& path, const nlohmann::json& value) {
  // Invalid UTF-8 in a string (an error message quoting a Latin-1 data file) is written as
  // U+FFFD instead of throwing: the failure handler must never fail on the message it records.
  write_file_atomic(path, value.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

namespace {
// nftw(3) has no user pointer: the walk's state lives in thread-local storage.
thread_local std::uintmax_t tl_removed = 0;
thread_local int tl_errno = 0;
thread_local std::string tl_failed;

int remove_entry(const char* p, const struct stat*, int, struct FTW*) {
  if (::remove(p) != 0 && errno != ENOENT) {
    tl_errno = errno;
    tl_failed = p;
    return 1;  // stops the walk
  }
  ++tl_removed;
  return 0;
}
}  // namespace

std::uintmax_t remove_tree(const fs::path& path, std::error_code& ec) noexcept {
  ec.clear();
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) ec.assign(errno, std::generic_category());
    return 0;
  }
  tl_removed = 0;
  tl_errno = 0;
  tl_failed.clear();
  // Depth first (contents before their directory), physical (links are not followed).
  const int rc = ::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  if (rc != 0) ec.assign(tl_errno ? tl_errno : errno, std::generic_category());
  return tl_removed;
}

std::uintmax_t remove_tree(const fs::path& path) {
  std::error_code ec;
  const std::uintmax_t n = remove_tree(path, ec);
  if (ec)
    throw RuntimeError(fmt::format("could not remove {}: {}",
                                   tl_failed.empty() ? path.string() : tl_failed, ec.message()));
  return n;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("cannot read {}: no such file or not readable", path.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

JsonlWriter::JsonlWriter(const fs::path& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw RuntimeError(fmt::format("cannot open {} for append: {}", path.string(), std::strerror(errno)));
}

JsonlWriter::~JsonlWriter() {
  if (fd_ >= 0) ::close(fd_);
}

JsonlWriter::JsonlWriter(JsonlWriter&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }

JsonlWriter& JsonlWriter::operator=(JsonlWriter&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}

void JsonlWriter::write(const nlohmann::json& event) {
  DPFT_CHECK(fd_ >= 0, "JsonlWriter used before open");
  // dump() never emits a raw newline; invalid UTF-8 becomes U+FFFD (see write_json_atomic)
  std::string line = event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  write_all(fd_, line.data(), line.size(), path_);
  ::fdatasync(fd_);
}

std::vector<nlohmann::json> read_jsonl(const fs::path& path) {
  std::string text = read_file(path);
  std::vector<nlohmann::json> out;
  size_t pos = 0, lineno = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    ++lineno;
    if (nl == std::string::npos) break;  // trailing fragment without newline: incomplete write
    std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.empty()) continue;
    try {
      out.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::parse_error& e) {
      throw InputError(fmt::format("{}:{}: malformed JSON line: {}", path.string(), lineno, e.what()));
    }
  }
  return out;
}

nlohmann::json read_json(const fs::path& path) {
  const std::string text = read_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(fmt::format("{}: malformed JSON: {}", path.string(), e.what()));
  }
}

}  // namespace dpft
