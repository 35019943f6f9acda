//! Gauss-Legendre and Gauss-Kronrod rules and an adaptive composite
//! Gauss-Kronrod integrator for small vector-valued integrands.

use std::mem::MaybeUninit;
use std::sync::OnceLock;

use crate::dispatch::by_cpu;

/// Most panels one [`adaptive`] call examines: a bound on its work where
/// the tolerance cannot be met (rounding noise above it). The BMS
/// integrands take at most 8 a call at the seed and fit shapes (depth 2),
/// and a kink about 2 a level, so 1,000 still resolves one down to the
/// depth cap. At 100,000 (before), cells whose cubics cancel (issue 38, see
/// `cells::SHIFT_ABOVE`) took 1.7 million panels for one row's intercept.
const MAX_PANELS: usize = 1_000;

thread_local! {
    /// Panels the adaptive rule has evaluated on this thread.
    static PANELS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Panels the adaptive Gauss-Kronrod rule has evaluated on the calling
/// thread so far (21 integrand values each): the quadrature's work, which
/// tests bound without timing anything.
pub fn panels_evaluated() -> u64 {
    PANELS.with(|p| p.get())
}

/// The 21-point Gauss-Kronrod rule on [-1, 1] and its embedded 10-point
/// Gauss rule (QUADPACK's qk21 table): (node, Kronrod weight, Gauss weight,
/// zero where the node is not a Gauss node) for the nodes x >= 0; the rule
/// is symmetric. Exact for polynomials of degree 31 (Kronrod) and 19
/// (Gauss). Both the CPU and the device integrate with the Kronrod rule and
/// estimate its error from the Gauss rule, which reuses 10 of its 21
/// values. The device holds the same literals (GK21 in
/// kernels/bms_stage1/quadrature.cuh; a test below compares them bitwise).
const KRONROD_21: [[f64; 3]; 11] = [
    [0.0, 0.1494455540029169, 0.0],
    [0.14887433898163122, 0.14773910490133849, 0.29552422471475287],
    [0.2943928627014602, 0.14277593857706009, 0.0],
    [0.4333953941292472, 0.13470921731147334, 0.26926671930999635],
    [0.5627571346686047, 0.12349197626206584, 0.0],
    [0.6794095682990244, 0.10938715880229764, 0.21908636251598204],
    [0.7808177265864169, 0.0931254545836976, 0.0],
    [0.8650633666889845, 0.07503967481091996, 0.1494513491505806],
    [0.9301574913557082, 0.054755896574351995, 0.0],
    [0.9739065285171717, 0.032558162307964725, 0.06667134430868814],
    [0.9956571630258081, 0.011694638867371874, 0.0],
];

/// Nodes, Kronrod weights and embedded Gauss weights of the 21-point
/// Gauss-Kronrod rule, ascending over [-1, 1].
pub fn gauss_kronrod_21() -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let [x, k, g] = GK21;
    (x.to_vec(), k.to_vec(), g.to_vec())
}

/// Gauss-Legendre nodes and weights on [-1, 1] for `n` points, by Newton's
/// method on the Legendre polynomial P_n.
pub fn gauss_legendre(n: usize) -> (Vec<f64>, Vec<f64>) {
    let (mut x, mut w) = (vec![0.0; n], vec![0.0; n]);
    for i in 0..n.div_ceil(2) {
        let mut z = (std::f64::consts::PI * (i as f64 + 0.75) / (n as f64 + 0.5)).cos();
        let mut dp = 1.0;
        for _ in 0..100 {
            let (mut p0, mut p1) = (1.0, z);
            for k in 2..=n {
                let p2 = ((2 * k - 1) as f64 * z * p1 - (k - 1) as f64 * p0) / k as f64;
                p0 = p1;
                p1 = p2;
            }
            // P_n' from P_n and P_{n-1}.
            dp = n as f64 * (z * p1 - p0) / (z * z - 1.0);
            let dz = p1 / dp;
            z -= dz;
            if dz.abs() < 1e-16 {
                break;
            }
        }
        x[i] = -z;
        x[n - 1 - i] = z;
        w[i] = 2.0 / ((1.0 - z * z) * dp * dp);
        w[n - 1 - i] = w[i];
    }
    if n == 1 {
        (x[0], w[0]) = (0.0, 2.0);
    }
    (x, w)
}

/// The 15-point Gauss-Kronrod rule and its embedded 7-point Gauss rule
/// (QUADPACK's qk15 table), laid out as [`KRONROD_21`]: exact for
/// polynomials of degree 22 (Kronrod) and 13 (Gauss). The CPU calibration
/// integrates with it (`calibration::adaptive_totals`): its cells are
/// mostly short, where one 21-node panel is far more than F needs, and 15
/// nodes fill two 8-wide vectors where 21 fill three.
const KRONROD_15: [[f64; 3]; 8] = [
    [0.0, 0.20948214108472782, 0.4179591836734694],
    [0.20778495500789848, 0.20443294007529889, 0.0],
    [0.4058451513773972, 0.19035057806478542, 0.3818300505051189],
    [0.5860872354676911, 0.1690047266392679, 0.0],
    [0.7415311855993945, 0.14065325971552592, 0.27970539148927664],
    [0.8648644233597691, 0.10479001032225019, 0.0],
    [0.9491079123427585, 0.06309209262997856, 0.1294849661688697],
    [0.9914553711208126, 0.022935322010529224, 0.0],
];

