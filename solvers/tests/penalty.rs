//! Penalties as mgcv has them, against independent oracles: overlapping
//! (tensor-product) blocks, whose log|S_lambda|_+ and its derivatives in
//! rho = ln lambda have a closed form through the marginals' eigenvalues,
//! checked at lambdas from 1e-8 to 1e8 each (ratios up to 1e16); a chain of
//! overlapping blocks against a dense eigen computation and central
//! differences; identifiability constraints against a Lagrange-multiplier
//! solve.
// Index loops read like the formulas they implement.
#![allow(clippy::needless_range_loop)]

mod common;

use common::{eigenvalues, inverse, second_difference, Rng};
use matfree_solvers::{Constraint, LogPseudoDet, Penalty, PenaltyBlock};

/// The lambdas every block takes, independently of the others.
const GRID: [f64; 5] = [1e-8, 1e-4, 1.0, 1e4, 1e8];

fn identity(k: usize) -> Vec<f64> {
    (0..k * k).map(|i| f64::from(i / k == i % k)).collect()
}

/// The Kronecker product of row-major a (na x na) and b (nb x nb).
fn kron(a: &[f64], na: usize, b: &[f64], nb: usize) -> Vec<f64> {
    let n = na * nb;
    let mut out = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            out[i * n + j] = a[(i / nb) * na + j / nb] * b[(i % nb) * nb + j % nb];
        }
    }
    out
}

/// The marginal's eigenvalues, its null space set to exactly zero (what
/// an exact computation of a difference penalty's spectrum gives).
fn spectrum(k: usize, s: &[f64]) -> Vec<f64> {
    let e = eigenvalues(k, s);
    let top = e.iter().fold(0.0f64, |m, v| m.max(*v));
    e.into_iter().map(|v| if v > 1e-10 * top { v } else { 0.0 }).collect()
}

/// The closed form for `sum_k lambda_k (I (x) .. S_k .. (x) I)`: its
/// eigenvalues are `sum_k lambda_k e_k[i_k]` over every index tuple, so
/// with `x_k = lambda_k e_k / sum` per positive eigenvalue, log|S|_+ =
/// sum ln(sum), the gradient sum x_k and the Hessian sum (delta_kl x_k -
/// x_k x_l), each term computed from the eigenvalues alone.
fn tensor_oracle(spectra: &[Vec<f64>], lambda: &[f64]) -> (LogPseudoDet, usize) {
    let m = spectra.len();
    let mut out = LogPseudoDet {
        value: 0.0,
        gradient: vec![0.0; m],
        hessian: vec![0.0; m * m],
    };
    let total: usize = spectra.iter().map(|s| s.len()).product();
    let mut rank = 0;
    for flat in 0..total {
        let (mut rest, mut terms) = (flat, vec![0.0; m]);
        for k in (0..m).rev() {
            terms[k] = lambda[k] * spectra[k][rest % spectra[k].len()];
            rest /= spectra[k].len();
        }
        let sum: f64 = terms.iter().sum();
        if sum == 0.0 {
            continue;
        }
        rank += 1;
        out.value += sum.ln();
        let x: Vec<f64> = terms.iter().map(|t| t / sum).collect();
        for k in 0..m {
            out.gradient[k] += x[k];
            for l in 0..m {
                out.hessian[k * m + l] += if k == l { x[k] * (1.0 - x[k]) } else { -x[k] * x[l] };
            }
        }
    }
    (out, rank)
}

/// The marginal penalty k of a tensor product of marginals `sizes`:
/// `I (x) .. S_k .. (x) I`.
fn tensor_block(sizes: &[usize], k: usize, s: &[f64]) -> Vec<f64> {
    let mut out = vec![1.0];
    let mut n = 1;
    for (j, &size) in sizes.iter().enumerate() {
        let factor = if j == k { s.to_vec() } else { identity(size) };
        out = kron(&out, n, &factor, size);
        n *= size;
    }
    out
}

/// How far `got` is from `want`: value relative to `1 + |value|`, gradient
/// and Hessian entries relative to `1 + |entry|` (they are sums of
/// fractions in [0, 1], so 1 is their natural scale).
fn errors(got: &LogPseudoDet, want: &LogPseudoDet) -> [f64; 3] {
    let rel = |a: f64, b: f64| (a - b).abs() / (1.0 + b.abs());
    let worst = |a: &[f64], b: &[f64]| a.iter().zip(b).fold(0.0f64, |m, (x, y)| m.max(rel(*x, *y)));
    [
        rel(got.value, want.value),
        worst(&got.gradient, &want.gradient),
        worst(&got.hessian, &want.hessian),
    ]
}

