//! The model itself (`shared/docs/bms-model.md`): its two bases and the
//! frailty scale ([`bases`], each a [`cubic_basis::CubicBasis`]), the
//! calibration of each row's intercept ([`calibration`]), the cells and
//! their moments (Stage 1, [`cells`]), the row's value, gradient and Hessian
//! (Stage 2, [`stage2`], over the [`bundle`] the device kernels read, or
//! fused with Stage 1 on the CPU, `fused`), the coefficients' layout
//! ([`layout`]) and the model's rows as a row evaluator ([`rows`]).

pub mod bases;
pub mod bundle;
pub mod calibration;
pub mod cells;
pub mod cubic_basis;
pub(crate) mod fused;
pub mod layout;
pub mod rows;
pub mod stage2;