/// A half table (node >= 0, Kronrod weight, Gauss weight) mirrored over
/// [-1, 1] as constants: nodes ascending, Kronrod weights, Gauss weights
/// (K = 2H - 1 nodes; the Gauss nodes are the odd indices).
const fn mirrored<const H: usize, const K: usize>(half: [[f64; 3]; H]) -> [[f64; K]; 3] {
    assert!(K == 2 * H - 1);
    let mut out = [[0.0; K]; 3];
    let mut i = 0;
    while i < H {
        let [x, k, g] = half[i];
        (out[0][H - 1 + i], out[1][H - 1 + i], out[2][H - 1 + i]) = (x, k, g);
        (out[0][H - 1 - i], out[1][H - 1 - i], out[2][H - 1 - i]) = (-x, k, g);
        i += 1;
    }
    out
}

/// [`KRONROD_21`] and [`KRONROD_15`] mirrored over [-1, 1].
const GK21: [[f64; 21]; 3] = mirrored(KRONROD_21);
const GK15: [[f64; 15]; 3] = mirrored(KRONROD_15);

/// Lanes of the node arrays the panel rules pass to a [`NodeIntegrand`]:
/// the 21 Kronrod nodes padded to a multiple of 8 (the padding is the
/// panel's midpoint, its values unread), so that a vector loop over them
/// has no scalar remainder with 4 or 8 doubles a vector.
pub const KRONROD_LANES: usize = 24;

/// The 15 nodes of [`KRONROD_15`] padded the same way.
pub const KRONROD15_LANES: usize = 16;

/// The 5-point rule's nodes padded the same way.
pub const GAUSS5_LANES: usize = 8;

/// Both rules on [a, b] from the 21 values of f: the Kronrod integrals of f
/// and of |f|, and the embedded Gauss rule's integral of f.
fn apply_rule<const N: usize>(a: f64, b: f64, f: &impl Fn(f64) -> [f64; N]) -> PanelSums<N> {
    let (mid, half) = (0.5 * (a + b), 0.5 * (b - a));
    let mut values = [[0.0; KRONROD_LANES]; N];
    for i in 0..21 {
        let v = f(mid + half * GK21[0][i]);
        for k in 0..N {
            values[k][i] = v[k];
        }
    }
    sum_rule(half, &values, &GK21)
}

by_cpu! {
    /// [`apply_rule`] for an integrand that takes all K nodes of the rule
    /// `gk` (a mirrored table such as [`GK21`]) at once (`f(z, out)` writes
    /// component k at node i to `out[k][i]`; L >= K lanes, the padding the
    /// panel's midpoint), into the caller's buffer `values`: loops over the
    /// nodes that the compiler vectorises, with the integrand inlined, on
    /// the CPU's widest vectors (`dispatch`; the same bits on any, tested).
    fn apply_rule_nodes / apply_rule_nodes_avx2 / apply_rule_nodes_avx512 <const N: usize, const L: usize, const K: usize>(
        a: f64,
        b: f64,
        gk: &[[f64; K]; 3],
        f: &impl NodeIntegrand<L, N>,
        values: &mut [[f64; L]; N],
    ) -> PanelSums<N> = apply_rule_nodes_body
}

#[inline(always)]
fn apply_rule_nodes_body<const N: usize, const L: usize, const K: usize>(
    a: f64,
    b: f64,
    gk: &[[f64; K]; 3],
    f: &impl NodeIntegrand<L, N>,
    values: &mut [[f64; L]; N],
) -> PanelSums<N> {
    let (mid, half) = (0.5 * (a + b), 0.5 * (b - a));
    let z: [f64; L] = std::array::from_fn(|i| if i < K { mid + half * gk[0][i] } else { mid });
    f.eval(&z, values);
    sum_rule(half, values, gk)
}

/// An integrand evaluated at M nodes at once: `eval(z, out)` writes
/// component k at node i to `out[k][i]`. A closure is one; the hot
/// integrands (`nodes`) are types whose `eval` is always inlined, so that it
/// is compiled into the AVX2 panel rules (a closure would not be).
pub trait NodeIntegrand<const M: usize, const N: usize> {
    /// f at the nodes z.
    fn eval(&self, z: &[f64; M], out: &mut [[f64; M]; N]);
}

impl<const M: usize, const N: usize, F: Fn(&[f64; M], &mut [[f64; M]; N])> NodeIntegrand<M, N> for F {
    #[inline(always)]
    fn eval(&self, z: &[f64; M], out: &mut [[f64; M]; N]) {
        self(z, out)
    }
}

/// The Kronrod, |f| Kronrod and Gauss sums of a panel of half-width `half`
/// from f's values at the K nodes of `gk`. The Kronrod sums run in four
/// fixed lanes (nodes i = 4c + j < K - K % 4 into lane j, then the lanes
/// pairwise and the last nodes in turn), which the compiler vectorises; the
/// Gauss sum takes the odd nodes. The order is fixed, so the bits are.
#[inline(always)]
fn sum_rule<const N: usize, const L: usize, const K: usize>(
    half: f64,
    values: &[[f64; L]; N],
    gk: &[[f64; K]; 3],
) -> PanelSums<N> {
    let [_, wk, wg] = gk;
    let wk: [f64; K] = std::array::from_fn(|i| wk[i] * half);
    let body = K - K % 4;
    let (mut s, mut abs, mut check) = ([0.0; N], [0.0; N], [0.0; N]);
    for k in 0..N {
        let v = &values[k];
        let (mut sl, mut al) = ([0.0; 4], [0.0; 4]);
        for (wc, vc) in wk[..body].chunks_exact(4).zip(v[..body].chunks_exact(4)) {
            for j in 0..4 {
                sl[j] += wc[j] * vc[j];
                al[j] += wc[j] * vc[j].abs();
            }
        }
        s[k] = (sl[0] + sl[1]) + (sl[2] + sl[3]);
        abs[k] = (al[0] + al[1]) + (al[2] + al[3]);
        for i in body..K {
            s[k] += wk[i] * v[i];
            abs[k] += wk[i] * v[i].abs();
        }
        for i in (1..K).step_by(2) {
            check[k] += wg[i] * half * v[i];
        }
    }
    (s, abs, check)
}

