//! Data in and runs out: a problem from a CSV file or simulated
//! ([`problem`], [`generator`]), ndarray arrays in and out ([`arrays`]),
//! and one run of the command line as a library call ([`job`]).

pub mod arrays;
pub mod generator;
pub mod job;
pub mod problem;
