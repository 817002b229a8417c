//! Metadata state machine tests: lifecycles, purge, offsets and groups, users and tokens,
//! limits, and the bincode round trip.

use super::*;
use crate::error::MetadataError;
use crate::partition::PartitionAddr;

fn addr(p: u32) -> PartitionAddr {
    PartitionAddr {
        stream_id: 0,
        topic_id: 0,
        partition_id: p,
    }
}

fn with_topic(partitions: u32) -> MetadataState {
    let mut s = MetadataState::default();
    s.apply(&MetadataOp::CreateStream {
        id: 0,
        name: "s".into(),
        created_at: 1,
        options: vec![],
    })
    .unwrap();
    let effects = s
        .apply(&MetadataOp::CreateTopic {
            stream_id: 0,
            id: 0,
            name: "t".into(),
            created_at: 2,
            partitions,
            config: TopicConfig::default(),
            explicit_options: vec![],
            derived_options: vec![],
        })
        .unwrap();
    assert_eq!(effects.len(), partitions as usize);
    s
}

#[test]
fn streams_topics_partitions_lifecycle() {
    let mut s = with_topic(3);
    assert_eq!(s.lowest_free_stream_id(), 1);
    assert_eq!(s.lowest_free_topic_id(0), Some(1));
    assert_eq!(s.topic(0, 0).unwrap().partitions.len(), 3);
    assert_eq!(s.partition(addr(2)).unwrap().uid, 2);
    // Names are unique per scope.
    assert!(matches!(
        s.apply(&MetadataOp::CreateStream {
            id: 5,
            name: "s".into(),
            created_at: 0,
            options: vec![]
        }),
        Err(MetadataError::NameTaken { .. })
    ));
    assert!(matches!(
        s.apply(&MetadataOp::CreateStream {
            id: 0,
            name: "x".into(),
            created_at: 0,
            options: vec![]
        }),
        Err(MetadataError::IdTaken { .. })
    ));
    let effects = s
        .apply(&MetadataOp::CreatePartitions {
            stream_id: 0,
            topic_id: 0,
            count: 2,
            created_at: 3,
        })
        .unwrap();
    assert_eq!(
        effects
            .iter()
            .map(|e| match e {
                Effect::CreatePartition { addr, uid, .. } => (addr.partition_id, *uid),
                _ => panic!(),
            })
            .collect::<Vec<_>>(),
        vec![(3, 3), (4, 4)]
    );
    let effects = s
        .apply(&MetadataOp::DeletePartitions {
            stream_id: 0,
            topic_id: 0,
            count: 2,
        })
        .unwrap();
    assert_eq!(effects.len(), 2);
    assert!(s.partition(addr(3)).is_none());
    // uids are never reused.
    s.apply(&MetadataOp::CreatePartitions {
        stream_id: 0,
        topic_id: 0,
        count: 1,
        created_at: 4,
    })
    .unwrap();
    assert_eq!(s.partition(addr(3)).unwrap().uid, 5);
    let effects = s.apply(&MetadataOp::DeleteStream { id: 0 }).unwrap();
    assert_eq!(effects.len(), 4);
    assert!(s.streams.is_empty());
}

#[test]
fn purge_bumps_generation_and_clears_offsets() {
    let mut s = with_topic(2);
    s.apply(&MetadataOp::StoreConsumerOffset {
        addr: addr(0),
        consumer: ConsumerKey::Consumer(1),
        offset: 9,
        forward_only: false,
    })
    .unwrap();
    let effects = s
        .apply(&MetadataOp::PurgeTopic {
            stream_id: 0,
            topic_id: 0,
        })
        .unwrap();
    assert_eq!(effects.len(), 2);
    assert!(matches!(
        effects[0],
        Effect::PurgePartition { generation: 1, .. }
    ));
    assert!(s.partition(addr(0)).unwrap().offsets.is_empty());
    let effects = s.apply(&MetadataOp::PurgeStream { id: 0 }).unwrap();
    assert!(matches!(
        effects[1],
        Effect::PurgePartition { generation: 2, .. }
    ));
}