/// Every lambda tuple of the grid for `m` blocks.
fn grid(m: usize) -> Vec<Vec<f64>> {
    (0..GRID.len().pow(m as u32))
        .map(|mut t| {
            (0..m)
                .map(|_| {
                    let l = GRID[t % GRID.len()];
                    t /= GRID.len();
                    l
                })
                .collect()
        })
        .collect()
}

/// A tensor product's marginal penalties (second differences of `sizes`)
/// as overlapping blocks at `start`, checked against the closed form at
/// every grid point; returns the worst [value, gradient, Hessian] error.
fn check_tensor(sizes: &[usize]) -> [f64; 3] {
    let n: usize = sizes.iter().product();
    let margins: Vec<Vec<f64>> = sizes.iter().map(|&k| second_difference(k)).collect();
    let spectra: Vec<Vec<f64>> = sizes.iter().zip(&margins).map(|(&k, s)| spectrum(k, s)).collect();
    let start = 2;
    let blocks = (0..sizes.len())
        .map(|k| PenaltyBlock {
            start,
            dim: n,
            s: tensor_block(sizes, k, &margins[k]),
        })
        .collect();
    let pen = Penalty::new(n + 3, blocks).unwrap();
    assert_eq!(pen.groups(), &[(0..sizes.len()).collect::<Vec<_>>()]);
    let mut worst = [0.0f64; 3];
    for lambda in grid(sizes.len()) {
        let (want, rank) = tensor_oracle(&spectra, &lambda);
        assert_eq!(pen.rank(), rank, "{sizes:?}");
        let got = pen.log_pseudo_det_derivatives(&lambda).unwrap();
        assert_eq!(pen.log_pseudo_det(&lambda).unwrap(), got.value);
        let e = errors(&got, &want);
        assert!(
            e.iter().all(|&v| v < 1e-10),
            "{sizes:?} at {lambda:?}: errors {e:?}\n got {got:?}\nwant {want:?}"
        );
        (0..3).for_each(|i| worst[i] = worst[i].max(e[i]));
    }
    worst
}

/// (b) S_1 = A (x) I, S_2 = I (x) B with second-difference marginals:
/// log|S|_+ = sum ln(lambda_1 a_i + lambda_2 b_j) over the positive ones,
/// at all 25 lambda pairs of 1e-8..1e8. Marginals of 5 and 6 columns, and
/// of 5 and 5 and of 6 and 6: equal marginals make the sum's eigenvalues
/// a_i + a_j coincide in pairs, so no basis of the range diagonalises both
/// blocks and the dominant term's rounding meets the small one (there a
/// plain Cholesky of the sum in the range basis is off by 1.1 in the
/// gradient and 44 in the Hessian).
#[test]
fn tensor_pair_matches_closed_form_across_lambdas() {
    for sizes in [[5, 6], [5, 5], [6, 6]] {
        let worst = check_tensor(&sizes);
        assert!(worst.iter().all(|&e| e < 1e-10), "{sizes:?}: {worst:?}");
    }
}

/// (c) Marginals of different sizes (4 and 9), and three overlapping
/// blocks: three-way tensor products (3 x 4 x 5 and 4 x 4 x 4 = 60 and 64
/// columns), their eigenvalues lambda_1 a_i + lambda_2 b_j + lambda_3 c_l,
/// at all 125 lambda triples.
#[test]
fn unequal_marginals_and_three_way_tensor_match_closed_form() {
    for sizes in [vec![4, 9], vec![9, 4], vec![3, 4, 5], vec![4, 4, 4]] {
        let worst = check_tensor(&sizes);
        assert!(worst.iter().all(|&e| e < 1e-10), "{sizes:?}: {worst:?}");
    }
}

