//! The event protocol's side of the replicated state: a change as the shard machine takes it
//! and answers it ([`change`]), where a request runs ([`routing`]), and the error each store
//! refusal is answered with ([`errors`]).

pub mod change;
pub mod errors;
pub mod routing;
