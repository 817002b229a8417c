//! `cargo xtask`: eddy's developer tasks. Filled in by the foundation work.
fn main() {}
