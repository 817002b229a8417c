//! Replication and cluster membership for eddy.
