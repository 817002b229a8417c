//! Fuzz entry points for eddy-server's own decoders of network bytes: the requests and answers
//! of the replication port's forwarding lane (`fuzz/fuzz_targets/peer_forward.rs`), also
//! replayed over the committed corpus by this crate's tests. Only a member with a certificate
//! of the cluster's CA can send them, which is no reason to trust their bytes.

use bytes::Bytes;

/// The first byte chooses the decoder: 0 a forwarded stream write, 1 its answer, 2 a forwarded
/// event change, 3 its answer; the rest is its input. Each decodes or refuses; none panics.
pub fn fuzz_peer_forward(data: &[u8]) {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let rest = Bytes::copy_from_slice(rest);
    match which % 4 {
        0 => crate::cluster::streams::fuzz_forwarded(Some(rest), None),
        1 => crate::cluster::streams::fuzz_forwarded(None, Some(rest)),
        2 => {
            let _ = crate::cluster::events::decode_forward(&rest);
        }
        _ => {
            let _ = crate::cluster::events::decode_forward_answer(&rest);
        }
    }
}

/// Seed inputs for `fuzz/corpus/peer_forward/`: each request and answer of the lane.
pub fn peer_forward_seeds() -> Vec<(String, Vec<u8>)> {
    let with = |which: u8, bytes: &[u8]| {
        let mut v = vec![which];
        v.extend_from_slice(bytes);
        v
    };
    let mut seeds: Vec<(String, Vec<u8>)> = crate::cluster::streams::forwarded_seeds()
        .into_iter()
        .map(|(name, request, is_answer)| (name, with(u8::from(is_answer), &request)))
        .collect();
    for (name, command) in eddy_event_store::fuzzing::event_command_seeds() {
        let mut request = vec![crate::cluster::events::FORWARD_KIND];
        request.extend_from_slice(&3u32.to_le_bytes());
        request.push(1);
        request.extend_from_slice(&7u128.to_le_bytes());
        request.extend_from_slice(&command);
        seeds.push((format!("event_change_{name}"), with(2, &request)));
    }
    seeds.push((
        "event_refusal".into(),
        with(3, &crate::cluster::events::forward_refusal("busy")),
    ));
    seeds.push((
        "event_not_leader".into(),
        with(3, &crate::cluster::events::forward_not_leader()),
    ));
    seeds
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_peer_forward_corpus() {
        eddy_log::fuzzing::replay_corpus(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus"),
            "peer_forward",
            &peer_forward_seeds(),
            fuzz_peer_forward,
        );
    }
}
