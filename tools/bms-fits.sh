#!/usr/bin/env bash
# The BMS fit's timings on the device machine (#42): `fit_bms --simulate N`
# on the GPU for each N given (default 200000 1000000 4000000 12000000) and
# each seed in $SEEDS (default 1), with the extra flags in $FLAGS (e.g.
# FLAGS="--samfrac 1" for the fit without a sample start); one JSON a fit
# under $OUT/fits (or /tmp/fits), then a line a fit: rows, seed, converged,
# evaluations (and by purpose), the sample start (rows, evaluations,
# seconds, the start used), simulate and fit seconds, REML score, edf, the
# largest |estimate - truth| / SE (parametric, and over every coefficient),
# device peak memory. Stage first, here:
# ../shared/tools/gpu-stage (or with `--example fit_bms` only); then on the
# device, with .gpu and tools carried:
#   [SEEDS="1 2 3"] [FLAGS=...] bash tools/bms-fits.sh [N ...]
cd "$(dirname "$0")/.." || exit 2
export MATFREE_GPU=required
out=${OUT:-/tmp}/fits; mkdir -p "$out"
sizes=("$@"); [[ ${#sizes[@]} -gt 0 ]] || sizes=(200000 1000000 4000000 12000000)
read -r -a seeds <<< "${SEEDS:-1}"
read -r -a flags <<< "${FLAGS:-}"
tag=$(tr -c 'A-Za-z0-9.\n' '_' <<< "${FLAGS:-}")
status=0
for n in "${sizes[@]}"; do for seed in "${seeds[@]}"; do
  base="$out/fit_${n}_s${seed}${tag:+_$tag}"
  if ! .gpu/bin/example--fit_bms --simulate "$n" --seed "$seed" --backend gpu --quiet "${flags[@]}" --json "$base.json" > "$base.log" 2>&1; then
    echo "$n seed $seed: fit_bms failed (see $base.log)"; status=1; continue
  fi
  python3 - "$base.json" "$seed" "${FLAGS:-}" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
phases = dict(d["phases"])
by = d["reml_trace"].get("evaluations_by_purpose", {})
s = d.get("sample_start")
sample = (f'sample {s["rows"]} rows {s["evaluations"]} evals {s["seconds"]:.2f} s used {s["used"]} '
          f'edf {",".join("%.2f" % e for e in s["edf"])}' if s else 'no sample')
def z(names):
    zs = [abs(c["estimate"] - c["truth"]) / c["std_error"] for c in d["coefficients"]
          if c.get("truth") is not None and c["name"].split(":")[0] in names]
    return max(zs) if zs else float("nan")
blocks = {c["name"].split(":")[0] for c in d["coefficients"]}
edf = ",".join("%.2f" % t["edf"] for t in d["smooths"])
print(f'{d["n"]} seed {sys.argv[2]} [{sys.argv[3]}]: converged {d["converged"]} ({d["termination"]}), '
      f'{d["evaluations"]} evaluations {by}, {sample}, '
      f'simulate {phases.get("simulate", float("nan")):.2f} s, fit {phases["fit"]:.2f} s '
      f'(rows {phases["fit: row evaluations"]:.2f} s, checks {phases.get("fit: data checks", float("nan")):.2f} s, '
      f'rigid start {phases.get("fit: rigid start", float("nan")):.2f} s), REML {d["reml_score"]:.6f}, edf {edf}, '
      f'max |est-truth|/SE parametric {z({"marginal", "slope"}):.2f}, all {z(blocks):.2f}, '
      f'device peak {(d.get("device_memory") or {}).get("peak_bytes", float("nan")) / 1e9:.2f} GB', flush=True)
PY
done; done
exit $status