/// (a) A P-spline penalty alone has the closed form `r ln lambda +
/// log|S|_+` with gradient r and no Hessian, exactly; next to a tensor
/// pair and a full-rank block (interleaved in block order) each group
/// keeps its own closed form at every lambda of the grid.
#[test]
fn p_spline_alone_and_next_to_other_blocks() {
    let k = 8;
    let d2 = second_difference(k);
    let spec = spectrum(k, &d2);
    let alone = Penalty::new(
        k,
        vec![PenaltyBlock {
            start: 0,
            dim: k,
            s: d2.clone(),
        }],
    )
    .unwrap();
    assert_eq!((alone.ranks(), alone.rank()), (&[k - 2][..], k - 2));
    for l in GRID {
        let got = alone.log_pseudo_det_derivatives(&[l]).unwrap();
        let want: f64 = spec.iter().filter(|&&e| e > 0.0).map(|e| (l * e).ln()).sum();
        assert!(
            (got.value - want).abs() < 1e-12 * (1.0 + want.abs()),
            "{l}: {}",
            got.value
        );
        assert_eq!((got.gradient, got.hessian), (vec![(k - 2) as f64], vec![0.0]));
    }
    // Columns: 0 unpenalised, 1..9 the P-spline, 9..39 the tensor pair
    // (blocks 0 and 2), 39..42 a full-rank block.
    let (a, b) = (second_difference(5), second_difference(6));
    let full = vec![2.0, 0.5, 0.0, 0.5, 1.0, 0.25, 0.0, 0.25, 3.0];
    let blocks = vec![
        PenaltyBlock {
            start: 9,
            dim: 30,
            s: kron(&a, 5, &identity(6), 6),
        },
        PenaltyBlock {
            start: 1,
            dim: k,
            s: d2,
        },
        PenaltyBlock {
            start: 9,
            dim: 30,
            s: kron(&identity(5), 5, &b, 6),
        },
        PenaltyBlock {
            start: 39,
            dim: 3,
            s: full.clone(),
        },
    ];
    let pen = Penalty::new(42, blocks).unwrap();
    assert_eq!(pen.groups(), &[vec![1], vec![0, 2], vec![3]]);
    let spectra = [spectrum(5, &a), spectrum(6, &b)];
    let full_logdet: f64 = eigenvalues(3, &full).iter().map(|e| e.ln()).sum();
    for lambda in grid(4) {
        let (pair, pair_rank) = tensor_oracle(&spectra, &[lambda[0], lambda[2]]);
        let mut want = LogPseudoDet {
            value: (k - 2) as f64 * lambda[1].ln()
                + spec.iter().filter(|&&e| e > 0.0).map(|e| e.ln()).sum::<f64>()
                + pair.value
                + 3.0 * lambda[3].ln()
                + full_logdet,
            gradient: vec![pair.gradient[0], (k - 2) as f64, pair.gradient[1], 3.0],
            hessian: vec![0.0; 16],
        };
        for (i, bi) in [0, 2].into_iter().enumerate() {
            for (j, bj) in [0, 2].into_iter().enumerate() {
                want.hessian[bi * 4 + bj] = pair.hessian[i * 2 + j];
            }
        }
        assert_eq!(pen.rank(), k - 2 + pair_rank + 3);
        let got = pen.log_pseudo_det_derivatives(&lambda).unwrap();
        let e = errors(&got, &want);
        assert!(e.iter().all(|&v| v < 1e-10), "{lambda:?}: {e:?}");
        // The separable blocks' entries are exact.
        assert_eq!((got.gradient[1], got.gradient[3]), ((k - 2) as f64, 3.0));
        assert!((0..4).all(|j| got.hessian[4 + j] == 0.0 && got.hessian[12 + j] == 0.0));
    }
}

/// log|S|_+ of a dense symmetric matrix from its eigenvalues above 1e-10
/// of the largest.
fn dense_log_pdet(n: usize, s: &[f64]) -> (f64, usize) {
    let eig = eigenvalues(n, s);
    let top = eig.iter().fold(0.0f64, |m, e| m.max(e.abs()));
    let positive: Vec<f64> = eig.into_iter().filter(|e| *e > 1e-10 * top).collect();
    (positive.iter().map(|e| e.ln()).sum(), positive.len())
}

/// A random positive semi-definite k x k matrix of rank `rank`: G G^T.
fn random_psd(k: usize, rank: usize, rng: &mut Rng) -> Vec<f64> {
    let g: Vec<f64> = (0..k * rank).map(|_| rng.uniform() - 0.5).collect();
    (0..k * k)
        .map(|t| (0..rank).map(|c| g[(t / k) * rank + c] * g[(t % k) * rank + c]).sum())
        .collect()
}

