// Method `noop`: no training and no data access, hence no DP release. It proves the dispatch
// path end to end (spec -> registry -> run directory -> metrics.json) and, with `steps` > 0,
// ticks empty steps so progress reporting, metrics.jsonl events and interruption can be
// exercised without a model.
#include <spdlog/spdlog.h>

#include <chrono>
#include <thread>

#include "core/config/fields.hpp"
#include "core/util/progress.hpp"
#include "core/util/signals.hpp"
#include "methods/method.hpp"

namespace dpft {

namespace {

class NoopMethod : public MethodOf<NoopMethod> {
 public:
  std::string name() const override { return "noop"; }

  void configure(Fields& f) override {
    f.get("steps", steps_, Range::at_least(0));           // empty steps to tick (0 = none)
    f.get("step_ms", step_ms_, Range::closed(0, 60000));  // sleep per step, milliseconds
  }

  bool trains() const override { return false; }

  nlohmann::json run(RunContext& ctx, train::TrainInputs&) override {
    Progress progress("noop", steps_);
    int64_t done = 0;
    for (; done < steps_ && !interrupted(); ++done) {
      if (step_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_ms_));
      ctx.dir.event("step", {{"step", done + 1}});
      progress.update(done + 1);
    }
    progress.finish();
    return {{"method_result", {{"steps_done", done}}}};  // no DP release: the ledger stays empty
  }

 private:
  int64_t steps_ = 0;
  int64_t step_ms_ = 0;
};

}  // namespace

std::unique_ptr<Method> make_noop_method() {
  return std::make_unique<NoopMethod>();
}

}  // namespace dpft
