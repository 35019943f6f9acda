#!/usr/bin/env python3
# Usage: python3 tools/messy_data.py N SEED SCALE OUT.csv [STEEP]
# (benches/RESULTS.md, sessions 12-13). A data set the model did not
# generate: logistic outcomes with a sine score effect, a heavily tied
# score, a three-level covariate; x1 scaled. STEEP (default 1) multiplies
# the linear predictor: 8 or more makes the labels nearly separable.
import math, random, sys
n, seed, scale, path = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
steep = float(sys.argv[5]) if len(sys.argv) > 5 else 1.0
rng = random.Random(seed)
with open(path, "w") as f:
    f.write("y,z,x1,x2\n")
    for _ in range(n):
        x1, x2 = rng.gauss(0, 1), rng.choice([0, 1, 2])
        z = round(rng.gauss(0.3, 1.4) * 2) / 2
        eta = steep * (-0.5 + 0.8 * x1 + 0.3 * x2 + 1.2 * math.sin(z) + 0.4 * x1 * z)
        y = 1 if rng.random() < 1 / (1 + math.exp(-max(min(eta, 700.0), -700.0))) else 0
        f.write(f"{y},{z},{x1 * scale!r},{x2}\n")