#[test]
fn consumer_offsets_forward_only_and_groups() {
    let mut s = with_topic(1);
    let store = |s: &mut MetadataState, offset, forward_only| {
        s.apply(&MetadataOp::StoreConsumerOffset {
            addr: addr(0),
            consumer: ConsumerKey::Group(0),
            offset,
            forward_only,
        })
    };
    assert!(matches!(
        store(&mut s, 1, false),
        Err(MetadataError::GroupNotFound { .. })
    ));
    s.apply(&MetadataOp::CreateConsumerGroup {
        stream_id: 0,
        topic_id: 0,
        id: 0,
        name: "g".into(),
        created_at: 0,
    })
    .unwrap();
    store(&mut s, 10, false).unwrap();
    store(&mut s, 5, true).unwrap();
    assert_eq!(
        s.partition(addr(0)).unwrap().offsets[&ConsumerKey::Group(0)],
        10
    );
    store(&mut s, 5, false).unwrap();
    assert_eq!(
        s.partition(addr(0)).unwrap().offsets[&ConsumerKey::Group(0)],
        5
    );
    s.apply(&MetadataOp::DeleteConsumerGroup {
        stream_id: 0,
        topic_id: 0,
        group_id: 0,
    })
    .unwrap();
    assert!(s.partition(addr(0)).unwrap().offsets.is_empty());
    // Group ids are never reused.
    assert!(s
        .apply(&MetadataOp::CreateConsumerGroup {
            stream_id: 0,
            topic_id: 0,
            id: 0,
            name: "g".into(),
            created_at: 0
        })
        .is_err());
    assert!(s
        .apply(&MetadataOp::CreateConsumerGroup {
            stream_id: 0,
            topic_id: 0,
            id: 1,
            name: "g".into(),
            created_at: 0
        })
        .is_ok());
    assert_eq!(
        s.apply(&MetadataOp::DeleteConsumerOffset {
            addr: addr(0),
            consumer: ConsumerKey::Consumer(3)
        }),
        Err(MetadataError::OffsetNotFound)
    );
}

#[test]
fn users_and_tokens() {
    let mut s = MetadataState::default();
    let create = |id: u32, name: &str| MetadataOp::CreateUser {
        id,
        username: name.into(),
        password_hash: "h".into(),
        status: 1,
        permissions: None,
        options: vec![],
        created_at: 0,
    };
    s.apply(&create(0, "iggy")).unwrap();
    assert!(s.apply(&create(1, "iggy")).is_err());
    assert_eq!(s.lowest_free_user_id(), 1);
    s.apply(&MetadataOp::CreateToken {
        user_id: 0,
        name: "t".into(),
        token_hash: "x".into(),
        expiry_at: None,
    })
    .unwrap();
    assert!(s
        .apply(&MetadataOp::CreateToken {
            user_id: 0,
            name: "t".into(),
            token_hash: "y".into(),
            expiry_at: None
        })
        .is_err());
    s.apply(&MetadataOp::UpdateUser {
        id: 0,
        username: None,
        status: Some(2),
        options: None,
    })
    .unwrap();
    assert_eq!(s.users[&0].status, 2);
    s.apply(&MetadataOp::ChangePassword {
        id: 0,
        password_hash: "n".into(),
    })
    .unwrap();
    s.apply(&MetadataOp::UpdatePermissions {
        id: 0,
        permissions: Some(vec![1]),
    })
    .unwrap();
    s.apply(&MetadataOp::DeleteToken {
        user_id: 0,
        name: "t".into(),
    })
    .unwrap();
    assert!(s.users[&0].tokens.is_empty());
    s.apply(&MetadataOp::DeleteUser { id: 0 }).unwrap();
    assert!(s.users.is_empty());
}

#[test]
fn limits_are_checked() {
    let mut s = MetadataState::default();
    assert!(s
        .apply(&MetadataOp::CreateStream {
            id: 0,
            name: "x".repeat(MAX_NAME_LEN + 1),
            created_at: 0,
            options: vec![]
        })
        .is_err());
    assert!(s
        .apply(&MetadataOp::CreateStream {
            id: 0,
            name: String::new(),
            created_at: 0,
            options: vec![]
        })
        .is_err());
    assert!(s
        .apply(&MetadataOp::CreateStream {
            id: 0,
            name: "x".into(),
            created_at: 0,
            options: vec![0; MAX_BLOB_LEN + 1]
        })
        .is_err());
    let mut s = with_topic(0);
    assert!(s
        .apply(&MetadataOp::CreatePartitions {
            stream_id: 0,
            topic_id: 0,
            count: MAX_PARTITIONS_PER_OP + 1,
            created_at: 0
        })
        .is_err());
    assert!(s
        .apply(&MetadataOp::DeletePartitions {
            stream_id: 0,
            topic_id: 0,
            count: 1
        })
        .is_err());
}

