//! The Bernoulli marginal-slope (BMS) model: bases, calibration, Stage 1
//! (cells and moments), the Stage-2 row kernel on the CPU, and a generator.
//! `shared/docs/bms-model.md` fixes the math every piece follows.

pub mod basis;
pub mod calibration;
pub mod cells;
pub mod probit;
pub mod quadrature;
