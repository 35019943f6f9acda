//! The GLM's device kernels checked without a GPU: `kernels/glm_family.cuh`
//! and `kernels/glm.cu` compiled as C++ (`tests/replay/shim.h` stands in for
//! the CUDA built-ins, `tests/replay/glm_driver.cpp` launches them a block
//! of one thread at a time) and run on every family and link
//! (`tests/common/glm_cases.rs`: rows into the tails, prior weights,
//! offsets, trials, a scale). Each row's value, gradient, Hessian and
//! third-derivative weights must equal the CPU's `GlmRows` (divided by phi,
//! as `ScaledRows` does) to 1e-14 relative (the formulas are the CPU's, and
//! the host's libm serves both: they agree to the bit but for a few Gamma
//! rows, within 4e-16, where the compilers order a product differently); the joint gradient, value
//! and REML traces the CPU's `RowObjective` to 1e-12 of their scale; three
//! stage sizes must give the same bits; rows outside the domain must be
//! counted and the first named. The tensor-core paths and cuBLAS are a
//! GPU run's (`tests/gam_device.rs`). Skipped, with a message, where no C++
//! compiler is found.

#[path = "common/glm_cases.rs"]
mod glm_cases;

use std::path::{Path, PathBuf};
use std::process::Command;

use glm_cases::{case, families, worst, Case};
use matfree::gam::{Distribution, Family, Link};
use matfree::solvers::{CpuBackend, Objective};

/// Rows a block takes in the replay (the device's smallest block).
const ROWS_PER_BLOCK: usize = 256;

