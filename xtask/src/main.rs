//! `cargo xtask`: eddy's developer tasks.
fn main() {}
