//! eddy's server: listeners, TLS, sessions, dispatch, HTTP health and metrics.