#[test]
fn ops_and_state_roundtrip_through_bincode() {
    let s = with_topic(2);
    let bytes = encode_state(&s).unwrap();
    assert_eq!(decode_state(&bytes).unwrap(), s);
    let op = MetadataOp::StoreConsumerOffset {
        addr: addr(1),
        consumer: ConsumerKey::Consumer(7),
        offset: 99,
        forward_only: true,
    };
    let bytes = encode_op(&op).unwrap();
    assert_eq!(decode_op(&bytes).unwrap(), op);
    for cut in 0..bytes.len() {
        assert!(decode_op(&bytes[..cut]).is_err());
    }
    let mut trailing = bytes.clone();
    trailing.push(0);
    assert!(matches!(
        decode_op(&trailing),
        Err(crate::error::EncodingError::Trailing(1))
    ));
}

#[test]
fn placed_partitions_keep_their_members_until_deleted_and_through_a_snapshot() {
    let mut s = with_topic(1);
    let placed = |op: MetadataOp, replicas: Vec<u64>| MetadataOp::Placed {
        replicas,
        op: Box::new(op),
    };
    let more = |count| MetadataOp::CreatePartitions {
        stream_id: 0,
        topic_id: 0,
        count,
        created_at: 5,
    };
    // The partition of the unplaced creation lives on the founding members.
    assert_eq!(s.replicas(0), None);
    let effects = s.apply(&placed(more(2), vec![2, 3, 4])).unwrap();
    assert_eq!(effects.len(), 2);
    assert_eq!(s.replicas(1), Some(&[2, 3, 4][..]));
    assert_eq!(s.replicas(2), Some(&[2, 3, 4][..]));
    let topic = MetadataOp::CreateTopic {
        stream_id: 0,
        id: 1,
        name: "placed".into(),
        created_at: 6,
        partitions: 1,
        config: TopicConfig::default(),
        explicit_options: vec![],
        derived_options: vec![],
    };
    s.apply(&placed(topic.clone(), vec![5])).unwrap();
    assert_eq!(s.replicas(3), Some(&[5][..]));

    // The members travel in the snapshot; a snapshot with none placed is the old form.
    let bytes = encode_state(&s).unwrap();
    let back = decode_state(&bytes).unwrap();
    assert_eq!(back, s);
    assert_eq!(back.replicas(1), Some(&[2, 3, 4][..]));
    let unplaced = with_topic(1);
    let old_form = bincode::serde::encode_to_vec(
        &unplaced,
        bincode::config::standard().with_fixed_int_encoding(),
    )
    .unwrap();
    assert_eq!(encode_state(&unplaced).unwrap(), old_form);
    assert_eq!(decode_state(&old_form).unwrap(), unplaced);
    let mut junk = bytes.clone();
    junk.push(0);
    assert!(decode_state(&junk).is_err());
    for cut in 0..bytes.len() {
        let cut = &bytes[..cut];
        // A cut inside the placement section never decodes; a cut right before it is a
        // state without placement (the snapshot's own checksum covers that case).
        if let Ok(d) = decode_state(cut) {
            assert!(d.placement.is_empty());
        }
    }

    // Refused, the state unchanged: nothing to place, no members, a member twice, nested.
    let before = s.clone();
    for bad in [
        placed(
            MetadataOp::DeleteTopic {
                stream_id: 0,
                topic_id: 1,
            },
            vec![1],
        ),
        placed(more(1), vec![]),
        placed(more(1), (0..65).collect()),
        placed(more(1), vec![1, 2, 1]),
        placed(placed(more(1), vec![1]), vec![1]),
    ] {
        assert!(
            matches!(s.apply(&bad), Err(MetadataError::Placement(_))),
            "{bad:?}"
        );
        assert_eq!(s, before);
    }
    // A placed creation refused by its own rules changes nothing either.
    assert!(s.apply(&placed(topic, vec![1])).is_err());
    assert_eq!(s, before);

    // Deleting the partitions forgets where they lived.
    s.apply(&MetadataOp::DeletePartitions {
        stream_id: 0,
        topic_id: 0,
        count: 2,
    })
    .unwrap();
    assert_eq!(s.replicas(1), None);
    assert_eq!(s.replicas(2), None);
    s.apply(&MetadataOp::DeleteTopic {
        stream_id: 0,
        topic_id: 1,
    })
    .unwrap();
    assert!(s.placement.is_empty());
    // The op round-trips through the log's encoding.
    let op = placed(more(3), vec![1, 2, 3]);
    assert_eq!(decode_op(&encode_op(&op).unwrap()).unwrap(), op);
}