/// Two full-rank blocks overlapping on 3 of their 8 columns (columns 0..8
/// and 5..13): not a tensor product, and they do not commute. With S_1 =
/// diag(A, 0) and S_2 = [[B11, B12], [B21, B22]] in the group's 13
/// columns, the Schur complement gives |lambda_1 S_1 + lambda_2 S_2| =
/// lambda_2^5 |B22| lambda_1^8 |A| prod_i (1 + t mu_i), t = lambda_2 /
/// lambda_1, mu the eigenvalues of A^-1/2 (B11 - B12 B22^-1 B21) A^-1/2:
/// a closed form in t (through ln_1p) from lambda-free matrices, checked
/// at all 25 lambda pairs.
#[test]
fn partial_overlap_matches_schur_closed_form() {
    let mut rng = Rng::new(5);
    let plus_ridge = |mut s: Vec<f64>| {
        (0..8).for_each(|i| s[i * 9] += 0.1);
        s
    };
    let (a, b) = (
        plus_ridge(random_psd(8, 8, &mut rng)),
        plus_ridge(random_psd(8, 8, &mut rng)),
    );
    let pen = Penalty::new(
        13,
        vec![
            PenaltyBlock {
                start: 0,
                dim: 8,
                s: a.clone(),
            },
            PenaltyBlock {
                start: 5,
                dim: 8,
                s: b.clone(),
            },
        ],
    )
    .unwrap();
    assert_eq!(pen.rank(), 13);
    // B in the group's columns: rows/columns 5..13; its parts on 0..8 and 8..13.
    let bg = |i: usize, j: usize| if i >= 5 && j >= 5 { b[(i - 5) * 8 + j - 5] } else { 0.0 };
    let b22: Vec<f64> = (0..25).map(|t| bg(8 + t / 5, 8 + t % 5)).collect();
    let b22_inv = inverse(5, &b22);
    let schur: Vec<f64> = (0..64)
        .map(|t| {
            let (i, j) = (t / 8, t % 8);
            let cross: f64 = (0..25).map(|u| bg(i, 8 + u / 5) * b22_inv[u] * bg(8 + u % 5, j)).sum();
            bg(i, j) - cross
        })
        .collect();
    let (av, avec) = matfree_solvers::symmetric_eigen(8, &a).unwrap();
    let root_inv: Vec<f64> = (0..64)
        .map(|t| {
            (0..8)
                .map(|c| avec[(t / 8) * 8 + c] * avec[(t % 8) * 8 + c] / av[c].sqrt())
                .sum()
        })
        .collect();
    let m = matmul(&matmul(&root_inv, &schur, 8, 8, 8), &root_inv, 8, 8, 8);
    // Sc is zero outside columns 5..8 (rank 3): its other generalised
    // eigenvalues are exact zeros, not rounding.
    let mu = spectrum(8, &m);
    assert_eq!(mu.iter().filter(|&&u| u > 0.0).count(), 3);
    let const_part = dense_log_pdet(5, &b22).0 + av.iter().map(|v| v.ln()).sum::<f64>();
    let mut worst = [0.0f64; 3];
    for lambda in grid(2) {
        let t = lambda[1] / lambda[0];
        let y: Vec<f64> = mu.iter().map(|&u| t * u / (1.0 + t * u)).collect();
        let curv: f64 = mu.iter().map(|&u| t * u / ((1.0 + t * u) * (1.0 + t * u))).sum();
        let shift: f64 = y.iter().sum();
        let want = LogPseudoDet {
            value: 5.0 * lambda[1].ln()
                + 8.0 * lambda[0].ln()
                + const_part
                + mu.iter().map(|u| (t * u).ln_1p()).sum::<f64>(),
            gradient: vec![8.0 - shift, 5.0 + shift],
            hessian: vec![curv, -curv, -curv, curv],
        };
        let got = pen.log_pseudo_det_derivatives(&lambda).unwrap();
        let e = errors(&got, &want);
        assert!(
            e.iter().all(|&v| v < 1e-10),
            "{lambda:?}: {e:?}\n got {got:?}\nwant {want:?}"
        );
        (0..3).for_each(|i| worst[i] = worst[i].max(e[i]));
    }
}

