//! The server raises its soft file descriptor limit to the hard limit at start and shows open
//! descriptors on `/metrics`. Its own test binary: it lowers this process's soft limit, which
//! the server inherits.

use eddy_tests::{http_get, metric_value, server_bin, Eddy};
use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

#[test]
fn soft_descriptor_limit_is_raised_to_the_hard_limit_and_shown_in_metrics() {
    let found = getrlimit(Resource::Nofile);
    let hard = found.maximum.expect("a finite hard limit");
    let lowered = 512.min(hard);
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(lowered),
            maximum: found.maximum,
        },
    )
    .expect("lower the soft limit");
    let eddy = Eddy::start(server_bin!());
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", eddy.pid())).unwrap();
    let soft: u64 = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse().ok())
        .expect("the soft limit in /proc/PID/limits");
    assert_eq!(soft, hard, "{limits}");
    assert!(eddy
        .log()
        .lines()
        .iter()
        .any(|l| l.contains("raised the file descriptor limit")));

    let (status, body) = http_get(eddy.addrs().http, "/metrics").unwrap();
    assert_eq!(status, 200);
    #[allow(clippy::cast_precision_loss)]
    let hard_f = hard as f64;
    assert_eq!(metric_value(&body, "eddy_max_fds"), Some(hard_f), "{body}");
    let open = metric_value(&body, "eddy_open_fds").expect("eddy_open_fds");
    // At least the listeners, the lock file, the logs of the store and this scrape's socket.
    assert!(open >= 8.0 && open < hard_f, "{open}");
}
