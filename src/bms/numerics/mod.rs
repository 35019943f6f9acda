//! The numerics the model rests on: the normal distribution's tails
//! ([`probit`]) and the quadrature of each cell's moments
//! ([`quadrature`], with its Gauss–Kronrod nodes, and the [`series`] that
//! spares most finite cells the quadrature).

pub(crate) mod nodes;
pub mod probit;
pub mod quadrature;
pub mod series;