/// The first panels of [a, b]: the whole interval, or, when it is wider than
/// 2 and away from 0, panels from the end nearest 0 outwards of widths 1, 2,
/// 4, ... (the integrands of this crate decay at least like exp(-z^2/2), so
/// their mass sits near that end and plain bisection of a tail such as
/// [4, 40] spends four levels reaching it). The nearest panel is popped first.
/// They are pushed onto `out`, filled in place: returned by value, the
/// stack's 1.4 KB were copied at every call (1.6% of a CPU row evaluation).
#[inline(always)]
fn initial_panels(a: f64, b: f64, out: &mut Panels) {
    let (edges, k, right) = initial_edges(a, b);
    for e in edges[..=k].windows(2).rev() {
        out.push(if right { (e[0], e[1], 0) } else { (e[1], e[0], 0) });
    }
}

/// The edges of [`initial_panels`] from the end nearest 0 outwards: the
/// panels are the windows of `edges[..=k]`, each (lo, hi) as is where
/// `right`, reversed otherwise.
#[inline(always)]
pub(crate) fn initial_edges(a: f64, b: f64) -> ([f64; MAX_INITIAL + 1], usize, bool) {
    let mut edges = [0.0; MAX_INITIAL + 1];
    if b - a <= 2.0 || (a < 0.0 && b > 0.0) {
        (edges[0], edges[1]) = (a, b);
        return (edges, 1, true);
    }
    let right = a >= 0.0;
    let (near, far) = if right { (a, b) } else { (b, a) };
    let (mut k, mut w) = (1, 1.0);
    edges[0] = near;
    while k < MAX_INITIAL && w < (far - near).abs() {
        edges[k] = if right { near + w } else { near - w };
        k += 1;
        w = 2.0 * w + 1.0;
    }
    edges[k] = far;
    (edges, k, right)
}

/// Most initial panels, the depth of bisection, and so the most panels a
/// depth-first bisection ever holds: the initial panels but the one being
/// split, one pending sibling a level, and the deepest pair.
const MAX_INITIAL: usize = 8;
const MAX_DEPTH: u32 = 48;
const STACK_CAP: usize = MAX_INITIAL + MAX_DEPTH as usize + 1;

/// A stack of panels (lo, hi, depth) on the stack, not the heap: the
/// quadrature runs a few times a cell at every evaluation, and allocating
/// its stack was a visible share of a CPU fit. Its slots start
/// uninitialised (zeroing all STACK_CAP of them, 1.4 KB, at every call was
/// most of what a call cost besides the integrand); `items[..len]` are
/// always written.
struct Panels {
    items: [MaybeUninit<(f64, f64, u32)>; STACK_CAP],
    len: usize,
}

impl Default for Panels {
    fn default() -> Self {
        Self {
            items: [const { MaybeUninit::uninit() }; STACK_CAP],
            len: 0,
        }
    }
}

impl Panels {
    /// Never past STACK_CAP: see its bound (the index is checked).
    fn push(&mut self, panel: (f64, f64, u32)) {
        self.items[self.len].write(panel);
        self.len += 1;
    }

    fn pop(&mut self) -> Option<(f64, f64, u32)> {
        self.len = self.len.checked_sub(1)?;
        // SAFETY: slot len was written by the push that made len + 1.
        Some(unsafe { self.items[self.len].assume_init() })
    }

    #[cfg(test)]
    fn as_slice(&self) -> Vec<(f64, f64, u32)> {
        // SAFETY: items[..len] were all written by push.
        self.items[..self.len]
            .iter()
            .map(|p| unsafe { p.assume_init() })
            .collect()
    }
}

/// The 3-point Gauss-Legendre rule, once.
pub(crate) fn gauss3() -> &'static ([f64; 3], [f64; 3]) {
    static RULE: OnceLock<([f64; 3], [f64; 3])> = OnceLock::new();
    RULE.get_or_init(|| {
        let (x, w) = gauss_legendre(3);
        (std::array::from_fn(|i| x[i]), std::array::from_fn(|i| w[i]))
    })
}

/// The 5-point Gauss-Legendre rule, once.
pub(crate) fn gauss5() -> &'static ([f64; 5], [f64; 5]) {
    static RULE: OnceLock<([f64; 5], [f64; 5])> = OnceLock::new();
    RULE.get_or_init(|| {
        let (x, w) = gauss_legendre(5);
        (std::array::from_fn(|i| x[i]), std::array::from_fn(|i| w[i]))
    })
}

/// A quick estimate of the integral of f over the finite [a, b]: the 5-point
/// Gauss rule on each of [`adaptive`]'s first panels, nearest 0 first, with
/// no error test and no bisection (the calibration's seed).
pub fn gauss5_panels<const N: usize>(a: f64, b: f64, f: &impl Fn(f64) -> [f64; N]) -> [f64; N] {
    gauss5_panels_nodes(a, b, &|z: &[f64; GAUSS5_LANES], out: &mut [[f64; GAUSS5_LANES]; N]| {
        for (i, z) in z[..5].iter().enumerate() {
            let v = f(*z);
            for k in 0..N {
                out[k][i] = v[k];
            }
        }
    })
}

