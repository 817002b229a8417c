//! eddy-consensus's integration tests, one binary: in-memory clusters (with the simulator's
//! pinned seeds), the Raft log store on eddy-log, clusters on it, and the runner thread.

mod cluster;
mod logstore;
mod logstore_cluster;
mod runner;
