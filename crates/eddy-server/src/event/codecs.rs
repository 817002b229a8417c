//! A pool of zstd contexts bound to the cluster dictionary.
//!
//! Compression contexts are cheap to keep and expensive to create (zstd allocates its work
//! space on first use), and only connections whose bodies cross the threshold need one. So
//! connections borrow a [`DictCodec`] for the duration of one compress or decompress and hand
//! it back: the pool holds about as many contexts as there are concurrent compressions, never
//! one per connection. At most [`MAX_POOLED_CODECS`] idle contexts are kept.

use std::sync::{Arc, Mutex};

use eddy_log::lock;

use eddy_wire::event::{DictCodec, Dictionary};

/// Idle contexts kept for reuse; more are created under load and dropped when returned.
pub const MAX_POOLED_CODECS: usize = 64;

/// The pool. Shared by every event connection.
#[derive(Debug)]
pub struct CodecPool {
    dictionary: Arc<Dictionary>,
    idle: Mutex<Vec<DictCodec>>,
}

impl CodecPool {
    /// An empty pool for `dictionary`.
    pub fn new(dictionary: Arc<Dictionary>) -> Self {
        Self {
            dictionary,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// The cluster dictionary.
    pub fn dictionary(&self) -> &Arc<Dictionary> {
        &self.dictionary
    }

    /// Runs `f` with a context, creating one if none is idle.
    pub fn with<T>(&self, f: impl FnOnce(&mut DictCodec) -> T) -> T {
        let pooled = lock(&self.idle).pop();
        let mut codec = pooled.unwrap_or_else(|| DictCodec::new(Arc::clone(&self.dictionary)));
        let out = f(&mut codec);
        let mut idle = lock(&self.idle);
        if idle.len() < MAX_POOLED_CODECS {
            idle.push(codec);
        }
        out
    }

    /// Idle contexts.
    #[cfg(test)]
    pub fn idle(&self) -> usize {
        lock(&self.idle).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_are_reused_and_round_trip() {
        let pool = CodecPool::new(Arc::new(Dictionary::builtin(3).unwrap()));
        let body = br#"{"type":"order_placed","id":12345,"items":[1,2,3]}"#.repeat(40);
        let compressed = pool.with(|c| c.compress(&body).unwrap().to_vec());
        assert!(compressed.len() < body.len());
        assert_eq!(pool.idle(), 1);
        let back = pool.with(|c| {
            c.decompress(&compressed, u32::try_from(body.len()).unwrap(), 1 << 20)
                .unwrap()
        });
        assert_eq!(back, body);
        assert_eq!(pool.idle(), 1, "the same context came back");
    }
}
