//! `PING` (code 1): empty request, empty reply; the only command served before login.

use crate::stream::commands::Empty;

crate::stream::commands::empty_body! {
    /// Request body of `PING` (empty).
    Ping
}

crate::stream::commands::command!(Ping, Ping, Empty);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;

    #[test]
    fn request_round_trips() {
        assert!(round_trip(&Ping).is_empty());
    }
}
