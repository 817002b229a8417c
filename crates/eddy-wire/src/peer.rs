//! How cluster members name each other on the replication port.
//!
//! Every member presents a certificate signed by the cluster's CA whose subject alternative
//! names include [`member_name`] of its node id: a dialler checks that the member it reaches
//! is the one it dialled, and the accepting member checks that the id a peer's greeting
//! claims is the one its certificate names. `eddy cluster certs` writes such certificates.

/// The DNS name a member's certificate carries for node `id` (`node-3.eddy` for node 3).
pub fn member_name(id: u64) -> String {
    format!("node-{id}.{MEMBER_DOMAIN}")
}

/// The domain under which members are named.
pub const MEMBER_DOMAIN: &str = "eddy";

/// The node id a member name stands for (`None` when it is not one).
pub fn member_id(name: &str) -> Option<u64> {
    let id = name
        .strip_prefix("node-")?
        .strip_suffix(MEMBER_DOMAIN)?
        .strip_suffix('.')?;
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) || id.starts_with('0') {
        return None;
    }
    id.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_nothing_else_parses() {
        for id in [1, 2, 15, u64::MAX] {
            assert_eq!(member_id(&member_name(id)), Some(id));
        }
        for bad in [
            "node-.eddy",
            "node-01.eddy",
            "node-0x1.eddy",
            "node-1.eddyx",
            "node-1eddy",
            "xnode-1.eddy",
            "node-1.other",
            "node-99999999999999999999.eddy",
        ] {
            assert_eq!(member_id(bad), None, "{bad}");
        }
    }
}
