// The typed vocabulary of privatisation, parsed once from the spec (spelling in quotes):
//
//   Clipping         how each private per-sample gradient g_b is bounded by C before summing:
//     kClip          "clip":      g_b min(1, C / ||g_b||)               (Abadi et al. 2016)
//     kAutoClip      "normalize": g_b C / (||g_b|| + 0.01)              (Bu et al. 2023, AUTO-S)
//   ClippingStyle    which parts of g_b are clipped separately (privacy.clipping_style), each
//                    part g_{b,k} to C_k = C sqrt(s_k / sum_j s_j), so that sqrt(sum C_k^2) = C
//                    bounds ||clipped g_b|| and the noise N(0, sigma^2 C^2) is unchanged
//                    (McMahan et al. 2018, per-layer clipping; fastDP's clipping_style):
//     kFlat          "flat":      one part, the whole gradient (s = 1)
//     kPerLayer      "per_layer": each trainable parameter tensor a part, equal shares
//     kGroups        "groups":    privacy.clip_groups: parameters by name, each group's share
//   NoiseDivisor     what the noised sum is divided by:
//     kExpected      "expected":  q N, the lot size the analysis assumes (Abadi et al. 2016)
//     kRealized      "realized":  the realised batch size max(|B|, 1) (PE-SGD's Algorithm 1)
//   ColumnScaling    PE-SGD's sensitivity control of the columns of the matrix that is noised:
//     kUnitNorm      "normalize": X_j / ||X_j||, bound 1                 (PE-SGD, Alg. 3)
//     kClip          "clip":      X_j min(1, C / ||X_j||), bound C
//   NoisePlacement   where PE-SGD adds its noise (PE-SGD paper, Sec. 5.4):
//     kCoefficients  "coefficients":     on the summed coefficients z (R^N), the paper's method
//     kInnerProduct  "inner_product":    on G^T H before the solve (R^N)
//     kPrivateGradient "private_gradient": on the summed private gradients (R^p)
//   NoiseDraw        where seeded Gaussian noise for a GPU's tensor is drawn:
//     kAuto          "auto":   on the GPU when the noise is seeded, else on the host
//     kHost          "host":   on the host (MT19937), copied over (the CPU run's numbers)
//     kDevice        "device": as auto, but refused with secure noise (the host's CSPRNG)
//   (CPU tensors are drawn on the host in every mode: core/privacy/noise.hpp says why.)
//   NoiseMode        where the bits of a run's noise and Poisson batches come from
//                    (core/privacy/randomness.hpp; docs/privacy.md, "Noise modes"):
//     kKeyed         "keyed":  ChaCha20 keyed by the run's secret key (the default)
//     kSeeded        "seeded": derived from privacy.noise_seed: replayable, not shareable
//     kOs            "os":     the kernel CSPRNG for every draw (privacy.secure_noise: true)
//   AccountantKind   how epsilon is computed (core/privacy/accountant.hpp; privacy.accountant):
//     kPrv           "prv":      the privacy random variable accountant (numerical, tight)
//     kRdp           "rdp":      Renyi DP (an upper bound)
//     kGaussian      "gaussian": the closed form of composed Gaussians (q 1 only)
//   PrivacyUnit      what the guarantee protects, one neighbour's worth of data (privacy.unit;
//                    docs/privacy.md, "Choosing the privacy unit"):
//     kExample       "example":  one training row
//     kDocument      "document": one document, all its packed blocks together
//     kUser          "user":     every row of one user (data.train.user_column), at most
//                                privacy.max_examples_per_user of them
// The two normalisations differ: kAutoClip keeps ||.|| < C with a stabiliser and scales by C;
// kUnitNorm maps every column to norm exactly 1.
#pragma once
#include <array>

#include "core/util/enum_names.hpp"

