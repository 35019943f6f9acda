//! The device kernels' logic, checked without a GPU. `kernels/bms_stage1.cu`
//! and `kernels/bms_row.cu` are compiled as C++ (`tests/replay/shim.h`
//! stands in for the CUDA built-ins) and run one thread a block over
//! generated problems (the seed shape, r = 4, 33 and 64, each basis absent
//! in turn, and gpu_bms's non-monotone calibrations): every strided loop runs in turn and Stage 2
//! takes its scalar path instead of the tensor cores (which only a GPU run
//! checks). The replay's intercepts and rows are compared with the CPU
//! model's (as tests/gpu_bms.rs compares the device's), Stage 2 over the
//! CPU's Stage-1 bundle (`bms_row`) too, and two Stage-2 tile sizes with
//! each other bitwise (every sum runs over a row's cells in cell
//! order whatever the tile). Skipped, with a message, where no C++ compiler
//! is found.

mod common;

use matfree::bms::MarginalSlope;
use std::path::{Path, PathBuf};
use std::process::Command;

use matfree::bms::io::generator::{generate, Generated, GeneratorConfig};
use matfree::bms::{evaluate_rows, CubicBasis, RowKernelInputs, RowKernelOutputs};

/// The first C++ compiler that answers `--version`.
fn compiler() -> Option<&'static str> {
    ["c++", "g++", "clang++"].into_iter().find(|cc| {
        Command::new(cc)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

fn put(out: &mut Vec<u8>, values: &[f64]) {
    out.extend((values.len() as u64).to_le_bytes());
    values.iter().for_each(|v| out.extend(v.to_le_bytes()));
}

/// A basis as the kernels take it: knots, pieces `[segments][dim][4]`, the
/// combination with beta `[segments][4]`, the raw B-spline blocks
/// `[segments][4][4]`, their first functions and the linear parts
/// `[dim][2]` (nothing for an absent basis).
fn basis_arrays(basis: Option<&CubicBasis>, beta: &[f64]) -> [Vec<f64>; 6] {
    let Some(b) = basis else {
        return Default::default();
    };
    let segments = 0..b.segments();
    [
        b.knots().to_vec(),
        segments.clone().flat_map(|s| b.segment(s).concat()).collect(),
        segments.clone().flat_map(|s| b.combine(s, beta)).collect(),
        segments.clone().flat_map(|s| b.raw_block(s).pieces.concat()).collect(),
        segments.map(|s| b.raw_block(s).first as f64).collect(),
        b.linear_parts().concat(),
    ]
}

/// The problem in the driver's input order (tests/replay/driver.cpp).
fn problem_bytes(g: &Generated) -> Vec<u8> {
    let (bases, data, beta) = (g.model.bases(), &g.data, &g.beta);
    let blk = g.model.blocks();
    let direct = g.model.direct_beta(beta);
    let (beta_h, beta_w) = direct.split_at(bases.p_h());
    let dim = |b: Option<&CubicBasis>| b.map_or(0, |b| b.dim()) as f64;
    let (score, link) = (bases.score.as_ref(), bases.link.as_ref());
    let rigid = direct.iter().all(|v| *v == 0.0) as u8 as f64;
    let header = [
        data.n() as f64,
        blk.p_m as f64,
        blk.p_g as f64,
        bases.p_h() as f64,
        bases.p_w() as f64,
        dim(score),
        dim(link),
        bases.s_f,
        rigid,
    ];
    let mut out = Vec::new();
    put(&mut out, &header);
    basis_arrays(score, beta_h).iter().for_each(|a| put(&mut out, a));
    basis_arrays(link, beta_w).iter().for_each(|a| put(&mut out, a));
    for a in [
        data.designs.x_m(),
        data.designs.x_g(),
        &beta[blk.m_range()],
        &beta[blk.g_range()],
        beta_h,
        beta_w,
        &data.z,
        &data.y,
        &data.weights,
    ] {
        put(&mut out, a);
    }
    out
}

/// The CPU Stage-1 bundle in the driver's bundle order.
fn bundle_bytes(inp: &RowKernelInputs) -> Vec<u8> {
    let mut out = Vec::new();
    put(
        &mut out,
        &[inp.n_rows as f64, inp.r as f64, inp.p_h as f64, inp.p_w as f64],
    );
    put(
        &mut out,
        &inp.cell_offsets.iter().map(|&o| o as f64).collect::<Vec<_>>(),
    );
    let k = inp.kernel_arrays();
    for a in k.rows.iter().chain(&k.cells).chain(&k.observed) {
        put(&mut out, a);
    }
    out
}

/// The driver's output: intercepts, neglog, gradients, Hessians, status.
fn read_arrays(path: &Path) -> Vec<Vec<f64>> {
    let bytes = std::fs::read(path).unwrap();
    let mut arrays = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let n = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
        at += 8;
        let values = bytes[at..at + 8 * n]
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        at += 8 * n;
        arrays.push(values);
    }
    arrays
}

/// Compile the driver with the kernels into `dir`: `replay`, and with the
/// warp emulation (tests/replay/warp.h) `replay-warp`.
fn build(cc: &str, dir: &Path, warp: bool) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = dir.join(if warp { "replay-warp" } else { "replay" });
    let flags: &[&str] = if warp { &["-pthread", "-DWARP_EMULATION"] } else { &[] };
    let status = Command::new(cc)
        .args(["-O1", "-std=c++17"])
        .args(flags)
        .arg("-o")
        .arg(&exe)
        .arg("-I")
        .arg(root.join("kernels"))
        .arg("-I")
        .arg(root.join("tests/replay"))
        .arg(root.join("tests/replay/driver.cpp"))
        .status()
        .unwrap();
    assert!(status.success(), "{cc} could not compile the kernels as C++");
    exe
}