by_cpu! {
    /// [`gauss5_panels`] for an integrand that takes a panel's 5 nodes at
    /// once (on the CPU's widest vectors, as [`apply_rule_nodes`]).
    pub fn gauss5_panels_nodes / gauss5_panels_avx2 / gauss5_panels_avx512 <const N: usize>(
        a: f64,
        b: f64,
        f: &impl NodeIntegrand<GAUSS5_LANES, N>,
    ) -> [f64; N] = gauss5_panels_body
}

#[inline(always)]
fn gauss5_panels_body<const N: usize>(a: f64, b: f64, f: &impl NodeIntegrand<GAUSS5_LANES, N>) -> [f64; N] {
    let (x, w) = gauss5();
    let mut out = [0.0; N];
    if b <= a {
        return out;
    }
    let (edges, k, right) = initial_edges(a, b);
    for e in edges[..=k].windows(2) {
        let (lo, hi) = if right { (e[0], e[1]) } else { (e[1], e[0]) };
        let (mid, half) = (0.5 * (lo + hi), 0.5 * (hi - lo));
        let z: [f64; GAUSS5_LANES] = std::array::from_fn(|i| if i < 5 { mid + half * x[i] } else { mid });
        let mut values = [[0.0; GAUSS5_LANES]; N];
        f.eval(&z, &mut values);
        for i in 0..5 {
            for k in 0..N {
                out[k] += w[i] * half * values[k][i];
            }
        }
    }
    out
}

/// The error of a panel's Kronrod value, estimated from d = |K - G| (the
/// 21-point Kronrod and embedded 10-point Gauss values) as QUADPACK's qk21
/// does: I min(1, 200 d / I)^1.5, with I the panel's |f| integral (qk21
/// takes the integral of |f - mean|, and floors the estimate at 50 eps I,
/// which would fail every test at the tolerances of this crate). d itself
/// measures the Gauss rule's error, far above the Kronrod rule's: accepting
/// on d bisected panels whose Kronrod value was already exact to rounding
/// (at the BMS seed shape, 17% more moment panels and 4% more calibration
/// panels, with the same errors against a tight reference). NaN stays NaN.
/// The device quadrature (kronrod_error in kernels/bms_stage1/quadrature.cuh) is the
/// same.
fn kronrod_error(d: f64, abs_integral: f64) -> f64 {
    if !(d > 0.0 && abs_integral > 0.0) {
        return d;
    }
    let r = (200.0 * d / abs_integral).min(1.0);
    abs_integral * r * r.sqrt()
}

/// The integral of a vector-valued f over the finite [a, b], by bisecting
/// until, on every panel, the 21-point Gauss-Kronrod value's estimated
/// error (`kronrod_error`) is within `rel_tol` times the largest panel
/// integral of |f| seen so far, in every component; the panel then
/// contributes its Kronrod value (QUADPACK's QAG with its 21-point key).
pub fn adaptive<const N: usize>(a: f64, b: f64, rel_tol: f64, f: &impl Fn(f64) -> [f64; N]) -> [f64; N] {
    adaptive_with(a, b, [rel_tol; N], f)
}

/// [`adaptive`] with a tolerance per component.
pub fn adaptive_with<const N: usize>(a: f64, b: f64, rel_tol: [f64; N], f: &impl Fn(f64) -> [f64; N]) -> [f64; N] {
    adaptive_bounded(a, b, rel_tol, f, &|_, _, _| [f64::INFINITY; N])
}

/// A panel is skipped when its bound is below this fraction of what an
/// accepted panel may be off by (`adaptive_bounded`).
const SKIP_FRACTION: f64 = 1e-3;

/// [`adaptive_with`] for an integrand that is at most a polynomial times
/// exp(-z^2 / 2), as every integrand of this crate is: `bound(g, lo, hi)`,
/// with g = (hi - lo) exp(-z_near^2 / 2) for a panel [lo, hi] away from 0,
/// bounds each component's |integral| on it, and a panel whose every bound
/// is below SKIP_FRACTION of its tolerance times the largest panel |f|
/// integral seen is skipped. This spares the far panels of the tails (past
/// |z| of about 9), which the initial panels reach. The device quadrature
/// (negligible in kernels/bms_stage1/quadrature.cuh) skips the same panels.
pub fn adaptive_bounded<const N: usize>(
    a: f64,
    b: f64,
    rel_tol: [f64; N],
    f: &impl Fn(f64) -> [f64; N],
    bound: &impl Fn(f64, f64, f64) -> [f64; N],
) -> [f64; N] {
    adaptive_panels(
        a,
        b,
        Tolerance::own(rel_tol, false),
        &mut |lo, hi| apply_rule(lo, hi, f),
        bound,
    )
}

/// [`adaptive_bounded`] for an integrand that takes a panel's 21 nodes at
/// once (the hot integrands: loops over the nodes vectorise). The same
/// panels and sums, so the same bits for the same integrand values.
///
/// With `shared`, every component's tolerance is relative to the largest
/// |f| integral of any component (not its own): for components of one
/// size, such as a finite cell's scaled moments ((z - c) / rho)^k E, where
/// what their users need is each moment to a fraction of rho^k times the
/// cell's mass, not the high centred moments (tiny, from cancelling
/// halves) to a fraction of themselves, which took a panel more a cell.
pub fn adaptive_bounded_nodes<const N: usize>(
    a: f64,
    b: f64,
    rel_tol: [f64; N],
    shared: bool,
    f: &impl NodeIntegrand<KRONROD_LANES, N>,
    bound: &impl Fn(f64, f64, f64) -> [f64; N],
) -> [f64; N] {
    adaptive_rule_nodes(a, b, &GK21, Tolerance::own(rel_tol, shared), f, bound)
}