/// Three blocks in a chain, each overlapping the next (columns 0..8, 5..13,
/// 10..16 of 16), with null spaces: a P-spline, a random rank-5 block and a
/// random rank-4 block.
fn chain() -> Penalty {
    let mut rng = Rng::new(7);
    let blocks = vec![
        PenaltyBlock {
            start: 0,
            dim: 8,
            s: second_difference(8),
        },
        PenaltyBlock {
            start: 5,
            dim: 8,
            s: random_psd(8, 5, &mut rng),
        },
        PenaltyBlock {
            start: 10,
            dim: 6,
            s: random_psd(6, 4, &mut rng),
        },
    ];
    Penalty::new(16, blocks).unwrap()
}

/// (d) The chain's value against a dense eigen computation at moderate
/// lambdas (where the dense matrix resolves every term), its gradient
/// against central differences of the value and its Hessian against
/// central differences of the gradient, and its rank fixed at every lambda
/// of the grid.
#[test]
fn chain_matches_dense_and_central_differences() {
    let pen = chain();
    assert_eq!(pen.groups(), &[vec![0, 1, 2]]);
    let (_, rank) = dense_log_pdet(16, &pen.dense(&[1.0; 3]).unwrap());
    assert_eq!(pen.rank(), rank);
    for lambda in grid(3) {
        let got = pen.log_pseudo_det_derivatives(&lambda).unwrap();
        assert!(got.value.is_finite(), "{lambda:?}");
        assert!(
            (got.gradient.iter().sum::<f64>() - rank as f64).abs() < 1e-9,
            "{lambda:?}"
        );
    }
    let h = 1e-4;
    for lambda in [[1.0, 1.0, 1.0], [0.1, 3.0, 10.0], [5.0, 0.2, 0.7], [30.0, 30.0, 0.03]] {
        let got = pen.log_pseudo_det_derivatives(&lambda).unwrap();
        let (want, _) = dense_log_pdet(16, &pen.dense(&lambda).unwrap());
        assert!((got.value - want).abs() < 1e-11 * (1.0 + want.abs()), "{lambda:?}");
        for k in 0..3 {
            let at = |t: f64| {
                let mut l = lambda;
                l[k] *= t.exp();
                pen.log_pseudo_det_derivatives(&l).unwrap()
            };
            let (up, dn) = (at(h), at(-h));
            let fd = (up.value - dn.value) / (2.0 * h);
            assert!(
                (got.gradient[k] - fd).abs() < 1e-7,
                "{lambda:?}, k {k}: {} vs {fd}",
                got.gradient[k]
            );
            for l in 0..3 {
                let fd = (up.gradient[l] - dn.gradient[l]) / (2.0 * h);
                let g = got.hessian[l * 3 + k];
                assert!((g - fd).abs() < 1e-7, "{lambda:?}, ({l},{k}): {g} vs {fd}");
            }
        }
    }
}

/// The errors name the field, the value and the rule; nothing panics.
#[test]
fn invalid_penalties_name_field_value_and_rule() {
    let msg = |blocks: Vec<PenaltyBlock>| Penalty::new(10, blocks).unwrap_err().to_string();
    let block = |start, dim, s| PenaltyBlock { start, dim, s };
    let e = msg(vec![block(0, 6, second_difference(6)), block(2, 4, vec![0.0; 16])]);
    assert!(e.contains("blocks[1].s") && e.contains("must not be zero"), "{e}");
    let mut neg = second_difference(4);
    neg[0] -= 3.0;
    let e = msg(vec![block(0, 6, second_difference(6)), block(3, 4, neg)]);
    assert!(
        e.contains("blocks[1].s") && e.contains("eigenvalue -") && e.contains("positive semi-definite"),
        "{e}"
    );
    let e = msg(vec![block(0, 6, vec![1.0; 35])]);
    assert!(e.contains("blocks[0].s") && e.contains("35") && e.contains("36"), "{e}");
    let e = msg(vec![block(6, 6, second_difference(6))]);
    assert!(e.contains("blocks[0].start") && e.contains("p = 10"), "{e}");
    let e = msg(vec![block(0, 0, vec![])]);
    assert!(e.contains("blocks[0].dim") && e.contains(">= 1"), "{e}");
    let pen = chain();
    let e = pen
        .log_pseudo_det_derivatives(&[1.0, 0.0, 1.0])
        .unwrap_err()
        .to_string();
    assert!(e.contains("lambda[1]") && e.contains("> 0"), "{e}");
    let e = pen.log_pseudo_det_derivatives(&[1.0; 2]).unwrap_err().to_string();
    assert!(e.contains("lambda") && e.contains('2') && e.contains('3'), "{e}");
}

