//! `DESCRIBE_OPTIONS` (code 13): `[scope: u8]` (1 topic, 2 stream, 3 user; anything else is a
//! decode error); the reply is the scope's option catalog (`eddy_options::describe`).

use eddy_options::{DescribeOptionsReply, Scope};

use crate::stream::codec::{body_via_field, Field, Reader, WireDecode, WireEncode};
use crate::stream::error::CodecError;

/// Request body of `DESCRIBE_OPTIONS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DescribeOptions {
    /// The catalog asked for.
    pub scope: Scope,
}

impl Field for DescribeOptions {
    fn field_len(&self) -> usize {
        1
    }

    fn put(&self, out: &mut Vec<u8>) {
        out.push(self.scope.code());
    }

    fn take(reader: &mut Reader<'_>, name: &'static str) -> Result<Self, CodecError> {
        let at = reader.position();
        let code = reader.u8(name)?;
        let scope = Scope::from_code(code).map_err(|_| CodecError::InvalidDiscriminant {
            field: "options scope",
            value: u64::from(code),
            offset: at,
        })?;
        Ok(Self { scope })
    }
}

body_via_field!(DescribeOptions);

/// Reply payload of `DESCRIBE_OPTIONS`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct OptionsCatalog(pub DescribeOptionsReply);

impl WireEncode for OptionsCatalog {
    fn encoded_len(&self) -> usize {
        self.0.encoded_len()
    }

    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out);
    }
}

impl WireDecode for OptionsCatalog {
    fn decode(body: &[u8]) -> Result<Self, CodecError> {
        Ok(Self(DescribeOptionsReply::decode(body)?))
    }
}

crate::stream::commands::command!(DescribeOptions, DescribeOptions, OptionsCatalog);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::commands::testing::*;
    use eddy_options::TopicSettings;

    #[test]
    fn round_trips() {
        for scope in [Scope::Topic, Scope::Stream, Scope::User] {
            assert_eq!(
                round_trip_strict(&DescribeOptions { scope }),
                [scope.code()]
            );
            let reply = OptionsCatalog(DescribeOptionsReply::for_scope(
                scope,
                &TopicSettings::EDDY_DEFAULTS,
            ));
            round_trip_strict(&reply);
        }
        assert!(DescribeOptions::decode(&[4]).is_err());
    }
}
