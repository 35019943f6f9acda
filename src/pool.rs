//! Large buffers reused across evaluations instead of freed and allocated
//! again. A fit's every evaluation writes n r^2 row-Hessian entries (410 MB
//! at 200,000 rows, r = 16); a fresh allocation of that size is mapped anew
//! by the system and page-faulted in by the threads that write it, and on
//! 16 cores those faults took as much CPU time as the evaluation itself.

use std::sync::{Arc, Mutex};

/// Buffers kept at most (a Newton step holds the current evaluation and a
/// trial; a few more cover a line search's).
const KEEP: usize = 4;

/// A pool of f64 buffers, shared by the [`PooledVec`]s taken from it.
#[derive(Clone, Debug, Default)]
pub struct BufferPool(Arc<Mutex<Vec<Vec<f64>>>>);

impl BufferPool {
    /// A buffer of `len` values, reused where the pool holds one (its
    /// contents are whatever was there: the caller writes every entry).
    pub fn take(&self, len: usize) -> PooledVec {
        let reused = self.lock().pop();
        let mut vec = reused.unwrap_or_default();
        vec.resize(len, 0.0);
        PooledVec {
            vec,
            home: Some(self.clone()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Vec<f64>>> {
        // A poisoned pool only holds buffers: still usable.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A buffer that goes back to its pool when dropped (or an owned one,
/// without a pool).
#[derive(Debug)]
pub struct PooledVec {
    vec: Vec<f64>,
    home: Option<BufferPool>,
}

impl PooledVec {
    /// An owned buffer, freed when dropped.
    pub fn owned(vec: Vec<f64>) -> Self {
        Self { vec, home: None }
    }
}

impl Clone for PooledVec {
    /// A copy of the values, owned.
    fn clone(&self) -> Self {
        Self::owned(self.vec.clone())
    }
}

impl std::ops::Deref for PooledVec {
    type Target = [f64];
    fn deref(&self) -> &[f64] {
        &self.vec
    }
}

impl std::ops::DerefMut for PooledVec {
    fn deref_mut(&mut self) -> &mut [f64] {
        &mut self.vec
    }
}

impl Drop for PooledVec {
    fn drop(&mut self) {
        if let Some(home) = &self.home {
            let mut kept = home.lock();
            if kept.len() < KEEP {
                kept.push(std::mem::take(&mut self.vec));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropped_buffers_are_taken_again_and_owned_ones_are_not_kept() {
        let pool = BufferPool::default();
        let first = pool.take(1000);
        let at = first.as_ptr();
        drop(first);
        let again = pool.take(800);
        assert_eq!((again.as_ptr(), again.len()), (at, 800));
        let copy = again.clone();
        assert_ne!(copy.as_ptr(), at);
        drop(copy);
        assert!(pool.lock().is_empty());
        let held: Vec<_> = (0..KEEP + 2).map(|_| pool.take(10)).collect();
        drop(held);
        drop(again);
        assert_eq!(pool.lock().len(), KEEP);
    }
}