/// [`adaptive_bounded_nodes`] (not shared) on the 15-point Gauss-Kronrod
/// rule ([`KRONROD_15`]), with every component's tolerance relative to at
/// least `floor` (a known lower bound of what its error matters against,
/// such as the |f| integral of the whole range that [a, b] is part of), not
/// only to the |f| integrals of [a, b]'s own panels: a stretch that carries
/// little of the whole is integrated to the whole's tolerance, and skipped
/// where its bound is below it. Held to its own size, a short stretch often
/// failed the 7-point Gauss rule's error test and was bisected (the
/// calibration's short cells took half again the panels on 15 nodes that
/// they took on 21); held to the whole, the 15-point rule takes no more
/// panels than the 21-point one.
#[inline(always)]
pub fn adaptive_bounded_nodes_from<const N: usize>(
    a: f64,
    b: f64,
    rel_tol: [f64; N],
    floor: [f64; N],
    f: &impl NodeIntegrand<KRONROD15_LANES, N>,
    bound: &impl Fn(f64, f64, f64) -> [f64; N],
) -> [f64; N] {
    let tol = Tolerance {
        floor,
        ..Tolerance::own(rel_tol, false)
    };
    adaptive_rule_nodes(a, b, &GK15, tol, f, bound)
}

/// What a panel's estimated error is held to: `rel` times the largest |f|
/// integral seen (per component, or of any component where `shared`), and
/// that never below `floor`.
#[derive(Clone, Copy)]
struct Tolerance<const N: usize> {
    rel: [f64; N],
    shared: bool,
    floor: [f64; N],
}

impl<const N: usize> Tolerance<N> {
    /// Relative to the integral's own panels alone.
    fn own(rel: [f64; N], shared: bool) -> Self {
        Self {
            rel,
            shared,
            floor: [0.0; N],
        }
    }
}

/// The adaptive bisection with the panel rule `gk` applied to f's nodes.
#[inline(always)]
fn adaptive_rule_nodes<const N: usize, const L: usize, const K: usize>(
    a: f64,
    b: f64,
    gk: &[[f64; K]; 3],
    tol: Tolerance<N>,
    f: &impl NodeIntegrand<L, N>,
    bound: &impl Fn(f64, f64, f64) -> [f64; N],
) -> [f64; N] {
    let mut values = [[0.0; L]; N];
    adaptive_panels(
        a,
        b,
        tol,
        &mut |lo, hi| apply_rule_nodes(lo, hi, gk, f, &mut values),
        bound,
    )
}

/// The panel rule's results: Kronrod, |f| Kronrod and Gauss sums.
type PanelSums<const N: usize> = ([f64; N], [f64; N], [f64; N]);

/// The adaptive bisection of [`adaptive_bounded`] over a panel rule.
#[inline(always)]
fn adaptive_panels<const N: usize>(
    a: f64,
    b: f64,
    tol: Tolerance<N>,
    rule: &mut impl FnMut(f64, f64) -> PanelSums<N>,
    bound: &impl Fn(f64, f64, f64) -> [f64; N],
) -> [f64; N] {
    let mut out = [0.0; N];
    if b <= a {
        return out;
    }
    // An explicit stack of (lo, hi, depth) instead of recursion.
    let mut stack = Panels::default();
    initial_panels(a, b, &mut stack);
    let mut panels = 0usize;
    let Tolerance {
        rel: rel_tol,
        shared,
        floor,
    } = tol;
    let mut scale = floor;
    while let Some((lo, hi, depth)) = stack.pop() {
        if negligible(lo, hi, &rel_tol, &scale, bound) {
            continue;
        }
        panels += 1;
        PANELS.with(|p| p.set(p.get() + 1));
        let (value, abs, check) = rule(lo, hi);
        for k in 0..N {
            scale[k] = scale[k].max(abs[k]);
        }
        if shared {
            let largest = scale.iter().fold(0.0f64, |m, v| m.max(*v));
            scale.fill(largest);
        }
        // Small against this panel's |f| or against the largest |f|
        // integral seen: where f is tiny its rounding noise (exp of a large
        // argument) could never meet the first test.
        let converged = (0..N)
            .all(|k| kronrod_error((value[k] - check[k]).abs(), abs[k]) <= rel_tol[k] * scale[k] + f64::MIN_POSITIVE);
        let mid = 0.5 * (lo + hi);
        // Depth and panel caps bound the work on integrands with kinks.
        if converged || depth >= MAX_DEPTH || panels > MAX_PANELS || !(mid > lo && mid < hi) {
            for k in 0..N {
                out[k] += value[k];
            }
        } else {
            stack.push((lo, mid, depth + 1));
            stack.push((mid, hi, depth + 1));
        }
    }
    out
}

/// Whether the panel [lo, hi], away from 0, cannot matter (see
/// [`adaptive_bounded`]).
#[inline(always)]
fn negligible<const N: usize>(
    lo: f64,
    hi: f64,
    rel_tol: &[f64; N],
    scale: &[f64; N],
    bound: &impl Fn(f64, f64, f64) -> [f64; N],
) -> bool {
    if lo < 0.0 && hi > 0.0 {
        return false;
    }
    let near = nearest(lo, hi);
    let b = bound((hi - lo) * (-0.5 * near * near).exp(), lo, hi);
    (0..N).all(|k| b[k] <= SKIP_FRACTION * rel_tol[k] * scale[k])
}

