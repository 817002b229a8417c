//! Buffers for large reads, reused instead of allocated and zero-filled per read.
//!
//! A stream consumer's poll reads about a megabyte per request. A fresh zeroed buffer for each
//! costs a `memset` of the whole read (5-6 % of the server's CPU under the consumer load of
//! `eddy bench streams`) before the kernel overwrites every byte. A pooled buffer was fully
//! initialised once; the read overwrites the part it hands out, and the [`Bytes`] it becomes
//! gives the buffer back when its last clone drops (the reply has been sent).
//!
//! The pool is small and bounded: at most [`MAX_POOLED`] buffers of at most
//! [`MAX_POOLED_LEN`] bytes stay idle, so the memory it keeps is bounded by their product.
//! Reads below [`MIN_POOLED_LEN`] (index-guided point reads) allocate as before.

use std::sync::Mutex;

use bytes::Bytes;

use crate::sync::lock;

/// Reads shorter than this take a fresh buffer.
pub(super) const MIN_POOLED_LEN: usize = 64 * 1024;
/// Buffers longer than this are freed, not pooled.
pub(super) const MAX_POOLED_LEN: usize = 4 * 1024 * 1024;
/// New pooled buffers are this granular.
const ROUND: usize = 256 * 1024;
/// Idle buffers kept at most.
pub(super) const MAX_POOLED: usize = 8;

/// Idle buffers; each one's `len` bytes are initialised (by an earlier read or the zeros it
/// was allocated with).
static POOL: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// A pooled buffer on loan; returns to the pool when dropped.
struct Loan(Vec<u8>);

impl AsRef<[u8]> for Loan {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Loan {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.0);
        if buf.len() < MIN_POOLED_LEN || buf.len() > MAX_POOLED_LEN {
            return;
        }
        let mut pool = lock(&POOL);
        if pool.len() < MAX_POOLED {
            pool.push(buf);
        }
    }
}

/// Fills a buffer of `len` bytes with `fill` and returns it as [`Bytes`]. `fill` must
/// overwrite the whole slice it is given (its content before is a previous read's).
pub(super) fn read_into<E>(
    len: usize,
    fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
) -> Result<Bytes, E> {
    if !(MIN_POOLED_LEN..=MAX_POOLED_LEN).contains(&len) {
        let mut buf = vec![0u8; len];
        fill(&mut buf)?;
        return Ok(Bytes::from(buf));
    }
    let reused = {
        let mut pool = lock(&POOL);
        // The smallest idle buffer that is long enough.
        let best = pool
            .iter()
            .enumerate()
            .filter(|(_, b)| b.len() >= len)
            .min_by_key(|(_, b)| b.len())
            .map(|(i, _)| i);
        best.map(|i| pool.swap_remove(i))
    };
    // Rounded up, so that reads of slightly different sizes share buffers.
    let buf = reused.unwrap_or_else(|| vec![0u8; len.next_multiple_of(ROUND).min(MAX_POOLED_LEN)]);
    // On failure the buffer goes back through the loan's drop.
    let mut loan = Loan(buf);
    fill(&mut loan.0[..len])?;
    Ok(Bytes::from_owner(loan).slice(..len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_return_when_the_last_clone_drops_and_are_reused() {
        let a = read_into::<()>(100_000, |b| {
            b.fill(7);
            Ok(())
        })
        .unwrap();
        assert_eq!(a.len(), 100_000);
        assert!(a.iter().all(|&x| x == 7));
        let part = a.slice(10..20);
        drop(a);
        // A slice still holds the buffer: the next read cannot take it.
        let other = read_into::<()>(100_000, |b| {
            b.fill(8);
            Ok(())
        })
        .unwrap();
        assert_eq!(&part[..], &[7; 10]);
        assert!(other.iter().all(|&x| x == 8));
        drop((part, other));
        // A shorter read may reuse one and hands out only what it filled.
        let b = read_into::<()>(70_000, |b| {
            assert_eq!(b.len(), 70_000);
            b.fill(9);
            Ok(())
        })
        .unwrap();
        assert_eq!(b.len(), 70_000);
        assert!(b.iter().all(|&x| x == 9));
    }

    #[test]
    fn small_and_huge_reads_are_not_pooled_and_errors_pass_through() {
        let small = read_into::<()>(10, |b| {
            b.copy_from_slice(b"0123456789");
            Ok(())
        })
        .unwrap();
        assert_eq!(&small[..], b"0123456789");
        let huge = read_into::<()>(MAX_POOLED_LEN + 1, |b| {
            b[MAX_POOLED_LEN] = 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(huge.len(), MAX_POOLED_LEN + 1);
        assert_eq!(read_into(100_000, |_| Err("bad")).unwrap_err(), "bad");
    }
}
