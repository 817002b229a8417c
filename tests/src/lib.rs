//! Shared harness for eddy's cross-crate tests: spawn the real `eddy` binary on free ports in a temp dir.
