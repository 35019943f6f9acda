//! The row Hessian split across the devices of a [`GpuGroup`]: rows in
//! contiguous shards, one [`DeviceRowHessian`] per device. Every product,
//! the diagonal, the dense matrix and the joint gradient run on each shard
//! with the single-GPU kernels; the per-shard p-vectors (or p x p matrices)
//! are all-gathered and summed in shard order on every device
//! ([`GpuGroup::all_sum`]), so each device holds bitwise the same result.

use std::ops::Range;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use cudarc::driver::CudaSlice;
use matfree_solvers::{LinearOperator, Result as SolverResult, SolverError};

use super::multi::{GpuGroup, MultiGpuBackend, Replicated};
use super::row_hessian::{split_joint, DeviceRowHessian};
use super::row_objective::DeviceRowEvaluation;
use crate::designs::check_matrix;
use crate::layout::Layout;
use crate::row_hessian::{JointGradient, RowHessian};
use crate::{Error, Result};

/// Contiguous row ranges for `shards` devices, sizes differing by at most
/// one (the first `n % shards` take the extra row). Every shard gets rows.
pub fn shard_rows(n: usize, shards: usize) -> Result<Vec<Range<usize>>> {
    if shards == 0 || n < shards {
        let rule = format!("need at least one row per device ({shards} devices)");
        return Err(Error::invalid("rows to shard", n, rule));
    }
    let (base, extra) = (n / shards, n % shards);
    let mut start = 0;
    Ok((0..shards)
        .map(|d| {
            let len = base + usize::from(d < extra);
            start += len;
            start - len..start
        })
        .collect())
}

/// Per-device buffers for combining shards: each shard's partial and the
/// gathered partials of all shards.
struct Scratch {
    local: Vec<CudaSlice<f64>>,
    gathered: Vec<CudaSlice<f64>>,
}

impl Scratch {
    fn new(group: &GpuGroup, len: usize) -> Result<Self> {
        let zeros = |n: usize| {
            group
                .gpus()
                .iter()
                .map(|g| g.zeros::<f64>(n))
                .collect::<Result<Vec<_>>>()
        };
        Ok(Self {
            local: zeros(len)?,
            gathered: zeros(group.len() * len)?,
        })
    }
}

/// Fresh per-device output buffers of `len` values.
fn per_device(group: &GpuGroup, len: usize) -> Result<Vec<CudaSlice<f64>>> {
    group.gpus().iter().map(|g| g.zeros::<f64>(len)).collect()
}

/// H = sum over shards of the shard's sum_i P_i^T H_i P_i, each shard
/// resident on its own device.
pub struct ShardedRowHessian {
    group: Rc<GpuGroup>,
    layout: Layout,
    rows: Vec<Range<usize>>,
    shards: Vec<DeviceRowHessian>,
    /// The single-product scratch, allocated once so that PCG's products
    /// allocate nothing.
    scratch: Mutex<Scratch>,
}

impl ShardedRowHessian {
    /// Wrap one row Hessian per device of the group (shard d on device d,
    /// rows in shard order), all with the same layout.
    pub fn from_shards(group: Rc<GpuGroup>, shards: Vec<DeviceRowHessian>) -> Result<Self> {
        if shards.len() != group.len() {
            let rule = format!("must equal the group's device count {}", group.len());
            return Err(Error::invalid("shards", shards.len(), rule));
        }
        let layout = shards[0].layout().clone();
        for (d, (shard, gpu)) in shards.iter().zip(group.gpus()).enumerate() {
            if !Arc::ptr_eq(shard.gpu(), gpu) {
                let rule = format!("must live on the group's device {d} (ordinal {})", gpu.ordinal());
                return Err(Error::invalid(format!("shard {d} device"), shard.gpu().ordinal(), rule));
            }
            if *shard.layout() != layout {
                return Err(Error::invalid(
                    format!("shard {d} layout"),
                    format!("r = {}, p = {}", shard.layout().r(), shard.layout().p_total()),
                    "every shard must have shard 0's layout",
                ));
            }
        }
        let mut start = 0;
        let rows = shards
            .iter()
            .map(|s| {
                start += s.n();
                start - s.n()..start
            })
            .collect();
        let scratch = Mutex::new(Scratch::new(&group, layout.p_total())?);
        Ok(Self {
            group,
            layout,
            rows,
            shards,
            scratch,
        })
    }