/// Run the replay on `bytes` (`mode`: "" for both stages, "bundle") at
/// tiles of 9 and 1 cells, and of 9 with the Q sums in global memory (as
/// rows too wide for shared memory keep them); all must agree bitwise.
/// Returns the arrays.
fn replay(exe: &Path, dir: &Path, label: &str, mode: &str, bytes: &[u8]) -> Vec<Vec<f64>> {
    let input = dir.join(format!("in-{label}-{mode}.bin"));
    std::fs::write(&input, bytes).unwrap();
    let run = |tile: &str| {
        let out = dir.join(format!("out-{label}-{mode}-{tile}.bin"));
        let mut cmd = Command::new(exe);
        cmd.arg(&input).arg(&out).arg(tile);
        if !mode.is_empty() {
            cmd.arg(mode);
        }
        assert!(
            cmd.status().unwrap().success(),
            "{label} {mode}: replay with tile {tile} failed"
        );
        read_arrays(&out)
    };
    let (nine, one, global) = (run("9"), run("1"), run("9g"));
    let bits = |a: &[Vec<f64>]| a.iter().flatten().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert!(
        bits(&nine) == bits(&one),
        "{label} {mode}: tiles of 9 and 1 cells differ"
    );
    assert!(
        bits(&nine) == bits(&global),
        "{label} {mode}: Q sums in shared and in global memory differ"
    );
    assert_eq!(nine.len(), 5, "{label} {mode}: the driver writes 5 arrays");
    assert!(
        nine[4].iter().all(|s| *s == 0.0),
        "{label} {mode}: rejected rows: {:?}",
        nine[4]
    );
    nine
}

/// Rows (neglog, gradients, Hessians) against the CPU's, as gpu_bms checks
/// the device's; the kernels write each Hessian packed (its upper triangle
/// row by row), the CPU in full.
fn check_rows(label: &str, got: &[Vec<f64>], want: &RowKernelOutputs) {
    common::assert_close(&format!("neglog {label}"), &got[1], &want.neglog, 1e-8);
    common::assert_close(&format!("grad {label}"), &got[2], &want.grad, 1e-8);
    let r = want.grad.len() / want.neglog.len();
    let upper: Vec<f64> = want
        .hess
        .chunks_exact(r * r)
        .flat_map(|h| (0..r).flat_map(move |u| (u..r).map(move |v| h[u * r + v])))
        .collect();
    common::assert_close(&format!("hess {label}"), &got[3], &upper, 1e-8);
}

