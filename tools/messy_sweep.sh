#!/usr/bin/env bash
# Fits tools/messy_data.py's data sets, each as is and with x1 times 10^4,
# and prints one line per fit (benches/RESULTS.md, session 13):
#   [STEEP=k] bash tools/messy_sweep.sh FIT_BMS OUTDIR "N ..." "SEED ..." [fit_bms flags]
# A line: n seed scale exit-status termination REML-iterations evaluations
# lambda V-minus-log-Jacobian edf seconds. V of the scaled copy is reported
# minus 2 ln 10^4 (its two rescaled coefficients' log-Jacobian), so the two
# lines of one data set compare directly.
bin=$1; out=$2; ns=$3; seeds=$4; shift 4
here=$(dirname "$0")
mkdir -p "$out"
for n in $ns; do for seed in $seeds; do for scale in 1 10000; do
  csv="$out/m-$n-$seed-$scale.csv"; js="$out/m-$n-$seed-$scale.json"
  python3 "$here/messy_data.py" "$n" "$seed" "$scale" "$csv" "${STEEP:-1}"
  t0=$(date +%s.%N)
  "$bin" --data "$csv" --marginal x1,x2 --slope x1 --json "$js" "$@" > "$out/m-$n-$seed-$scale.out" 2> "$out/m-$n-$seed-$scale.err"
  rc=$?
  t1=$(date +%s.%N)
  python3 - "$js" "$n" "$seed" "$scale" "$rc" "$t0" "$t1" <<'PY'
import json, math, sys
js, n, seed, scale, rc, t0, t1 = sys.argv[1:]
try:
    d = json.load(open(js))
except Exception as e:
    print(n, seed, scale, rc, "no-json", e); sys.exit()
v = d["reml_score"] - (2 * math.log(10000) if scale == "10000" else 0)
lam = ",".join("%.5g" % s["lambda"] for s in d["smooths"])
edf = ",".join("%.3f" % s["edf"] for s in d["smooths"])
print(n, seed, scale, rc, d["termination"], d["reml_iterations"], d["evaluations"], lam, "%.6f" % v, edf,
      "%.1f" % (float(t1) - float(t0)), flush=True)
PY
done; done; done
