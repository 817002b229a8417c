//! Event protocol (Celeriant) part of this crate.
