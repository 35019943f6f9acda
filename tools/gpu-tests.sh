#!/usr/bin/env bash
# Runs the staged GPU tests (marked #[ignore] so that a CPU machine reports
# them as ignored, not passed) on the device machine, ignored ones included,
# with the GPU required. Stage first, here: ../shared/tools/gpu-stage; then
# on the device, with .gpu and tools carried:
#   bash tools/gpu-tests.sh [PREFIX]     (default prefix gpu_)
# One log per binary under $OUT/tests (or /tmp/tests); exit status 0 only
# when every binary passed and at least one test ran.
cd "$(dirname "$0")/.." || exit 2
export MATFREE_GPU=required NCCL_NVLS_ENABLE=0 RUST_BACKTRACE=1
out=${OUT:-/tmp}/tests; mkdir -p "$out"
prefix=${1:-gpu_}
pass=0; fail=0; ran=0
for b in .gpu/bin/test--"$prefix"*; do
  [[ -x $b ]] || continue
  n=${b##*/test--}
  if "$b" --include-ignored --test-threads=1 > "$out/$n.log" 2>&1; then pass=$((pass+1)); r=ok; else fail=$((fail+1)); r=FAILED; fi
  line=$(grep -Eo 'test result: .*' "$out/$n.log" | tail -n1)
  ran=$((ran + $(grep -Eo '[0-9]+ passed' <<< "$line" | grep -Eo '[0-9]+' || echo 0)))
  echo "$n: $r ($line)"
done
echo "$pass binaries passed, $fail failed; $ran tests passed"
[[ $fail == 0 && $ran -gt 0 ]]
