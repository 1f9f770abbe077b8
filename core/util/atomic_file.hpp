// Crash-safe file output for run directories.
// write_file_atomic: temp file in the same directory + fsync + rename(2) + fsync(dir), so a reader
// (or a crash, even kill -9 mid-write) sees either the old complete file or the new complete one.
// JsonlWriter: one JSON event per line, each line written with a single write(2) on an O_APPEND
// descriptor and flushed; after a crash at most the final line can be incomplete, and
// read_jsonl() skips such a trailing fragment.
#pragma once
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

namespace dpft {

namespace fs = std::filesystem;

// Replace `path` atomically with `content`. Throws RuntimeError naming the path on failure.
void write_file_atomic(const fs::path& path, const std::string& content);
// Same, for a JSON value (pretty-printed, trailing newline).
void write_json_atomic(const fs::path& path, const nlohmann::json& value);

// fsync(2) a file's data, or a directory's entries; RuntimeError when the file cannot be
// opened or synced.
void fsync_path(const fs::path& path);

// Streaming form of write_file_atomic for large outputs (checkpoints): write() appends to a
// temp file beside `path`; commit() fsyncs and renames it over `path`. Destroyed without
// commit() (an exception mid-write), the temp file is removed and `path` is untouched.
class AtomicFileWriter {
 public:
  // mode: the new file's permission bits (0600 for a secret; umask still applies). Throws
  // RuntimeError naming the temp path.
  explicit AtomicFileWriter(const fs::path& path, unsigned mode = 0644);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t n);
  void commit();

 private:
  fs::path path_, tmp_;
  int fd_ = -1;
};

// Removes a file or a directory tree (symbolic links removed, never followed), like
// std::filesystem::remove_all, returning the number of entries removed (0 when `path` does not
// exist). Written on POSIX nftw(3) because a PyTorch wheel's libtorch.so exports its own copy of
// std::filesystem::remove_all, which the dynamic linker can bind dpft's calls to and which
// crashes (seen with PyTorch 2.11 on the GPU machine, docs/BENCHMARKS.md). Throws RuntimeError
// naming the entry it could not remove; the error_code form never throws.
std::uintmax_t remove_tree(const fs::path& path);
std::uintmax_t remove_tree(const fs::path& path, std::error_code& ec) noexcept;

// Read a whole file; throws InputError naming the path if it cannot be read.
std::string read_file(const fs::path& path);

class JsonlWriter {
 public:
  JsonlWriter() = default;
  explicit JsonlWriter(const fs::path& path);  // opens for append, creating the file
  ~JsonlWriter();
  JsonlWriter(JsonlWriter&& o) noexcept;
  JsonlWriter& operator=(JsonlWriter&& o) noexcept;
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;

  void write(const nlohmann::json& event);  // one line, fdatasync'ed
  bool is_open() const { return fd_ >= 0; }
  const fs::path& path() const { return path_; }

 private:
  int fd_ = -1;
  fs::path path_;
};

// Parse a JSONL file; a trailing incomplete line (crash mid-write) is skipped, any other
// malformed line is an InputError naming the file and line number.
std::vector<nlohmann::json> read_jsonl(const fs::path& path);
// A whole JSON file; InputError naming the file when it is missing or malformed.
nlohmann::json read_json(const fs::path& path);

}  // namespace dpft
