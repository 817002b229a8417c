//! `GET_STREAMS` (code 201): every stream, concatenated with no count.

use crate::stream::codec::ToEnd;
use crate::stream::entities::StreamResponse;

crate::stream::commands::empty_body! {
    /// Request body of `GET_STREAMS` (empty).
    GetStreams
}

crate::stream::commands::command!(GetStreams, GetStreams, ToEnd<StreamResponse>);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        assert!(round_trip(&GetStreams).is_empty());
    }
}
