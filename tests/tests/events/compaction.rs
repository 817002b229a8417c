//! Background compaction in the running server: trimmed and deleted events leave the disk on
//! the next pass (`--compaction-check-interval-secs`), live aggregates read back unchanged
//! before and after a restart, and `/metrics` counts what was reclaimed.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::event_support::{client, start};
use celeriant_client_tokio::{json_event, CeleriantClient, ClientError, ReadError, ServerError};
use celeriant_msg::request::read_filters::ReadFilters;
use celeriant_msg::request::requests::{
    DeleteRequest, ReadRequest, SingleAggregateDelete, TrimStartRequest,
};
use celeriant_wal::aggregate_key::AggregateKey;
use celeriant_wal::datablocks::datablock_aggregate_event::DatablockAggregateEvent;
use eddy_tests::http_get;
use serde_json::json;

/// Payload text that zstd cannot shrink much, so segments fill at a known pace.
fn noise(seed: u64, len: usize) -> String {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'a' + u8::try_from(x % 26).unwrap())
        })
        .collect()
}

fn event(i: u64) -> DatablockAggregateEvent {
    let mut e = json_event(3, &json!({"i": i, "blob": noise(i, 2048)})).unwrap();
    e.client_seq = i;
    e
}

async fn write_many(conn: &mut CeleriantClient, key: &AggregateKey, from: u64, n: u64) {
    for i in from..from + n {
        conn.write_events(key.clone(), vec![event(i)], 7)
            .await
            .unwrap();
    }
}

/// Every event of `key` from `from_version`, paging with the reply's next version.
async fn read_all(conn: &mut CeleriantClient, key: &AggregateKey, from_version: u64) -> Vec<u64> {
    let mut seqs = Vec::new();
    let mut next = Some(from_version);
    while let Some(from) = next {
        let page = conn
            .read(ReadRequest {
                correlation_id: None,
                aggregate_key: key.clone(),
                filters: ReadFilters::new(from),
            })
            .await
            .unwrap();
        for b in &page.event_batches {
            seqs.extend(b.events.iter().map(|e| e.client_seq));
        }
        next = page.next_aggregate_version;
    }
    seqs
}

/// What must hold after compaction: `kept` whole, `trimmed` from version 151, `doomed` gone.
async fn check(conn: &mut CeleriantClient, keys: &[AggregateKey; 3], kept_before: &[u64]) {
    let [doomed, trimmed, kept] = keys;
    let mut kept_now = kept_before.to_vec();
    kept_now.extend(1_000..1_040);
    assert_eq!(read_all(conn, kept, 1).await, kept_now);
    let tail: Vec<u64> = (150..160).collect();
    assert_eq!(read_all(conn, trimmed, 151).await, tail);
    let e = conn
        .read(ReadRequest {
            correlation_id: None,
            aggregate_key: doomed.clone(),
            filters: ReadFilters::new(1),
        })
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::Server(ServerError::Read {
                kind: ReadError::AggregateNotExists,
                ..
            })
        ),
        "{e:?}"
    );
}

fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let meta = entry.metadata().unwrap();
        total += if meta.is_dir() {
            dir_bytes(&entry.path())
        } else {
            meta.len()
        };
    }
    total
}

fn metric(eddy: &eddy_tests::Eddy, name: &str) -> f64 {
    let (status, body) = http_get(eddy.addrs().http, "/metrics").unwrap();
    assert_eq!(status, 200);
    eddy_tests::metric_value(&body, name).unwrap_or_else(|| panic!("{name} missing from /metrics"))
}

#[tokio::test]
async fn trimmed_and_deleted_events_leave_the_disk_and_live_ones_stay() {
    let mut eddy = start(&[
        "--num-shards",
        "1",
        "--shard-log-segment-bytes",
        "65536",
        "--compaction-check-interval-secs",
        "1",
        "--compaction-min-reclaimable-ratio",
        "0.1",
    ]);
    let mut conn = client(&eddy).await;
    let doomed = AggregateKey::new(1, 1, 1);
    let trimmed = AggregateKey::new(1, 1, 2);
    let kept = AggregateKey::new(1, 1, 3);
    // Interleaved so every sealed segment holds some of each.
    for round in 0..4 {
        write_many(&mut conn, &doomed, round * 40, 40).await;
        write_many(&mut conn, &trimmed, round * 40, 40).await;
        write_many(&mut conn, &kept, round * 40, 20).await;
    }
    let kept_before = read_all(&mut conn, &kept, 1).await;
    let keys = [doomed.clone(), trimmed.clone(), kept.clone()];
    assert_eq!(kept_before.len(), 80);

    conn.delete(DeleteRequest {
        correlation_id: None,
        client_id: 7,
        user_id: None,
        deletes: HashMap::from([(
            doomed.clone(),
            SingleAggregateDelete {
                allow_recreate: false,
                allow_sequence_continuation: false,
                expected_version: Some(160),
            },
        )]),
    })
    .await
    .unwrap();
    conn.trim_start(TrimStartRequest {
        correlation_id: None,
        aggregate_key: trimmed.clone(),
        keep_from_aggregate_version: 151,
        client_id: 7,
        user_id: None,
    })
    .await
    .unwrap();
    // Roll the log past the segments that hold the dead bytes, so they are sealed.
    write_many(&mut conn, &kept, 1_000, 40).await;
    let events_dir = eddy.data_dir().join("events");
    let before = dir_bytes(&events_dir);

    let deadline = Instant::now() + Duration::from_secs(60);
    while metric(&eddy, "eddy_events_compaction_bytes_reclaimed_total") == 0.0 {
        assert!(
            Instant::now() < deadline,
            "no compaction pass reclaimed anything within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let reclaimed = metric(&eddy, "eddy_events_compaction_bytes_reclaimed_total");
    assert!(metric(&eddy, "eddy_events_compaction_segments_rewritten_total") > 0.0);
    assert!(metric(&eddy, "eddy_events_compaction_failures_total") < 0.5);
    let after = dir_bytes(&events_dir);
    assert!(
        after < before,
        "the events directory did not shrink: {before} -> {after} bytes ({reclaimed} reclaimed)"
    );
    // 160 deleted and 150 trimmed ~2 KiB events are at least half of what was written.
    assert!(
        reclaimed > 300.0 * 1024.0,
        "only {reclaimed} bytes reclaimed ({before} -> {after})"
    );

    check(&mut conn, &keys, &kept_before).await;
    drop(conn);

    eddy.restart();
    let mut conn = client(&eddy).await;
    check(&mut conn, &keys, &kept_before).await;
    // The per-aggregate version sequence goes on where it was.
    let r = conn
        .write_events(kept.clone(), vec![event(2_000)], 7)
        .await
        .unwrap();
    assert_eq!(r.max_aggregate_version, Some(121));
}
