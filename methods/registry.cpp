#include "methods/registry.hpp"

#include <fmt/format.h>

#include "core/config/fields.hpp"
#include "core/util/error.hpp"
#include "core/util/strings.hpp"

namespace dpft {

std::unique_ptr<Method> make_noop_method();        // methods/noop.cpp
std::unique_ptr<Method> make_sgd_method();         // methods/dp_sgd/sgd.cpp
std::unique_ptr<Method> make_dp_sgd_method();      // methods/dp_sgd/dp_sgd.cpp
std::unique_ptr<Method> make_denoise_method();     // methods/denoise/denoise.cpp
std::unique_ptr<Method> make_pe_sgd_method();      // methods/pe_sgd/pe_sgd.cpp
std::unique_ptr<Method> make_pdp_sgd_method();     // methods/pe_sgd/pdp_sgd.cpp
std::unique_ptr<Method> make_gep_method();         // methods/pe_sgd/gep.cpp
std::unique_ptr<Method> make_inpro_method();       // methods/pe_sgd/inpro.cpp
std::unique_ptr<Method> make_sft_dp_sgd_method();  // methods/pe_sgd/sft_dp_sgd.cpp
std::unique_ptr<Method> make_dp_sft_method();      // methods/dp_sft/dp_sft.cpp
std::unique_ptr<Method> make_ctcl_method();        // methods/ctcl/ctcl.cpp
std::unique_ptr<Method> make_pe_method();          // methods/ctcl/private_evolution.cpp
std::unique_ptr<Method> make_aug_pe_method();      // methods/ctcl/private_evolution.cpp

const std::vector<MethodInfo>& method_registry() {
  static const std::vector<MethodInfo> registry = {
      {"noop",
       "no training: records the resolved config, ticks optional empty steps, writes metrics",
       make_noop_method},
      {"sgd", "non-private fine-tuning (or clip-only with clip: true); also pretraining",
       make_sgd_method},
      {"dp-sgd",
       "DP-SGD / DP-AdamW: Poisson sampling, per-sample clipping, Gaussian noise (Abadi et al. "
       "2016)",
       make_dp_sgd_method},
      {"denoise",
       "DP-SGD + RMT shrinkage of each layer's noisy gradient matrix (paper 003, Alg. 1)",
       make_denoise_method},
      {"pe-sgd",
       "PE-SGD: projection onto an evolving synthetic-gradient subspace (Zou et al., ICLR 2026, "
       "Alg. 1-3)",
       make_pe_sgd_method},
      {"pdp-sgd",
       "projected DP-SGD onto the top-k eigenspace of synthetic gradients (Zhou et al. 2021)",
       make_pdp_sgd_method},
      {"gep", "gradient embedding perturbation: noisy coefficients + residual (Yu et al. 2021)",
       make_gep_method},
      {"inpro", "inner-product projection baseline of the PE-SGD paper (no inverse)",
       make_inpro_method},
      {"sft+dp-sgd",
       "non-private SFT on a generated synthetic set, then DP-SGD (PE-SGD paper, Table 9)",
       make_sft_dp_sgd_method},
      {"dp-sft",
       "DP-SFT: a subspace from the SVD of a DP training trajectory (or a file), then DP-SGD on "
       "the per-sample gradients projected onto it (paper 002, Alg. 1-3)",
       make_dp_sft_method},
      {"ctcl",
       "CTCL: DP topic histogram + DP fine-tuned conditional generator (BART) -> DP synthetic "
       "documents (paper 004)",
       make_ctcl_method},
      {"pe",
       "Private Evolution: DP synthetic text from a frozen generator's RANDOM / VARIATION APIs "
       "and DP nearest-neighbour votes of the private texts (Lin et al. 2024)",
       make_pe_method},
      {"aug-pe",
       "Aug-PE: Private Evolution for text with variations before the vote and rank selection "
       "(Xie et al. 2024; a CTCL baseline)",
       make_aug_pe_method},
  };
  return registry;
}

std::vector<std::string> method_names() {
  std::vector<std::string> names;
  for (const auto& m : method_registry()) names.push_back(m.name);
  return names;
}

std::unique_ptr<Method> make_method(const std::string& name) {
  for (const auto& m : method_registry())
    if (m.name == name) return m.make();
  auto names = method_names();
  auto close = closest_match(name, names);
  throw ConfigError(fmt::format("method.name: unknown method '{}'; known methods: {}{}", name,
                                join(names, ", "),
                                close ? fmt::format(" (did you mean '{}'?)", *close) : ""));
}

MethodBlock parse_method_block(const std::string& name, Fields& block) {
  std::shared_ptr<Method> m = make_method(name);
  m->configure(block);  // the one time this block is read
  return {m->options_yaml(), m->label(), m->makes_sources(), m};
}

const Method& parsed_method(const MethodSpec& spec) {
  const auto* m = dynamic_cast<const Method*>(spec.configured.get());
  DPFT_CHECK(m != nullptr && m->name() == spec.name,
             "the method block of a spec that was not parsed (method {}): specs come from "
             "parse_spec / load_spec",
             spec.name);
  return *m;
}

std::unique_ptr<Method> configured_method(const MethodSpec& spec) {
  return parsed_method(spec).clone();
}

Spec parse_spec(const YAML::Node& root) {
  return parse_spec(root, parse_method_block);
}

Spec load_spec(const std::string& path, const std::vector<std::string>& overrides) {
  return load_spec(path, overrides, parse_method_block);
}

}  // namespace dpft
