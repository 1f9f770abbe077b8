// Helpers shared by the Catch2 tests: temporary directories, files, captured stdout, the CLI
// run in-process, the shared data folder (skipping when it is absent).
#pragma once
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/app.hpp"
#include "core/util/atomic_file.hpp"

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
    dpft::remove_tree(path, ec);
  }
  fs::path write(const std::string& name, const std::string& content) const {
    fs::path p = path / name;
    std::ofstream(p) << content;
    return p;
  }
};

// Sets one environment variable for the object's lifetime, then restores what was there.
struct SetEnv {
  std::string name;
  bool had = false;
  std::string old;
  SetEnv(std::string n, const std::string& value) : name(std::move(n)) {
    if (const char* v = std::getenv(name.c_str())) had = true, old = v;
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~SetEnv() {
    if (had)
      ::setenv(name.c_str(), old.c_str(), 1);
    else
      ::unsetenv(name.c_str());
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

// Runs `dpft ARGS... --quiet` in-process; returns the exit code and, if asked, what it printed.
inline int cli(std::vector<std::string> args, std::string* out = nullptr) {
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
// DPFT_TEST_SHARED_DATA=DIR points elsewhere (e.g. a missing path, to check that the cases
// needing it are reported to ctest as skipped).
inline fs::path shared_data_dir() {
  fs::path p = fs::path(DPFT_SOURCE_DIR) / ".." / "shared" / "data";
  if (const char* e = std::getenv("DPFT_TEST_SHARED_DATA")) p = e;
  return fs::exists(p) ? fs::canonical(p) : fs::path();
}

// ../shared/data/<sub>, or "" (with a WARN) when absent: the caller then returns (skips).
inline fs::path shared_data_subdir(const std::string& sub) {
  fs::path root = shared_data_dir();
  if (root.empty() || !fs::exists(root / sub)) {
    WARN("skipped: ../shared/data/" << sub << " is absent");
    return {};
  }
  return root / sub;
}

// The last line of a command's printed output (dpft run prints the run directory last).
inline std::string last_line(const std::string& s) {
  const std::string d = s.substr(0, s.find_last_not_of('\n') + 1);
  return d.substr(d.find_last_of('\n') + 1);
}

}  // namespace dpft::test

// Declares `var` = ../shared/data/<sub> or returns from the test (skipped, with a WARN).
#define SHARED_DATA_OR_SKIP(var, sub)                                   \
  std::filesystem::path var = ::dpft::test::shared_data_subdir(sub); \
  if (var.empty()) return
