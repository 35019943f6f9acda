//! What a fit gives a user: mgcv's summary ([`summary`], [`report`]: the
//! table and its JSON), the fit saved and loaded ([`saved`]) and
//! predictions for new rows ([`predict`]).

pub mod predict;
pub mod report;
pub mod saved;
pub mod summary;
