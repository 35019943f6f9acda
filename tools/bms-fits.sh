#!/usr/bin/env bash
# The BMS fit's timings on the device machine (#42): `fit_bms --simulate N`
# on the GPU for each N given (default 200000 1000000 4000000 12000000),
# one JSON a size under $OUT/fits (or /tmp/fits), then a line a size:
# rows, converged, evaluations (and by purpose), simulate and fit seconds,
# REML score. Stage first, here: ../shared/tools/gpu-stage (or with
# `--example fit_bms` only); then on the device, with .gpu and tools carried:
#   bash tools/bms-fits.sh [N ...]
cd "$(dirname "$0")/.." || exit 2
export MATFREE_GPU=required
out=${OUT:-/tmp}/fits; mkdir -p "$out"
sizes=("$@"); [[ ${#sizes[@]} -gt 0 ]] || sizes=(200000 1000000 4000000 12000000)
status=0
for n in "${sizes[@]}"; do
  if ! .gpu/bin/example--fit_bms --simulate "$n" --backend gpu --quiet --json "$out/fit_$n.json" > "$out/fit_$n.log" 2>&1; then
    echo "$n: fit_bms failed (see $out/fit_$n.log)"; status=1; continue
  fi
  python3 - "$out/fit_$n.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
phases = dict(d["phases"])
by = d["reml_trace"].get("evaluations_by_purpose", {})
print(f'{d["n"]}: converged {d["converged"]} ({d["termination"]}), {d["evaluations"]} evaluations {by}, '
      f'simulate {phases.get("simulate", float("nan")):.2f} s, fit {phases["fit"]:.2f} s '
      f'(rows {phases["fit: row evaluations"]:.2f} s), REML {d["reml_score"]:.6f}, '
      f'device peak {(d.get("device_memory") or {}).get("peak_bytes", float("nan")) / 1e9:.2f} GB')
PY
done
exit $status