namespace dpft::privacy {

enum class Clipping { kClip, kAutoClip };
enum class ClippingStyle { kFlat, kPerLayer, kGroups };
enum class NoiseDivisor { kExpected, kRealized };
enum class ColumnScaling { kUnitNorm, kClip };
enum class NoisePlacement { kCoefficients, kInnerProduct, kPrivateGradient };
enum class NoiseDraw { kAuto, kHost, kDevice };
enum class NoiseMode { kKeyed, kSeeded, kOs };
enum class AccountantKind { kPrv, kRdp, kGaussian };
enum class PrivacyUnit { kExample, kDocument, kUser };
inline constexpr std::array<EnumName<ClippingStyle>, 3> kClippingStyleNames = {
    {{ClippingStyle::kFlat, "flat"},
     {ClippingStyle::kPerLayer, "per_layer"},
     {ClippingStyle::kGroups, "groups"}}};
inline constexpr std::array<EnumName<PrivacyUnit>, 3> kPrivacyUnitNames = {
    {{PrivacyUnit::kExample, "example"},
     {PrivacyUnit::kDocument, "document"},
     {PrivacyUnit::kUser, "user"}}};
inline constexpr std::array<EnumName<AccountantKind>, 3> kAccountantNames = {
    {{AccountantKind::kPrv, "prv"},
     {AccountantKind::kRdp, "rdp"},
     {AccountantKind::kGaussian, "gaussian"}}};
inline const char* name_of(AccountantKind v) {
  return enum_name(v, kAccountantNames);
}

inline constexpr std::array<EnumName<Clipping>, 2> kClippingNames = {
    {{Clipping::kClip, "clip"}, {Clipping::kAutoClip, "normalize"}}};
inline constexpr std::array<EnumName<NoiseDivisor>, 2> kNoiseDivisorNames = {
    {{NoiseDivisor::kExpected, "expected"}, {NoiseDivisor::kRealized, "realized"}}};
inline constexpr std::array<EnumName<ColumnScaling>, 2> kColumnScalingNames = {
    {{ColumnScaling::kUnitNorm, "normalize"}, {ColumnScaling::kClip, "clip"}}};
inline constexpr std::array<EnumName<NoisePlacement>, 3> kNoisePlacementNames = {
    {{NoisePlacement::kCoefficients, "coefficients"},
     {NoisePlacement::kInnerProduct, "inner_product"},
     {NoisePlacement::kPrivateGradient, "private_gradient"}}};
inline constexpr std::array<EnumName<NoiseDraw>, 3> kNoiseDrawNames = {
    {{NoiseDraw::kAuto, "auto"}, {NoiseDraw::kHost, "host"}, {NoiseDraw::kDevice, "device"}}};

inline constexpr std::array<EnumName<NoiseMode>, 3> kNoiseModeNames = {
    {{NoiseMode::kKeyed, "keyed"}, {NoiseMode::kSeeded, "seeded"}, {NoiseMode::kOs, "os"}}};

inline const char* name_of(Clipping v) {
  return enum_name(v, kClippingNames);
}
inline const char* name_of(NoiseDivisor v) {
  return enum_name(v, kNoiseDivisorNames);
}
inline const char* name_of(ColumnScaling v) {
  return enum_name(v, kColumnScalingNames);
}
inline const char* name_of(NoisePlacement v) {
  return enum_name(v, kNoisePlacementNames);
}
inline const char* name_of(NoiseDraw v) {
  return enum_name(v, kNoiseDrawNames);
}
inline const char* name_of(NoiseMode v) {
  return enum_name(v, kNoiseModeNames);
}
inline const char* name_of(PrivacyUnit v) {
  return enum_name(v, kPrivacyUnitNames);
}
inline const char* name_of(ClippingStyle v) {
  return enum_name(v, kClippingStyleNames);
}

// Stabiliser gamma of automatic clipping (Bu et al. 2023): C / (||g|| + gamma).
inline constexpr double kAutoClipGamma = 0.01;

}  // namespace dpft::privacy