/// sum_k |p_k| z^k: a bound on |p| over |z| <= z.
pub fn abs_poly(p: &[f64; 4], z: f64) -> f64 {
    ((p[3].abs() * z + p[2].abs()) * z + p[1].abs()) * z + p[0].abs()
}

/// The smallest |z| over [lo, hi].
pub fn nearest(lo: f64, hi: f64) -> f64 {
    if lo <= 0.0 && hi >= 0.0 {
        0.0
    } else {
        lo.abs().min(hi.abs())
    }
}

/// The largest |z - center| over [lo, hi]: the radius a panel's bounds
/// take a cubic in z - center over (center 0: the panel's largest |z|).
pub fn radius(lo: f64, hi: f64, center: f64) -> f64 {
    (lo - center).abs().max((hi - center).abs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::f64::consts::PI;

    /// The panel rules as dispatched (AVX-512 or AVX2 where the CPU has
    /// them) against their baseline compilation, on the hot integrands over
    /// random cubic cells across the tails: the same bits.
    #[test]
    fn vector_and_baseline_panel_rules_agree_bitwise() {
        use crate::bms::model::cells::{CellJet, MOMENTS};
        use crate::bms::numerics::nodes::{Moments, Slopes};
        let mut rng = crate::rng::Rng::new(7);
        for t in 0..300 {
            let mut cubic = || std::array::from_fn(|k| rng.normal() * [3.0, 2.0, 0.5, 0.1][k]);
            let cell = CellJet {
                lo: -1.0,
                hi: 1.0,
                eta: cubic(),
                a: cubic(),
                aa: cubic(),
            };
            let (lo, hi) = (-12.0 + 0.08 * t as f64, -11.0 + 0.09 * t as f64);
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            let flat = |p: PanelSums<3>| [p.0, p.1, p.2].concat();
            for upper in [false, true] {
                let f = Slopes {
                    cell: &cell,
                    center: 0.0,
                    upper,
                };
                let (mut v1, mut v2) = ([[0.0; KRONROD_LANES]; 3], [[0.0; KRONROD_LANES]; 3]);
                let got = flat(apply_rule_nodes(lo, hi, &GK21, &f, &mut v1));
                let want = flat(apply_rule_nodes_body(lo, hi, &GK21, &f, &mut v2));
                assert_eq!(bits(&got), bits(&want), "slopes on [{lo}, {hi}]");
                let (mut u1, mut u2) = ([[0.0; KRONROD15_LANES]; 3], [[0.0; KRONROD15_LANES]; 3]);
                let got15 = flat(apply_rule_nodes(lo, hi, &GK15, &f, &mut u1));
                let want15 = flat(apply_rule_nodes_body(lo, hi, &GK15, &f, &mut u2));
                assert_eq!(bits(&got15), bits(&want15), "15-point slopes on [{lo}, {hi}]");
                #[cfg(target_arch = "x86_64")]
                if std::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU has AVX2, checked just above.
                    let got = flat(unsafe { apply_rule_nodes_avx2(lo, hi, &GK21, &f, &mut v1) });
                    assert_eq!(bits(&got), bits(&want), "AVX2 slopes on [{lo}, {hi}]");
                }
                let (got, want) = (
                    gauss5_panels_nodes(lo, hi + 4.0, &f),
                    gauss5_panels_body(lo, hi + 4.0, &f),
                );
                assert_eq!(bits(&got), bits(&want), "quick slopes on [{lo}, {}]", hi + 4.0);
            }
            let f = Moments {
                eta: &cell.eta,
                center: 0.0,
                power_center: 0.5 * (lo + hi),
                inv_scale: 2.0 / (hi - lo),
            };
            let (mut v1, mut v2) = ([[0.0; KRONROD_LANES]; MOMENTS], [[0.0; KRONROD_LANES]; MOMENTS]);
            let (g, w) = (
                apply_rule_nodes(lo, hi, &GK21, &f, &mut v1),
                apply_rule_nodes_body(lo, hi, &GK21, &f, &mut v2),
            );
            assert_eq!(
                bits(&[g.0, g.1, g.2].concat()),
                bits(&[w.0, w.1, w.2].concat()),
                "moments on [{lo}, {hi}]"
            );
        }
    }

    #[test]
    fn rule_integrates_polynomials_exactly() {
        let (x, w) = gauss_legendre(20);
        assert!((w.iter().sum::<f64>() - 2.0).abs() < 1e-14);
        // Exact to degree 2n - 1 = 39.
        for k in [2usize, 10, 38] {
            let s: f64 = x.iter().zip(&w).map(|(x, w)| w * x.powi(k as i32)).sum();
            assert!((s - 2.0 / (k as f64 + 1.0)).abs() < 1e-14, "x^{k}: {s}");
        }
    }

    /// The device kernels hold the rules as literals (GK21 and GK15 in
    /// kernels/bms_stage1/quadrature.cuh, in constant memory); they must be
    /// these rules' values bit for bit, in the order nodes, Kronrod weights,
    /// Gauss weights.
    #[test]
    fn device_kronrod_tables_are_these_rules_bitwise() {
        let src = include_str!("../../../kernels/bms_stage1/quadrature.cuh");
        let device = |name: &str| -> Vec<f64> {
            let open = format!("{name} = {{");
            let start = src.find(&open).unwrap_or_else(|| panic!("{name} in quadrature.cuh")) + open.len();
            let body = &src[start..start + src[start..].find("};").expect("the table's closing brace")];
            body.lines()
                .map(|l| l.split("//").next().unwrap())
                .flat_map(|l| l.split(','))
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(|t| t.parse::<f64>().unwrap_or_else(|e| panic!("{name} entry {t:?}: {e}")))
                .collect()
        };
        for (name, host) in [("GK21[63]", GK21.concat()), ("GK15[45]", GK15.concat())] {
            let device = device(name);
            assert_eq!(device.len(), host.len(), "{name}");
            for (i, (d, h)) in device.iter().zip(&host).enumerate() {
                assert_eq!(d.to_bits(), h.to_bits(), "{name} entry {i}: {d:e} vs {h:e}");
            }
        }
    }

    #[test]
    fn kronrod_rule_is_exact_and_embeds_the_10_point_gauss_rule() {
        let (x, wk, wg) = gauss_kronrod_21();
        assert_eq!(x.len(), 21);
        assert!(x.windows(2).all(|p| p[0] < p[1]), "ascending");
        // Exact for x^k up to degree 31, against the closed form.
        for k in 0..=31 {
            let s: f64 = x.iter().zip(&wk).map(|(x, w)| w * x.powi(k)).sum();
            let want = if k % 2 == 1 { 0.0 } else { 2.0 / (k as f64 + 1.0) };
            assert!((s - want).abs() < 2e-15, "x^{k}: {s} vs {want}");
        }
        // The Gauss weights sit on exactly the 10-point Gauss nodes.
        let (gx, gw) = gauss_legendre(10);
        let embedded: Vec<(f64, f64)> = x
            .iter()
            .zip(&wg)
            .filter(|(_, w)| **w != 0.0)
            .map(|(x, w)| (*x, *w))
            .collect();
        assert_eq!(embedded.len(), 10);
        for ((x, w), (gx, gw)) in embedded.iter().zip(gx.iter().zip(&gw)) {
            assert!((x - gx).abs() < 1e-15 && (w - gw).abs() < 1e-15, "{x} {w} vs {gx} {gw}");
        }
    }

    #[test]
    fn kronrod_15_rule_is_exact_and_embeds_the_7_point_gauss_rule() {
        let [x, wk, wg] = GK15;
        assert!(x.windows(2).all(|p| p[0] < p[1]), "ascending");
        // Exact for x^k up to degree 22, against the closed form.
        for k in 0..=22 {
            let s: f64 = x.iter().zip(&wk).map(|(x, w)| w * x.powi(k)).sum();
            let want = if k % 2 == 1 { 0.0 } else { 2.0 / (k as f64 + 1.0) };
            assert!((s - want).abs() < 2e-15, "x^{k}: {s} vs {want}");
        }
        // Not exact at degree 24 (so the table is the 15-point rule's).
        let s: f64 = x.iter().zip(&wk).map(|(x, w)| w * x.powi(24)).sum();
        assert!((s - 2.0 / 25.0).abs() > 1e-12, "x^24: {s}");
        // The Gauss weights sit on exactly the 7-point Gauss nodes, the
        // odd indices that sum_rule takes.
        let (gx, gw) = gauss_legendre(7);
        for (j, i) in (1..15).step_by(2).enumerate() {
            assert!(
                (x[i] - gx[j]).abs() < 1e-15 && (wg[i] - gw[j]).abs() < 1e-15,
                "node {i}"
            );
        }
        assert!((0..15).step_by(2).all(|i| wg[i] == 0.0));
    }

    /// A stretch of a whole integrated against the whole's size (`floor`)
    /// is as accurate as that asks, and cheaper: z^2 exp(-z^2/2) on [4.5,
    /// 40] (mass 3e-4 of the whole line's sqrt(2 pi)) to 1e-12 of the
    /// whole, where held to 1e-12 of itself it takes more panels; with a
    /// floor far above the stretch's bound it is skipped.
    #[test]
    fn a_floor_holds_a_stretch_to_the_whole_s_tolerance() {
        use crate::bms::numerics::probit::{norm_pdf, norm_sf};
        let f = |z: &[f64; KRONROD15_LANES], out: &mut [[f64; KRONROD15_LANES]; 1]| {
            for i in 0..KRONROD15_LANES {
                out[0][i] = z[i] * z[i] * (-0.5 * z[i] * z[i]).exp();
            }
        };
        let bound = |g: f64, lo: f64, hi: f64| [g * radius(lo, hi, 0.0).powi(2)];
        // integral_c^inf z^2 exp(-z^2/2) = sqrt(2 pi) (c phi(c) + Phi(-c)).
        let tail = |c: f64| (2.0 * PI).sqrt() * (c * norm_pdf(c) + norm_sf(c));
        let (whole, want) = ((2.0 * PI).sqrt(), tail(4.5) - tail(40.0));
        let count = |floor: f64| {
            let before = panels_evaluated();
            let v = adaptive_bounded_nodes_from(4.5, 40.0, [1e-12], [floor], &f, &bound)[0];
            (v, panels_evaluated() - before)
        };
        let (own, own_panels) = count(0.0);
        let (held, held_panels) = count(whole);
        assert!((own - want).abs() <= 1e-12 * want, "{own:e} vs {want:e}");
        assert!((held - want).abs() <= 1e-12 * whole, "{held:e} vs {want:e}");
        assert!(
            held_panels < own_panels,
            "{held_panels} panels held to the whole, {own_panels} alone"
        );
        let (skipped, none) = count(1e16);
        assert_eq!((skipped, none), (0.0, 0));
    }

    #[test]
    fn per_component_tolerances_keep_the_tight_component_exact() {
        // Component 0, a narrow peak, at 1e-14; component 1, smooth, at
        // 1e-6: the loose one never limits how far the tight one is refined.
        let s = 0.01;
        let f = |x: f64| [(-0.5 * (x - 0.3) * (x - 0.3) / (s * s)).exp(), (-0.5 * x * x).exp()];
        let got = adaptive_with(-1.0, 3.0, [1e-14, 1e-6], &f);
        // Both closed forms through the probit module's erfc.
        let phi = crate::bms::numerics::probit::norm_cdf;
        let root = (2.0 * std::f64::consts::PI).sqrt();
        let want0 = s * root * (1.0 - phi(-2.7 / s) - phi(-1.3 / s));
        let want1 = root * (1.0 - phi(-3.0) - phi(-1.0));
        assert!((got[0] - want0).abs() < 1e-14 * want0, "{} vs {want0}", got[0]);
        assert!((got[1] - want1).abs() < 1e-6 * want1, "{} vs {want1}", got[1]);
    }

    #[test]
    fn gauss5_panels_is_exact_to_degree_9_a_panel_and_close_on_gaussians() {
        // One panel (width <= 2): x^k, k <= 9, exactly.
        for k in 0..=9 {
            let got = gauss5_panels(0.5, 2.0, &|x: f64| [x.powi(k)])[0];
            let want = (2f64.powi(k + 1) - 0.5f64.powi(k + 1)) / (k as f64 + 1.0);
            assert!((got - want).abs() < 1e-14 * want, "x^{k}: {got} vs {want}");
        }
        // A tail split into panels 1, 2 and 4 wide: exp(-x^2/2) on [1, 8]
        // against the adaptive rule: 1.2e-6 relative (the 4-wide panel), a
        // seed's accuracy; a calibration's cells are mostly far narrower.
        let f = |x: f64| [(-0.5 * x * x).exp()];
        let (quick, exact) = (gauss5_panels(1.0, 8.0, &f)[0], adaptive(1.0, 8.0, 1e-14, &f)[0]);
        assert!((quick - exact).abs() < 2e-6 * exact, "{quick} vs {exact}");
    }

    #[test]
    fn bounded_adaptive_skips_the_far_tail_only() {
        // z^3 exp(-z^2/2) on [1, 40]: the initial panels reach z = 40, and
        // the bound |z|^3 exp(-z_near^2/2) lets the panels past z of about
        // 9 go; the integral, 3 exp(-1/2) in closed form, is unchanged.
        let calls = std::cell::Cell::new(0usize);
        let f = |z: f64| {
            calls.set(calls.get() + 1);
            [z.powi(3) * (-0.5 * z * z).exp()]
        };
        let full = adaptive_with(1.0, 40.0, [1e-14], &f)[0];
        let all = calls.replace(0);
        let bounded = adaptive_bounded(1.0, 40.0, [1e-14], &f, &|g, lo, hi| [g * radius(lo, hi, 0.0).powi(3)])[0];
        let some = calls.get();
        let want = 3.0 * (-0.5f64).exp();
        assert!((full - want).abs() <= 1e-14 * want, "{full} vs {want}");
        assert!((bounded - want).abs() <= 1e-14 * want, "{bounded} vs {want}");
        assert!(some < all, "{some} integrand values with the bound, {all} without");
        // A bound that never holds skips nothing.
        calls.set(0);
        let same = adaptive_bounded(1.0, 40.0, [1e-14], &f, &|_, _, _| [f64::INFINITY])[0];
        assert_eq!((same.to_bits(), calls.get()), (full.to_bits(), all));
    }

    #[test]
    fn adaptive_handles_peaks_and_kinks() {
        // A narrow Gaussian, exp(-x^2/(2 s^2)) on [-1, 3], and |x - 0.3| on [0, 1].
        let s = 1e-3;
        let got = adaptive(-1.0, 3.0, 1e-14, &|x: f64| {
            [(-0.5 * x * x / (s * s)).exp(), (x - 0.3).abs()]
        });
        let want0 = s * (2.0 * std::f64::consts::PI).sqrt();
        assert!((got[0] - want0).abs() < 1e-15 * want0 * 10.0, "{}", got[0]);
        let want1 = 0.5 * (1.3f64 * 1.3 + 2.7 * 2.7);
        assert!((got[1] - want1).abs() < 1e-12, "{}", got[1]);
    }

    /// Noise (a hash of x's bits, in [0, 1)) at tolerance 0: the two rules
    /// never agree, so panels are split down to the depth cap, depth first,
    /// from the most initial panels (a wide interval away from 0), until the
    /// panel cap ends it. The stack then holds up to 52 panels (a capacity
    /// of 51 fails here) against STACK_CAP = 57; the sum must stay in
    /// [0, b - a] (the Kronrod weights are positive).
    #[test]
    fn noise_drives_the_bisection_to_the_depth_cap_within_the_stack() {
        let (a, b) = (0.5, 300.0);
        let mut first = Panels::default();
        initial_panels(a, b, &mut first);
        assert_eq!(first.as_slice().len(), MAX_INITIAL);
        let noise = |x: f64| (x.to_bits().wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11) as f64 / (1u64 << 53) as f64;
        let got = adaptive(a, b, 0.0, &|x: f64| [noise(x)]);
        assert!((0.0..=b - a).contains(&got[0]), "{}", got[0]);
    }
}
