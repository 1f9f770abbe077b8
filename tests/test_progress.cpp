// Progress reporting: status line content (count, percent, rate, ETA, extra) and TTY drawing.
#include <catch2/catch.hpp>

#include <cstdio>
#include <thread>

#include "core/util/progress.hpp"
#include "core/util/strings.hpp"

using namespace dpft;
using Catch::Matchers::Contains;

TEST_CASE("status line shows count, percent, rate, ETA and extra", "[progress]") {
  ProgressOptions o;
  o.tty = false;
  o.log_every_s = 1e9;
  Progress p("train", 200, o);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  p.update(50, "loss 2.5");
  std::string s = p.status_line();
  CHECK_THAT(s, Contains("train 50/200 (25%)"));
  CHECK_THAT(s, Contains("it/s"));
  CHECK_THAT(s, Contains("ETA"));
  CHECK_THAT(s, Contains("| loss 2.5"));
}

TEST_CASE("a resumed loop's rate counts only the items done since it resumed", "[progress]") {
  ProgressOptions o;
  o.tty = false;
  o.log_every_s = 1e9;
  Progress p("train", 6000, o);
  p.start_at(5000);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  p.update(5001);
  std::string s = p.status_line();
  CHECK_THAT(s, Contains("train 5001/6000 (83%)"));
  // 1 step in >= 0.2 s: at most 5 it/s (counting the 5000 earlier steps would give > 5000)
  double rate = std::stod(s.substr(s.find("%)") + 3));
  CHECK(rate > 0);
  CHECK(rate <= 5.0);
}

TEST_CASE("TTY mode redraws one line with a bar", "[progress]") {
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* f = open_memstream(&buf, &len);
  ProgressOptions o;
  o.tty = true;
  o.out = f;
  {
    Progress p("x", 4, o);
    p.update(2);
    p.update(4);
    p.finish();
  }
  std::fclose(f);
  std::string out(buf, len);
  std::free(buf);
  CHECK_THAT(out, Contains("\r"));
  CHECK_THAT(out, Contains("[############"));
  CHECK_THAT(out, Contains("x 4/4 (100%)"));
}

TEST_CASE("durations and suggestions", "[util]") {
  CHECK(format_duration(0.25) == "250ms");
  CHECK(format_duration(4.24) == "4.2s");
  CHECK(format_duration(185) == "3m05s");
  CHECK(format_duration(3720) == "1h02m");
  CHECK(edit_distance("epsilom", "epsilon") == 1);
  CHECK(closest_match("dleta", {"delta", "epsilon"}).value() == "delta");
  CHECK_FALSE(closest_match("zzzzzz", {"delta", "epsilon"}).has_value());
}
