//! Run-time dispatch of hot loops to the CPU's widest vectors. The crate is
//! built for the baseline x86-64, whose vectors hold two doubles; a function
//! defined through [`by_cpu`] is compiled three times (AVX-512F, AVX2, the
//! baseline) from one `#[inline(always)]` body and picks the widest the CPU
//! has, checked with `is_x86_feature_detected!` (cached by the standard
//! library). Rust never contracts a product and a sum into an FMA, so where
//! the body is elementwise or sums in a fixed order, all three give the same
//! bits.

/// `by_cpu!(fn name / name_avx2 / name_avx512 <const N: usize>(args) -> T =
/// body)` defines `name`, which calls `body` compiled as above, and the two
/// feature-enabled copies under the names given (tests call them directly).
macro_rules! by_cpu {
    (
        $(#[$attr:meta])*
        $vis:vis fn $name:ident / $avx2:ident / $avx512:ident
        $(<$(const $g:ident: usize),*>)?
        ($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? = $body:path
    ) => {
        $(#[$attr])*
        $vis fn $name $(<$(const $g: usize),*>)? ($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                if std::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has AVX-512F, checked just above.
                    return unsafe { $avx512($($arg),*) };
                }
                if std::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU has AVX2, checked just above.
                    return unsafe { $avx2($($arg),*) };
                }
            }
            $body($($arg),*)
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        fn $avx2 $(<$(const $g: usize),*>)? ($($arg: $ty),*) $(-> $ret)? {
            $body($($arg),*)
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx512f")]
        fn $avx512 $(<$(const $g: usize),*>)? ($($arg: $ty),*) $(-> $ret)? {
            $body($($arg),*)
        }
    };
}

pub(crate) use by_cpu;
