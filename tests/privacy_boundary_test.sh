#!/usr/bin/env bash
# Privacy by construction (issue 68): outside core/privacy/, no code builds a noise source, a
# Poisson sampler or a keystream, reads OS randomness, or makes, reads or writes a run's noise
# key; only the runner (and the benchmarks, on a scratch ledger) build a run's randomness and
# mechanisms; and no code outside core/privacy records into a ledger. Methods release through the run's mechanisms (core/privacy/mechanism.hpp). The
# check runs on the source tree, then on a planted tree to show it catches each kind of
# violation.
# Usage: privacy_boundary_test.sh SOURCE_DIR
set -u
SRC="$1"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
NAMES='(NoiseSource|PoissonSampler|KeyStream)'
PATTERN="\\b${NAMES}\\s*[({]|\\b${NAMES}\\s+[A-Za-z_][A-Za-z0-9_]*\\s*[({]|make_(unique|shared)<\\s*(privacy::)?${NAMES}\\s*>|\\bos_random\\s*\\(|RunKey::generate|\\b(read|write)_run_key\\s*\\("
# A run's randomness and mechanisms: built by the runner, and by the benchmarks' scratch ones.
BUILDERS='\bPrivateRandomness::(keyed|seeded|os|for_run|for_benchmark)\b|make_(unique|shared)<\s*(privacy::)?Mechanisms\s*>|\bMechanisms\s+[A-Za-z_][A-Za-z0-9_]*\s*[({]'
ALLOWED_BUILDERS='^(core/run/runner\.cpp|methods/bench/bench_common\.cpp):'
# violations ROOT: every match under ROOT's cli/ methods/ data/ core/, except core/privacy/.
violations() {
  (cd "$1" && { grep -rnE "$PATTERN" --include='*.cpp' --include='*.hpp' cli methods data core 2>/dev/null
    grep -rnE "$BUILDERS" --include='*.cpp' --include='*.hpp' cli methods data core 2>/dev/null \
      | grep -vE "$ALLOWED_BUILDERS"; } \
    | grep -v '^core/privacy/' | grep -vE '^[^:]+:[0-9]+:\s*//')
}
# Ledger records outside core/privacy: none. Every release goes through a mechanism of
# core/privacy/mechanism.hpp, which draws and records it (`dpft account` asks core/privacy for
# a plan's ledger: PrivacyLedger::of_plan).
KNOWN_RECORDS=''
records() {
  (cd "$1" && grep -rnE "ledger\.record\s*\(" --include='*.cpp' --include='*.hpp' cli methods data core 2>/dev/null \
    | grep -v '^core/privacy/' | grep -vE '^[^:]+:[0-9]+:\s*//')
}
fail=0
extra=$(records "$SRC" | while IFS=: read -r file _; do
  case " $KNOWN_RECORDS " in *" $file "*) ;; *) echo "$file" ;; esac; done)
if [ -n "$extra" ]; then
  echo "FAIL: ledger records outside core/privacy (release through core/privacy instead):"
  echo "$extra"; fail=1
fi
[ "$(records "$SRC" | wc -l)" = 0 ] || { echo "FAIL: ledger records outside core/privacy:"; records "$SRC"; fail=1; }
found=$(violations "$SRC")
if [ -n "$found" ]; then
  echo "FAIL: noise sources, samplers or keys built outside core/privacy/ (get them from"
  echo "      RunContext::privacy's mechanisms; docs/architecture.md):"
  echo "$found"
  fail=1
fi
# Power: a planted tree with one violation of each kind is caught, line by line.
mkdir -p "$T/methods/x" "$T/cli" "$T/core/privacy" "$T/core/train"
cat > "$T/methods/x/a.cpp" <<'CPP'
privacy::NoiseSource noise(derive_seed(seed, "noise"), false);
auto s = std::make_unique<privacy::PoissonSampler>(n, q, 1);
CPP
cat > "$T/cli/b.cpp" <<'CPP'
uint64_t r; privacy::os_random(&r, 8);
auto k = privacy::RunKey::generate();
privacy::KeyStream ks(k, "noise");
auto t = privacy::NoiseSource(1, true);
CPP
cat > "$T/core/train/c.cpp" <<'CPP'
privacy::write_run_key(p, k);
void f(privacy::NoiseSource& noise, std::unique_ptr<privacy::PoissonSampler> s);  // fine
auto r = privacy::PrivateRandomness::seeded(3);
privacy::Mechanisms m(lo, r, plan);
auto mp = std::make_unique<privacy::Mechanisms>(lo, r, plan);
void g(privacy::Mechanisms& m);  // fine
CPP
mkdir -p "$T/core/run"
echo 'privacy::Mechanisms mechanisms(lo, randomness, plan);' > "$T/core/run/runner.cpp"  # allowed
echo 'privacy::NoiseSource n(1, false);' > "$T/core/privacy/ok.cpp"  # allowed here
planted=$(violations "$T" | wc -l)
if [ "$planted" != 10 ]; then
  echo "FAIL: the check found $planted of the 10 planted violations:"; violations "$T"; fail=1
fi
echo 'ledger.record(r);' >> "$T/core/train/c.cpp"
[ "$(records "$T" | wc -l)" = 1 ] || { echo "FAIL: a planted ledger record was not found"; fail=1; }
[ "$fail" = 0 ] && echo "privacy_boundary: 3 passed, 0 failed" || echo "privacy_boundary: failed"
exit $fail
