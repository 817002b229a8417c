//! The byte cursor under both event-body readers (`V2Reader`: bincode, `V3Reader`:
//! MessagePack): reads that never pass the body's end and never panic, and byte fields that
//! are zero-copy slices of the body when its `Bytes` is at hand.

use bytes::Bytes;

use super::error::DecodeError;

/// A position in a request or response body.
#[derive(Debug)]
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    owner: Option<&'a Bytes>,
}

impl<'a> Cursor<'a> {
    /// A cursor over `buf`; with `owner` (the `Bytes` that `buf` is), [`Cursor::take_bytes`]
    /// slices it instead of copying.
    pub(crate) fn new(buf: &'a [u8], owner: Option<&'a Bytes>) -> Self {
        debug_assert!(owner.is_none_or(|o| o.as_ref() == buf));
        Self { buf, pos: 0, owner }
    }

    /// Bytes read so far: the offset errors name.
    pub(crate) fn offset(&self) -> usize {
        self.pos
    }

    /// Bytes left.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The next `n` bytes, or [`DecodeError::UnexpectedEnd`] (nothing consumed).
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let available = self.remaining();
        if n > available {
            return Err(DecodeError::UnexpectedEnd {
                offset: self.pos,
                needed: n,
                available,
            });
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    /// The next `n` bytes as `Bytes`: a slice of the owner when there is one, else a copy.
    pub(crate) fn take_bytes(&mut self, n: usize) -> Result<Bytes, DecodeError> {
        let start = self.pos;
        let raw = self.take(n)?;
        Ok(match self.owner {
            Some(owner) => owner.slice(start..start + n),
            None => Bytes::copy_from_slice(raw),
        })
    }

    /// The next byte without consuming it.
    pub(crate) fn peek(&self) -> Result<u8, DecodeError> {
        self.buf
            .get(self.pos)
            .copied()
            .ok_or(DecodeError::UnexpectedEnd {
                offset: self.pos,
                needed: 1,
                available: 0,
            })
    }
}
