//! The `eddy` binary.
fn main() {}
