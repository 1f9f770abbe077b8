// Method `sft+dp-sgd`: the "SFT + DP-SGD" baseline of the PE-SGD paper (App. D.8, Table 9):
// generate a synthetic set D with the untrained model (RANDOM_API, as PE-SGD's initial set),
// fine-tune on it without privacy (sft_epochs), then run DP-SGD exactly as method `dp-sgd`.
// D is generated from the model alone (no private data), so the SFT stage releases nothing.
#include "core/config/fields.hpp"
#include "core/config/spec.hpp"
#include "methods/dp_sgd/dp_sgd_loop.hpp"
#include "methods/method.hpp"
#include "methods/pe_sgd/synthetic_set.hpp"

namespace dpft {

namespace {

class SftDpSgdMethod : public MethodOf<SftDpSgdMethod, StepReleaseMethod> {
 public:
  std::string name() const override { return "sft+dp-sgd"; }
  std::string label() const override { return "SFT+DP-SGD"; }
  bool steps_by_dp_sgd() const override { return true; }  // train::clipped_sum (run_dp_sgd)

  SftDpSgdMethod() { so_.sft_epochs = 1; }  // SFT on the synthetic set first (its point)
  void configure(Fields& f) override { so_.configure(f, /*evolution=*/false); }

  nlohmann::json run(RunContext& ctx, train::TrainInputs& in) override {
    dp_sgd::DpSgdOptions o;
    o.grad = so_.grad;
    o.method_info = {{"name", name()}, {"label", label()}, {"sft_epochs", so_.sft_epochs}};
    o.prepare = [&](train::TrainInputs& t) { return pe_sgd::synthetic_sft(ctx, t, so_); };
    o.prepare_key = "synthetic";
    o.diagnostics = so_.diagnostics;
    if (so_.sft_epochs > 0) o.eval_after_prepare = "sft";  // Table 9's "SFT" row
    return dp_sgd::run_dp_sgd(ctx, in, dp(), o);
  }

 private:
  pe_sgd::SyntheticOptions so_;
};

}  // namespace

std::unique_ptr<Method> make_sft_dp_sgd_method() {
  return std::make_unique<SftDpSgdMethod>();
}

}  // namespace dpft