    /// Split a CPU operator's rows over the group ([`shard_rows`]) and
    /// upload each shard to its device.
    pub fn from_cpu(group: Rc<GpuGroup>, op: &RowHessian) -> Result<Self> {
        let rr = op.layout().r() * op.layout().r();
        let shards = shard_rows(op.n(), group.len())?
            .into_iter()
            .zip(group.gpus())
            .map(|(rows, gpu)| {
                let designs = op.designs().rows(rows.clone())?;
                let hess = &op.hess()[rows.start * rr..rows.end * rr];
                DeviceRowHessian::new(gpu.clone(), op.layout().clone(), &designs, hess)
            })
            .collect::<Result<Vec<_>>>()?;
        Self::from_shards(group, shards)
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
    /// Number of rows over all shards.
    pub fn n(&self) -> usize {
        self.rows.last().map_or(0, |r| r.end)
    }
    /// The row range of each shard.
    pub fn rows(&self) -> &[Range<usize>] {
        &self.rows
    }
    /// The per-device shards.
    pub fn shards(&self) -> &[DeviceRowHessian] {
        &self.shards
    }
    /// The group it lives on.
    pub fn group(&self) -> &Rc<GpuGroup> {
        &self.group
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Scratch>> {
        self.scratch
            .lock()
            .map_err(|_| Error::Cuda("sharded row-Hessian scratch lock poisoned".into()))
    }

    /// Run `part` on every shard into its local buffer, then sum the shards
    /// in order into `out` on every device.
    fn combine(
        &self,
        len: usize,
        scratch: &mut Scratch,
        out: &mut [CudaSlice<f64>],
        mut part: impl FnMut(usize, &DeviceRowHessian, &mut CudaSlice<f64>) -> Result<()>,
    ) -> Result<()> {
        for (d, (shard, local)) in self.shards.iter().zip(scratch.local.iter_mut()).enumerate() {
            part(d, shard, local)?;
        }
        self.group.all_sum(&scratch.local, len, &mut scratch.gathered, out)
    }

    fn check_vectors(&self, vectors: &[(&str, &Replicated, usize)]) -> Result<()> {
        for &(field, x, want) in vectors {
            x.check_on(field, &self.group)?;
            let got = x.replicas()[0].len();
            if got != want {
                return Err(Error::invalid(
                    format!("{field}.len"),
                    got,
                    format!("must equal {want}"),
                ));
            }
        }
        Ok(())
    }

    /// out = H v on every device (queued; no host sync).
    pub fn hvp_into(&self, v: &Replicated, out: &mut Replicated) -> Result<()> {
        let p = self.layout.p_total();
        self.check_vectors(&[("v", v, p), ("out", out, p)])?;
        let mut s = self.lock()?;
        self.combine(p, &mut s, out.replicas_mut(), |d, shard, local| {
            shard.hvp_into(&v.replicas()[d], local)
        })
    }

    /// out = H V for k columns stored back to back.
    pub fn hvp_multi_into(&self, v: &Replicated, k: usize, out: &mut Replicated) -> Result<()> {
        let len = k * self.layout.p_total();
        self.check_vectors(&[("v", v, len), ("out", out, len)])?;
        if k == 0 {
            return Ok(());
        }
        let mut s = Scratch::new(&self.group, len)?;
        self.combine(len, &mut s, out.replicas_mut(), |d, shard, local| {
            shard.hvp_multi_into(&v.replicas()[d], k, local)
        })
    }

    /// out = diag(H) on every device.
    pub fn diagonal_into(&self, out: &mut Replicated) -> Result<()> {
        let p = self.layout.p_total();
        self.check_vectors(&[("out", out, p)])?;
        let mut s = self.lock()?;
        self.combine(p, &mut s, out.replicas_mut(), |_, shard, local| {
            shard.diagonal_into(local)
        })
    }

    /// out = H as a dense row-major p x p matrix on every device.
    pub fn dense_into(&self, out: &mut Replicated) -> Result<()> {
        let pp = self.layout.p_total() * self.layout.p_total();
        self.check_vectors(&[("out", out, pp)])?;
        let mut s = Scratch::new(&self.group, pp)?;
        self.combine(pp, &mut s, out.replicas_mut(), |_, shard, local| {
            shard.dense_into(local)
        })
    }

    /// The joint neglog and gradient from each shard's per-row values and
    /// gradients (on its device): one all-gather, one download from device 0.
    pub fn joint_gradient(&self, neglog: &[CudaSlice<f64>], grad: &[CudaSlice<f64>]) -> Result<JointGradient> {
        for (field, given) in [("neglog shards", neglog.len()), ("grad shards", grad.len())] {
            if given != self.shards.len() {
                let rule = format!("must equal the shard count {}", self.shards.len());
                return Err(Error::invalid(field, given, rule));
            }
        }
        let len = self.layout.p_total() + 1;
        let mut s = Scratch::new(&self.group, len)?;
        let mut out = per_device(&self.group, len)?;
        self.combine(len, &mut s, &mut out, |d, shard, local| {
            shard.joint_gradient_into(&neglog[d], &grad[d], local)
        })?;
        Ok(split_joint(self.group.gpus()[0].download(&out[0])?))
    }

    /// Host convenience: the joint gradient from host per-row values.
    pub fn joint_gradient_host(&self, neglog: &[f64], grad: &[f64]) -> Result<JointGradient> {
        let r = self.layout.r();
        check_matrix("neglog", neglog, self.n(), 1)?;
        check_matrix("grad", grad, self.n(), r)?;
        let upload = |x: &[f64], width: usize| {
            self.rows
                .iter()
                .zip(self.group.gpus())
                .map(|(rows, g)| g.upload(&x[rows.start * width..rows.end * width]))
                .collect::<Result<Vec<_>>>()
        };
        self.joint_gradient(&upload(neglog, 1)?, &upload(grad, r)?)
    }

    fn host_result(&self, len: usize, f: impl FnOnce(&mut Replicated) -> Result<()>) -> Result<Vec<f64>> {
        let mut out = Replicated::from_parts(per_device(&self.group, len)?);
        f(&mut out)?;
        self.group.gpus()[0].download(&out.replicas()[0])
    }

    /// Host convenience: H v (device 0's replica).
    pub fn hvp_host(&self, v: &[f64]) -> Result<Vec<f64>> {
        let p = self.layout.p_total();
        if v.len() != p {
            return Err(Error::invalid("v.len", v.len(), format!("must equal p_total = {p}")));
        }
        let parts = self.group.gpus().iter().map(|g| g.upload(v)).collect::<Result<_>>()?;
        let v = Replicated::from_parts(parts);
        self.host_result(p, |out| self.hvp_into(&v, out))
    }

    /// Host convenience: diag(H).
    pub fn diagonal_host(&self) -> Result<Vec<f64>> {
        self.host_result(self.layout.p_total(), |out| self.diagonal_into(out))
    }

    /// Host convenience: the dense joint Hessian, row-major.
    pub fn dense_host(&self) -> Result<Vec<f64>> {
        let p = self.layout.p_total();
        self.host_result(p * p, |out| self.dense_into(out))
    }
}

impl LinearOperator<MultiGpuBackend> for ShardedRowHessian {
    fn dim(&self) -> usize {
        self.layout.p_total()
    }
    fn apply(&self, x: &Replicated, y: &mut Replicated) -> SolverResult<()> {
        self.hvp_into(x, y).map_err(SolverError::from)
    }
    fn apply_multi(&self, x: &Replicated, k: usize, y: &mut Replicated) -> SolverResult<()> {
        self.hvp_multi_into(x, k, y).map_err(SolverError::from)
    }
    fn diagonal(&self, out: &mut Replicated) -> SolverResult<()> {
        self.diagonal_into(out).map_err(SolverError::from)
    }
    fn to_dense(&self) -> SolverResult<Vec<f64>> {
        self.dense_host().map_err(SolverError::from)
    }
}

/// One evaluation's per-row results, sharded like the Hessian: each
/// device's neglog and gradients for its rows.
pub struct ShardedRowEvaluation {
    /// Per-row neglog of each shard.
    pub neglog: Vec<CudaSlice<f64>>,
    /// Per-row gradients (rows x r) of each shard.
    pub grad: Vec<CudaSlice<f64>>,
    /// The joint Hessian operator over all shards.
    pub hessian: ShardedRowHessian,
}

impl ShardedRowEvaluation {
    /// Join per-device evaluations (shard d on device d, in row order).
    pub fn from_shards(group: Rc<GpuGroup>, evaluations: Vec<DeviceRowEvaluation>) -> Result<Self> {
        let (mut neglog, mut grad, mut hessians) = (Vec::new(), Vec::new(), Vec::new());
        for e in evaluations {
            neglog.push(e.neglog);
            grad.push(e.grad);
            hessians.push(e.hessian);
        }
        Ok(Self {
            neglog,
            grad,
            hessian: ShardedRowHessian::from_shards(group, hessians)?,
        })
    }

    /// The joint neglog and its gradient in beta.
    pub fn joint_gradient(&self) -> Result<JointGradient> {
        self.hessian.joint_gradient(&self.neglog, &self.grad)
    }
}
