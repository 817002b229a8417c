//! File descriptors: the soft `RLIMIT_NOFILE` is raised to the hard limit at start (every
//! partition holds two descriptors and every connection one, so the common soft default of
//! 1024 is reached long before the machine's real limit), and `/metrics` shows how many are
//! open against that limit.

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// The descriptor limit before and after [`raise_nofile_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NofileLimit {
    /// The soft limit found at start (`None`: unlimited).
    pub before: Option<u64>,
    /// The soft limit in force now (`None`: unlimited).
    pub now: Option<u64>,
    /// The hard limit (`None`: unlimited).
    pub hard: Option<u64>,
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and logs the outcome.
pub fn raise_nofile_limit() -> NofileLimit {
    let found = getrlimit(Resource::Nofile);
    let mut limit = NofileLimit {
        before: found.current,
        now: found.current,
        hard: found.maximum,
    };
    if found.current == found.maximum {
        tracing::info!(soft = ?limit.now, hard = ?limit.hard, "file descriptor limit");
        return limit;
    }
    let raised = Rlimit {
        current: found.maximum,
        maximum: found.maximum,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => {
            limit.now = getrlimit(Resource::Nofile).current;
            tracing::info!(
                before = ?limit.before,
                soft = ?limit.now,
                hard = ?limit.hard,
                "raised the file descriptor limit to the hard limit"
            );
        }
        Err(e) => tracing::warn!(
            soft = ?limit.before,
            hard = ?limit.hard,
            error = %e,
            "cannot raise the file descriptor limit"
        ),
    }
    limit
}

/// Descriptors open in this process now (`None` where `/proc/self/fd` cannot be read).
pub fn open_fds() -> Option<u64> {
    // The directory handle itself is one of the entries.
    let entries = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    Some(entries.saturating_sub(1))
}

/// Appends the descriptor series to a `/metrics` scrape.
pub fn sample(out: &mut String) {
    use std::fmt::Write as _;
    if let Some(open) = open_fds() {
        let _ = writeln!(
            out,
            "# HELP eddy_open_fds File descriptors open in the server process.\n\
             # TYPE eddy_open_fds gauge\neddy_open_fds {open}"
        );
    }
    if let Some(max) = getrlimit(Resource::Nofile).current {
        let _ = writeln!(
            out,
            "# HELP eddy_max_fds The soft limit on open file descriptors (RLIMIT_NOFILE).\n\
             # TYPE eddy_max_fds gauge\neddy_max_fds {max}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raising_reaches_the_hard_limit_and_descriptors_are_counted() {
        let limit = raise_nofile_limit();
        assert_eq!(limit.now, limit.hard);
        let before = open_fds().unwrap();
        let file = std::fs::File::open("/proc/self/status").unwrap();
        assert!(open_fds().unwrap() > before);
        drop(file);
        let mut out = String::new();
        sample(&mut out);
        assert!(out.contains("eddy_open_fds "), "{out}");
        assert!(out.contains("eddy_max_fds "), "{out}");
    }
}