/// Hat functions (linear B-splines) on k equally spaced knots of [0, 1]:
/// the rows sum to one, so the basis spans the constant.
fn hat_design(xs: &[f64], k: usize) -> Vec<f64> {
    xs.iter()
        .flat_map(|&x| (0..k).map(move |j| (1.0 - (x * (k - 1) as f64 - j as f64).abs()).max(0.0)))
        .collect()
}

fn matmul(a: &[f64], b: &[f64], n: usize, m: usize, r: usize) -> Vec<f64> {
    (0..n * r)
        .map(|t| (0..m).map(|j| a[(t / r) * m + j] * b[j * r + t % r]).sum())
        .collect()
}

fn transpose(a: &[f64], n: usize, m: usize) -> Vec<f64> {
    (0..n * m).map(|t| a[(t % n) * m + t / n]).collect()
}

/// Sum-to-zero on a P-spline: C Z = 0, Z^T Z = I, and Z^T S Z has rank
/// k - 2 with a null space of dimension 1 (the constant drops out).
#[test]
fn sum_to_zero_basis_and_penalty_null_space() {
    let (n, k) = (200, 10);
    let mut rng = Rng::new(3);
    let xs: Vec<f64> = (0..n).map(|_| rng.uniform()).collect();
    let x = hat_design(&xs, k);
    let con = Constraint::sum_to_zero(&x, n, k).unwrap();
    assert_eq!((con.dim(), con.n_constraints(), con.reduced_dim()), (k, 1, k - 1));
    let z = con.basis();
    let c: Vec<f64> = (0..k).map(|j| (0..n).map(|i| x[i * k + j]).sum()).collect();
    let cz = matmul(&c, z, 1, k, k - 1);
    let scale = c.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    assert!(cz.iter().all(|v| v.abs() < 1e-13 * scale), "{cz:?}");
    let ztz = matmul(&transpose(z, k, k - 1), z, k - 1, k, k - 1);
    let eye = identity(k - 1);
    assert!(ztz.iter().zip(&eye).all(|(a, b)| (a - b).abs() < 1e-14));
    let xz = con.apply_to_design(&x, n).unwrap();
    assert!(matmul(&vec![1.0; n], &xz, 1, n, k - 1)
        .iter()
        .all(|v| v.abs() < 1e-12 * n as f64));
    let zsz = con.apply_to_penalty(&second_difference(k)).unwrap();
    let (_, rank) = dense_log_pdet(k - 1, &zsz);
    assert_eq!(rank, k - 2, "null space of Z^T S Z: dimension {}", k - 1 - rank);
    // It is a valid penalty block with that rank.
    let pen = Penalty::new(
        k - 1,
        vec![PenaltyBlock {
            start: 0,
            dim: k - 1,
            s: zsz,
        }],
    )
    .unwrap();
    assert_eq!(pen.ranks(), &[k - 2]);
}

/// Solve a dense square system by the test's Gauss-Jordan inverse.
fn solve(n: usize, a: &[f64], b: &[f64]) -> Vec<f64> {
    let inv = inverse(n, a);
    (0..n).map(|i| (0..n).map(|j| inv[i * n + j] * b[j]).sum()).collect()
}