/// One problem through the replays `runs` (binary, mode) of the device's
/// two stages from the bases (Stage 2 over theta, over the raw functions,
/// or over the raw functions on the tensor-core path in the warp
/// emulation), against the CPU model; then, through the first binary,
/// Stage 2 over the CPU's bundle, against the CPU's Stage 2 on it.
fn check_problem(runs: &[(&Path, &str)], dir: &Path, label: &str, g: &Generated) {
    let (inp, intercept) = g.model.stage1(&g.data, &g.beta).unwrap();
    let want = evaluate_rows(&inp).unwrap();
    let problem = problem_bytes(g);
    for &(exe, mode) in runs {
        let label = &format!("{label}-{}", exe.file_name().unwrap().to_string_lossy());
        let got = replay(exe, dir, label, mode, &problem);
        for (i, (x, y)) in got[0].iter().zip(&intercept).enumerate() {
            assert!((x - y).abs() <= 1e-12 * (1.0 + y.abs()), "{label}: a[{i}] {x} vs {y}");
        }
        check_rows(&format!("{label} stages {mode}"), &got, &want);
    }
    let got = replay(runs[0].0, dir, label, "bundle", &bundle_bytes(&inp));
    check_rows(&format!("{label} bundle"), &got, &want);
}

#[test]
fn host_replay_of_the_device_kernels_matches_the_cpu_model() {
    let Some(cc) = compiler() else {
        // Straight to the process's stderr, past the test harness's
        // capture, so that the run (and .ci/run's report) shows the skip.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "kernel_replay: skipped (no C++ compiler: c++, g++ or clang++)"
        );
        return;
    };
    let dir = std::env::temp_dir().join(format!("matfree-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (exe, warp) = (build(cc, &dir, false), build(cc, &dir, true));
    check_erfcx(&exe, &dir);
    check_exp(&exe, &dir);
    #[cfg(feature = "cuda")]
    check_layout(&exe, &dir);
    // The seed shape (r = 20), then r = 4, 33 and 64 above the warp width,
    // r = 21 with 35 side sums (more than a warp's lanes: the dense tiles'
    // dense_sides past lane 31), and each basis absent in turn.
    let shapes = [
        (300, 14, 12, 10, 8),
        (200, 3, 2, 1, 1),
        (120, 3, 2, 20, 11),
        (60, 3, 2, 40, 22),
        (120, 3, 2, 3, 16),
    ];
    let absent = [(100, 3, 2, 0, 5), (100, 3, 2, 6, 0)];
    // Each problem through both Stage-2 kernels, then again with fewer rows
    // through the warp emulation (32 host threads a row: slow).
    let both: &[(&Path, &str)] = &[(&exe, ""), (&exe, "raw")];
    for (runs, rows) in [(both, None), (&[(&*warp, "raw"), (&*warp, "dense")][..], Some(24))] {
        for (k, (n, p_m, p_g, p_h, p_w)) in shapes.into_iter().chain(absent).enumerate() {
            let cfg = GeneratorConfig {
                n: rows.unwrap_or(n),
                p_m,
                p_g,
                p_h,
                p_w,
                s_f: if k == 0 { 1.0 } else { 0.8 },
                seed: 1 + k as u64,
            };
            let g = generate(cfg).unwrap();
            check_problem(runs, &dir, &format!("r{}-{k}", 2 + p_h + p_w), &g);
        }
        check_problem(runs, &dir, "non-monotone", &non_monotone());
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// The replay's `mode` (erfcx, layout) on one array of values: its one
/// array of results.
fn replay_values(exe: &Path, dir: &Path, mode: &str, values: &[f64]) -> Vec<f64> {
    let mut bytes = Vec::new();
    put(&mut bytes, values);
    let (input, output) = (dir.join(format!("{mode}-in.bin")), dir.join(format!("{mode}-out.bin")));
    std::fs::write(&input, bytes).unwrap();
    let status = Command::new(exe)
        .arg(&input)
        .arg(&output)
        .args(["-", mode])
        .status()
        .unwrap();
    assert!(status.success(), "replay {mode} failed");
    read_arrays(&output).swap_remove(0)
}

/// The kernels' erfcx (basis.cuh: CUDA's polynomial with one division,
/// the asymptotic series past 27.25) against the CPU's (Cody's rational
/// approximations) on a fine grid, at the switch, far out and at the
/// specials: within 4 ulps (NaN to NaN).
fn check_erfcx(exe: &Path, dir: &Path) {
    use matfree::bms::numerics::probit::erfcx;
    let mut xs: Vec<f64> = (0..=4500).map(|k| k as f64 * 0.01).collect();
    let at = 27.25f64;
    xs.extend([
        1e-300,
        1e-8,
        0.46875,
        4.0,
        at.next_down(),
        at,
        at.next_up(),
        1e3,
        1e10,
        1e150,
        f64::INFINITY,
        f64::NAN,
    ]);
    let got = &replay_values(exe, dir, "erfcx", &xs);
    for (x, g) in xs.iter().zip(got) {
        let want = erfcx(*x);
        assert!(
            (g - want).abs() <= 4.0 * f64::EPSILON * want || (want.is_nan() && g.is_nan()),
            "erfcx({x}): kernels {g:e}, CPU {want:e}"
        );
    }
}

/// The shared memory the host gives a raw kernel's warp (rows.rs:
/// raw_row_doubles) against what the kernel lays out in it (bms_row_raw.cu:
/// raw_row_doubles), dense and scattered, over widths past the warp's; and
/// the host's choice of dense kernel (rows.rs: dense_kernel) against the
/// kernels' (dense_tiles), which the replay's own choice takes.
#[cfg(feature = "cuda")]
fn check_layout(exe: &Path, dir: &Path) {
    use matfree::bms::device::{dense_kernel, raw_row_doubles};
    let mut shapes = Vec::new();
    // Every third width, and each side of the dense kernels' bounds.
    for r in (1..=70).step_by(3).chain([22, 23, 30, 31]) {
        for p_w in [0, 1, 8, 21] {
            for tile in [1, 9, 14, 27, 32] {
                for dense in [false, true] {
                    shapes.push((r, p_w, tile, dense));
                }
            }
        }
    }
    let flat: Vec<f64> = shapes
        .iter()
        .flat_map(|&(r, p_w, tile, dense)| [r as f64, p_w as f64, tile as f64, f64::from(u8::from(dense))])
        .collect();
    let got = &replay_values(exe, dir, "layout", &flat);
    assert_eq!(got.len(), 2 * shapes.len());
    for (&(r, p_w, tile, dense), g) in shapes.iter().zip(got.chunks_exact(2)) {
        let want = raw_row_doubles(r, p_w, tile, dense);
        assert_eq!(g[0], want as f64, "r = {r}, p_w = {p_w}, tile {tile}, dense {dense}");
        let tiles = match dense_kernel(r) {
            Some("bms_row_dense3") => 3.0,
            Some("bms_row_dense4") => 4.0,
            None => 0.0,
            Some(k) => panic!("r = {r}: unknown dense kernel {k}"),
        };
        assert_eq!(g[1], tiles, "r = {r}: the dense kernel's tiles");
    }
}

/// The kernels' exp (basis.cuh: exp_c, CUDA's with its constants in
/// constant memory) against the CPU's on a grid over [-750, 710], where the
/// result turns subnormal, where it overflows and at the specials: within
/// 2 ulps of the result (each is within an ulp of the exact value).
fn check_exp(exe: &Path, dir: &Path) {
    let mut xs: Vec<f64> = (0..=146_000).map(|k| -750.0 + k as f64 * 0.01).collect();
    xs.extend((0..=2000).map(|k| -1e-3 + k as f64 * 1e-6));
    xs.extend([
        -745.2,
        -745.13,
        -708.4,
        -708.39,
        709.78,
        709.79,
        1e-300,
        -1e-300,
        -0.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ]);
    let got = &replay_values(exe, dir, "exp", &xs);
    for (x, g) in xs.iter().zip(got) {
        let want = x.exp();
        let ulp = (want.next_up() - want).max(f64::from_bits(1));
        assert!(
            (g - want).abs() <= 2.0 * ulp || g == &want || (want.is_nan() && g.is_nan()),
            "exp({x}): kernels {g:e}, CPU {want:e}"
        );
    }
}

/// tests/gpu_bms.rs's non-monotone calibrations: a link deviation of slope
/// -2 outside its knots and b = 0, so F rises only between the knots and
/// several rows find their root only after bracketing.
fn non_monotone() -> Generated {
    use matfree::bms::{Bases, BmsData, BmsModel};
    use std::sync::Arc;
    let link = CubicBasis::uniform(-2.0, 2.0, 2).unwrap();
    let bw = -2.0 / link.segment(0)[0][1];
    let model = BmsModel::new(Bases::new(None, Some(link), 1.0).unwrap(), 1, 1).unwrap();
    let qs: Vec<f64> = (0..30).map(|k| -1.0 + 0.1 * k as f64).collect();
    let n = qs.len();
    let designs = matfree::bms::marginal_slope_designs(n, 1, 1, qs, vec![1.0; n]).unwrap();
    let data = BmsData::new(Arc::new(designs), vec![0.3; n], vec![1.0; n], vec![1.0; n]).unwrap();
    Generated {
        model,
        data,
        beta: vec![1.0, 0.0, bw, 0.0],
        intercept: vec![],
    }
}