fn compiler() -> Option<&'static str> {
    ["c++", "g++", "clang++"].into_iter().find(|cc| {
        Command::new(cc)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

fn build(cc: &str, dir: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = dir.join("glm_replay");
    let status = Command::new(cc)
        .args(["-O1", "-std=c++17", "-o"])
        .arg(&exe)
        .arg("-I")
        .arg(root.join("kernels"))
        .arg("-I")
        .arg(root.join("tests/replay"))
        .arg(root.join("tests/replay/glm_driver.cpp"))
        .status()
        .unwrap();
    assert!(status.success(), "{cc} could not compile the GLM kernels as C++");
    exe
}

/// The replay binary in a fresh directory, or `None` (with a message)
/// without a C++ compiler.
fn replay_binary(test: &str) -> Option<(PathBuf, PathBuf)> {
    let Some(cc) = compiler() else {
        println!("{test}: skipped: no C++ compiler");
        return None;
    };
    let dir = std::env::temp_dir().join(format!("matfree-glm-replay-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    Some((build(cc, &dir), dir))
}

fn put(out: &mut Vec<u8>, values: &[f64]) {
    out.extend((values.len() as u64).to_le_bytes());
    values.iter().for_each(|v| out.extend(v.to_le_bytes()));
}

fn codes(f: Family) -> (f64, f64) {
    let d = Distribution::ALL.iter().position(|d| *d == f.distribution()).unwrap();
    let links = [
        Link::Logit,
        Link::Probit,
        Link::Cloglog,
        Link::Log,
        Link::Identity,
        Link::Inverse,
    ];
    (d as f64, links.iter().position(|l| *l == f.link()).unwrap() as f64)
}

/// The driver's outputs (see tests/replay/glm_driver.cpp).
struct Replayed {
    neglog: Vec<f64>,
    grad: Vec<f64>,
    hess: Vec<f64>,
    rows_sums: Vec<f64>,
    value_sums: Vec<f64>,
    third: Vec<f64>,
    traces: Vec<f64>,
    firsts: Vec<f64>,
}

/// Run the kernels on a case with `stage` rows staged at a time.
fn run(exe: &Path, dir: &Path, c: &Case, stage: usize) -> Replayed {
    let (family, link) = codes(c.rows.family());
    let defaults = [
        c.rows.trials().iter().all(|v| *v == 1.0),
        c.rows.weights().iter().all(|v| *v == 1.0),
        c.rows.offset().iter().all(|v| *v == 0.0),
    ];
    let given: usize = defaults.iter().enumerate().map(|(k, d)| (!d as usize) << k).sum();
    let m = c.directions.len();
    let mut bytes = Vec::new();
    let head = [
        c.n as f64,
        c.p as f64,
        family,
        link,
        1.0 / c.phi,
        m as f64,
        given as f64,
        ROWS_PER_BLOCK as f64,
    ];
    put(&mut bytes, &head);
    put(&mut bytes, &c.x);
    put(&mut bytes, &c.beta);
    put(&mut bytes, c.rows.y());
    for (column, default) in [c.rows.trials(), c.rows.weights(), c.rows.offset()]
        .iter()
        .zip(defaults)
    {
        put(&mut bytes, if default { &[] } else { column });
    }
    put(&mut bytes, &c.directions.concat());
    put(&mut bytes, &c.factor);
    let input = dir.join(format!("in-{}-{stage}.bin", c.name));
    let output = dir.join(format!("out-{}-{stage}.bin", c.name));
    std::fs::write(&input, bytes).unwrap();
    let status = Command::new(exe)
        .arg(&input)
        .arg(&output)
        .arg(stage.to_string())
        .status()
        .unwrap();
    assert!(status.success(), "{}: the replay failed", c.name);
    let mut arrays = read_arrays(&output).into_iter();
    let mut next = || arrays.next().unwrap();
    let (neglog, grad, hess, rows_sums, value_sums) = (next(), next(), next(), next(), next());
    let (third, _third_sums, traces, firsts) = (next(), next(), next(), next());
    Replayed {
        neglog,
        grad,
        hess,
        rows_sums,
        value_sums,
        third,
        traces,
        firsts,
    }
}

fn read_arrays(path: &Path) -> Vec<Vec<f64>> {
    let bytes = std::fs::read(path).unwrap();
    let (mut arrays, mut at) = (Vec::new(), 0);
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

/// Each row's value, gradient, Hessian and third-derivative weights equal
/// the CPU's at the same theta (a one-column design, x_i = theta_i and
/// beta = 1, so that both sides have theta to the bit), for every family
/// and link, with and without weights, offsets and trials.
#[test]
fn replayed_rows_equal_the_cpu_rows() {
    let Some((exe, dir)) = replay_binary("rows") else {
        return;
    };
    for (k, family) in families().into_iter().enumerate() {
        for full in [true, false] {
            let mut c = case(family, 1000, 1, full, 100 + k as u64);
            c.directions = vec![vec![0.7], vec![-1.3]];
            c.factor = vec![1.1];
            let got = run(&exe, &dir, &c, 128);
            let theta: Vec<f64> = (0..c.n).map(|i| c.x[i]).collect();
            let [v, g, h] = c.rows_at(&theta);
            let dtheta: Vec<Vec<f64>> = c
                .directions
                .iter()
                .map(|d| theta.iter().map(|t| t * d[0]).collect())
                .collect();
            let t = c.third_at(&theta, &dtheta);
            let errors = [
                worst(&got.neglog, &v, 1e-300),
                worst(&got.grad, &g, 1e-300),
                worst(&got.hess, &h, 1e-300),
                worst(&got.third, &t, 1e-300),
            ];
            println!("{}: value, gradient, Hessian, third {errors:?}", c.name);
            assert!(errors.iter().all(|e| *e <= 1e-14), "{}: {errors:?}", c.name);
            assert_eq!(got.rows_sums.last(), Some(&0.0), "{}: rejected rows", c.name);
        }
    }
}

/// The joint gradient and value of a pass, the value alone and REML's
/// traces equal the CPU objective's (a five-column design, four blocks of
/// rows), for every family and link.
#[test]
fn replayed_sums_equal_the_cpu_objective() {
    let Some((exe, dir)) = replay_binary("sums") else {
        return;
    };
    for (k, family) in families().into_iter().enumerate() {
        let c = case(family, 1000, 5, true, 200 + k as u64);
        let got = run(&exe, &dir, &c, 128);
        let (gradient, value, value_alone, traces) = c.cpu_joint();
        let p = c.p;
        let g_scale = gradient.iter().fold(0.0f64, |a, g| a.max(g.abs()));
        let errors = [
            worst(&got.rows_sums[..p], &gradient, g_scale),
            worst(&got.rows_sums[p..p + 1], &[value], 0.0),
            worst(&got.value_sums[..1], &[value_alone.unwrap()], 0.0),
        ];
        let scales = c.trace_scales();
        let trace_error = got
            .traces
            .iter()
            .zip(&traces)
            .zip(&scales)
            .map(|((g, w), s)| (g - w).abs() / s)
            .fold(0.0, f64::max);
        println!(
            "{}: gradient, value, value alone {errors:?}, traces {trace_error:.1e}",
            c.name
        );
        assert!(errors.iter().all(|e| *e <= 1e-12), "{}: {errors:?}", c.name);
        assert!(
            trace_error <= 1e-12,
            "{}: traces {:?} vs {traces:?}",
            c.name,
            got.traces
        );
        assert_eq!((got.rows_sums[p + 1], got.value_sums[1]), (0.0, 0.0), "{}", c.name);
    }
}

/// Every sum is the same to the bit whatever the rows staged at a time (so
/// whatever the device's shared memory).
#[test]
fn replayed_sums_do_not_depend_on_the_stage() {
    let Some((exe, dir)) = replay_binary("stage") else {
        return;
    };
    let family = Family::new(Distribution::Binomial, Link::Probit).unwrap();
    let c = case(family, 1000, 7, true, 7);
    let bits = |r: &Replayed| {
        [
            &r.neglog,
            &r.grad,
            &r.hess,
            &r.rows_sums,
            &r.value_sums,
            &r.third,
            &r.traces,
        ]
        .iter()
        .flat_map(|v| v.iter().map(|x| x.to_bits()))
        .collect::<Vec<_>>()
    };
    let want = bits(&run(&exe, &dir, &c, 128));
    for stage in [4, 12, 36] {
        assert!(
            bits(&run(&exe, &dir, &c, stage)) == want,
            "stage {stage} differs from 128"
        );
    }
}

/// Rows outside the domain (a Poisson identity link's eta <= 0) are
/// counted, each block names its first, and the value pass counts them too,
/// as the CPU rejects the point.
#[test]
fn replayed_rows_outside_the_domain_are_counted_and_named() {
    let Some((exe, dir)) = replay_binary("domain") else {
        return;
    };
    let family = Family::new(Distribution::Poisson, Link::Identity).unwrap();
    let mut c = case(family, 1000, 1, true, 11);
    for bad in [17, 300, 301] {
        c.x[bad] = -0.5 - c.rows.offset()[bad];
    }
    let got = run(&exe, &dir, &c, 128);
    let p = c.p;
    assert_eq!(got.rows_sums[p + 1], 3.0);
    assert_eq!(got.value_sums[1], 3.0);
    assert_eq!(got.firsts, [17.0, 300.0, -1.0, -1.0]);
    let objective = c.objective();
    let cpu = Objective::<CpuBackend>::evaluate(&objective, &c.beta).unwrap();
    assert!(cpu.is_none(), "the CPU rejects the point too");
}
