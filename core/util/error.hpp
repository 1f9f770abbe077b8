// Error types and always-on checks. Every error carries the exit code `dpft` maps it to
// (docs/cli.md): 2 usage/config, 3 data/model input, 4 runtime failure. Exceptions are caught
// once, in cli/main.cpp; library code never exits. No `assert` on user input: use DPFT_CHECK.
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace dpft {

enum ExitCode : int {
  kExitOk = 0,
  kExitUsage = 2,        // bad flags, bad spec (unknown key, wrong type, out of range)
  kExitInput = 3,        // missing/malformed data, model or tokenizer files
  kExitRuntime = 4,      // anything that went wrong while running
  kExitInterrupted = 130,  // SIGINT (SIGTERM gives 143)
};

class Error : public std::runtime_error {
 public:
  Error(int exit_code, const std::string& msg) : std::runtime_error(msg), code_(exit_code) {}
  int exit_code() const { return code_; }

 private:
  int code_;
};

// A spec or flag is wrong: the message names the key/flag, the value and what is allowed.
struct ConfigError : Error {
  explicit ConfigError(const std::string& m) : Error(kExitUsage, m) {}
};
// An input file (data, model, tokenizer) is missing or malformed: the message names the path.
struct InputError : Error {
  explicit InputError(const std::string& m) : Error(kExitInput, m) {}
};
// Failure while running (numerics, I/O on the run directory, internal invariant).
struct RuntimeError : Error {
  explicit RuntimeError(const std::string& m) : Error(kExitRuntime, m) {}
};

}  // namespace dpft

// DPFT_CHECK(cond, "fmt {}", args...): always on; throws dpft::RuntimeError with file:line.
#define DPFT_CHECK(cond, ...)                                                                  \
  do {                                                                                         \
    if (!(cond))                                                                               \
      throw ::dpft::RuntimeError(::fmt::format("{} ({}:{}: check `{}` failed)",               \
                                               ::fmt::format(__VA_ARGS__), __FILE__, __LINE__, \
                                               #cond));                                        \
  } while (0)

// DPFT_CHECK_AS(ErrorType, cond, "fmt {}", args...): same, with a chosen error type (exit code).
#define DPFT_CHECK_AS(Type, cond, ...)                      \
  do {                                                      \
    if (!(cond)) throw Type(::fmt::format(__VA_ARGS__));    \
  } while (0)