#[test]
fn cluster_members_are_recorded_and_travel_in_the_snapshot_beside_the_placement() {
    let mut s = with_topic(1);
    s.apply(&MetadataOp::SetMember {
        id: 4,
        address: "10.0.0.4:10001".into(),
    })
    .unwrap();
    s.apply(&MetadataOp::SetMember {
        id: 1,
        address: "10.0.0.1:10001".into(),
    })
    .unwrap();
    // A member that moved is recorded again.
    s.apply(&MetadataOp::SetMember {
        id: 4,
        address: "10.0.0.9:10001".into(),
    })
    .unwrap();
    assert_eq!(
        s.members
            .iter()
            .map(|(k, v)| (*k, v.as_str()))
            .collect::<Vec<_>>(),
        vec![(1, "10.0.0.1:10001"), (4, "10.0.0.9:10001")]
    );
    let before = s.clone();
    for bad in [
        MetadataOp::SetMember {
            id: 0,
            address: "a:1".into(),
        },
        MetadataOp::SetMember {
            id: 2,
            address: String::new(),
        },
        MetadataOp::SetMember {
            id: 2,
            address: "x".repeat(MAX_NAME_LEN + 1),
        },
        MetadataOp::RemoveMember { id: 7 },
    ] {
        assert!(s.apply(&bad).is_err(), "{bad:?}");
        assert_eq!(s, before);
    }
    s.apply(&MetadataOp::Placed {
        replicas: vec![1, 4],
        op: Box::new(MetadataOp::CreatePartitions {
            stream_id: 0,
            topic_id: 0,
            count: 1,
            created_at: 3,
        }),
    })
    .unwrap();
    let bytes = encode_state(&s).unwrap();
    assert_eq!(decode_state(&bytes).unwrap(), s);
    // Members alone (no placement section) decode too.
    let mut members_only = with_topic(1);
    members_only.members = s.members.clone();
    let alone = encode_state(&members_only).unwrap();
    assert_eq!(decode_state(&alone).unwrap(), members_only);
    // A section twice, out of order, or of an unknown tag is refused.
    let plain = encode_state(&with_topic(1)).unwrap();
    let members_section = &alone[plain.len()..];
    let mut placement_only = with_topic(1);
    placement_only.placement = s.placement.clone();
    let placed = encode_state(&placement_only).unwrap();
    let placement_section = &placed[plain.len()..];
    assert_eq!(
        decode_state(&[&placed[..], members_section].concat()).unwrap(),
        MetadataState {
            members: s.members.clone(),
            ..placement_only
        }
    );
    for bad in [
        [&alone[..], members_section].concat(),
        [&plain[..], &[9u8][..]].concat(),
        [&alone[..], placement_section].concat(),
    ] {
        assert!(decode_state(&bad).is_err());
    }
    s.apply(&MetadataOp::RemoveMember { id: 1 }).unwrap();
    assert_eq!(s.members.keys().copied().collect::<Vec<_>>(), vec![4]);
    for op in [
        MetadataOp::SetMember {
            id: 3,
            address: "h:1".into(),
        },
        MetadataOp::RemoveMember { id: 3 },
    ] {
        assert_eq!(decode_op(&encode_op(&op).unwrap()).unwrap(), op);
    }
}
