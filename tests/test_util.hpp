// Helpers shared by the Catch2 tests: temporary directories, files, captured stdout, the CLI
// in-process.
#pragma once
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/app.hpp"

namespace dpft::test {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "dpft_test_XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  fs::path write(const std::string& name, const std::string& content) const {
    fs::path p = path / name;
    std::ofstream(p) << content;
    return p;
  }
};

// Redirects std::cout into a string for the object's lifetime.
struct CaptureStdout {
  std::ostringstream buf;
  std::streambuf* old;
  CaptureStdout() : old(std::cout.rdbuf(buf.rdbuf())) {}
  ~CaptureStdout() { std::cout.rdbuf(old); }
  std::string str() const { return buf.str(); }
};

// Runs `dpft ARGS --quiet` in-process; returns the exit code, stdout into *out.
inline int run_dpft(std::vector<std::string> args, std::string* out = nullptr) {
  args.insert(args.begin(), "dpft");
  args.push_back("--quiet");
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  CaptureStdout cap;
  int rc = run_cli(static_cast<int>(argv.size()), argv.data());
  if (out) *out = cap.str();
  return rc;
}

// Path to shared/ data beside the project root, or "" when absent (tests then skip).
inline fs::path shared_data_dir() {
  fs::path p = fs::path(DPFT_SOURCE_DIR) / ".." / "shared" / "data";
  return fs::exists(p) ? fs::canonical(p) : fs::path();
}

}  // namespace dpft::test