/// Penalised least squares with the absorbed constraint equals the dense
/// constrained solve of the KKT system `[[X^T X + lambda S, C^T], [C, 0]]`,
/// and Z (Z^T A Z)^-1 Z^T equals the KKT inverse's leading block (the
/// constrained covariance), on random data with two constraints.
#[test]
fn absorbed_constraint_matches_lagrange_solve() {
    let (n, p, m, lambda) = (120, 9, 2, 0.7);
    let mut rng = Rng::new(11);
    let x: Vec<f64> = (0..n * p).map(|_| rng.uniform() - 0.5).collect();
    let y: Vec<f64> = (0..n).map(|_| rng.uniform()).collect();
    let c: Vec<f64> = (0..m * p).map(|_| rng.uniform() - 0.5).collect();
    let s = second_difference(p);
    let xt = transpose(&x, n, p);
    let mut a = matmul(&xt, &x, p, n, p);
    a.iter_mut().zip(&s).for_each(|(ai, si)| *ai += lambda * si);
    let xty = matmul(&xt, &y, p, n, 1);
    // The absorbed fit.
    let con = Constraint::new(&c, m, p).unwrap();
    let r = p - m;
    let xz = con.apply_to_design(&x, n).unwrap();
    let zsz = con.apply_to_penalty(&s).unwrap();
    let xzt = transpose(&xz, n, r);
    let mut at = matmul(&xzt, &xz, r, n, r);
    at.iter_mut().zip(&zsz).for_each(|(ai, si)| *ai += lambda * si);
    let bt = solve(r, &at, &matmul(&xzt, &y, r, n, 1));
    let beta = con.expand_coefficients(&bt).unwrap();
    let cov = con.expand_covariance(&inverse(r, &at)).unwrap();
    // The KKT system.
    let q = p + m;
    let mut kkt = vec![0.0; q * q];
    for i in 0..p {
        for j in 0..p {
            kkt[i * q + j] = a[i * p + j];
        }
        for j in 0..m {
            kkt[i * q + p + j] = c[j * p + i];
            kkt[(p + j) * q + i] = c[j * p + i];
        }
    }
    let mut rhs = xty.clone();
    rhs.extend(vec![0.0; m]);
    let want = solve(q, &kkt, &rhs);
    let scale = want[..p].iter().fold(0.0f64, |mx, v| mx.max(v.abs()));
    for i in 0..p {
        assert!(
            (beta[i] - want[i]).abs() < 1e-10 * scale,
            "beta[{i}] {} vs {}",
            beta[i],
            want[i]
        );
    }
    let cb = matmul(&c, &beta, m, p, 1);
    assert!(cb.iter().all(|v| v.abs() < 1e-12 * scale), "{cb:?}");
    let kinv = inverse(q, &kkt);
    let vscale = cov.iter().fold(0.0f64, |mx, v| mx.max(v.abs()));
    for i in 0..p {
        for j in 0..p {
            assert!(
                (cov[i * p + j] - kinv[i * q + j]).abs() < 1e-10 * vscale,
                "cov[{i},{j}]"
            );
        }
    }
}

/// Constraint errors name the field, the value and the rule.
#[test]
fn invalid_constraints_name_field_value_and_rule() {
    let e = Constraint::new(&[1.0, 2.0, 3.0], 0, 3).unwrap_err().to_string();
    assert!(e.contains("m = 0") && e.contains("1..p"), "{e}");
    let e = Constraint::new(&[1.0; 9], 3, 3).unwrap_err().to_string();
    assert!(e.contains("m = 3"), "{e}");
    let e = Constraint::new(&[1.0; 5], 2, 3).unwrap_err().to_string();
    assert!(e.contains('c') && e.contains('5') && e.contains('6'), "{e}");
    let e = Constraint::new(&[1.0, f64::NAN, 0.0], 1, 3).unwrap_err().to_string();
    assert!(e.contains("c[0,1]") && e.contains("finite"), "{e}");
    let e = Constraint::new(&[1.0, 2.0, 3.0, 2.0, 4.0, 6.0], 2, 3)
        .unwrap_err()
        .to_string();
    assert!(e.contains("linearly independent"), "{e}");
    let centred = [1.0, -1.0, -1.0, 1.0];
    let e = Constraint::sum_to_zero(&centred, 2, 2).unwrap_err().to_string();
    assert!(e.contains("design column sums") && e.contains("already meets"), "{e}");
    let con = Constraint::new(&[1.0, 1.0, 1.0], 1, 3).unwrap();
    let e = con.apply_to_design(&[1.0; 5], 2).unwrap_err().to_string();
    assert!(e.contains("design") && e.contains('5') && e.contains('6'), "{e}");
    assert!(con.expand_coefficients(&[1.0; 3]).is_err());
    assert!(con.expand_covariance(&[1.0; 9]).is_err());
    assert!(con.apply_to_penalty(&[1.0; 4]).is_err());
}
