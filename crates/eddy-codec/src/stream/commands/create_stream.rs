//! `CREATE_STREAM` (code 202, operation 128): `[name: WireName][options block to end]`; the
//! reply is the new stream's details (`topics_count` 0).

use crate::stream::codec::wire_struct;
use crate::stream::commands::TrailingOptions;
use crate::stream::entities::StreamDetails;
use crate::stream::name::WireName;

wire_struct! {
    /// Request body of `CREATE_STREAM`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct CreateStream {
        /// Stream name (unique per server).
        pub name: WireName,
        /// Options block to the end of the body: the stream catalog is empty; a stream's own
        /// `encryption_key` is the server's to take.
        pub options: TrailingOptions,
    }
}

crate::stream::commands::command!(CreateStream, CreateStream, StreamDetails);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;
    use crate::stream::entities::tests::stream;
    use crate::stream::reply::RESULT_OK;

    /// Spec §1.13.3: body `0b "test-stream"` + empty options, and the 52-byte reply body.
    #[test]
    fn golden() {
        let request = CreateStream {
            name: WireName::new("test-stream").unwrap(),
            options: TrailingOptions::default(),
        };
        assert_eq!(
            round_trip(&request),
            hex("0b 74 65 73 74 2d 73 74 72 65 61 6d")
        );
        let reply = StreamDetails {
            stream: stream(0, "test-stream", 0),
            topics: vec![],
        };
        let mut body = RESULT_OK.to_vec();
        body.extend_from_slice(&round_trip_strict(&reply));
        assert_eq!(
            body,
            hex(
                "00 00 00 00 00 00 00 00 00 40 1e 18 24 0a 06 00 00 00 00 00 \
                 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 \
                 0b 74 65 73 74 2d 73 74 72 65 61 6d 00 00 00 00"
            )
        );
    }
}
