//! The packed protocol version carried by the login body and the eviction window (spec §1.6.5).
//!
//! ```text
//!  31 30 29          20 19          10 9            0
//! +-----+--------------+--------------+--------------+
//! |  0  |    major     |    minor     |    patch     |
//! +-----+--------------+--------------+--------------+
//! ```
//! Integer order equals semver order; pre-release and build tags are ignored.

/// Bits per component.
const COMPONENT_BITS: u32 = 10;
/// Largest value of one component.
pub const COMPONENT_MAX: u32 = (1 << COMPONENT_BITS) - 1;

/// The packed version of the 0.11.0-edge.4 crates, `0.11.0` = `0x00002C00`.
pub const PROTOCOL_VERSION: u32 = 0x0000_2C00;
/// The lowest client version a 0.11.x server accepts.
pub const PROTOCOL_VERSION_MIN: u32 = 0x0000_2C00;

const _: () = assert!(PROTOCOL_VERSION == ((11 << COMPONENT_BITS) as u32));

/// A decoded `major.minor.patch` triple.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProtocolVersion {
    /// Major component (0..=1023).
    pub major: u16,
    /// Minor component (0..=1023).
    pub minor: u16,
    /// Patch component (0..=1023).
    pub patch: u16,
}

impl ProtocolVersion {
    /// Packs the triple; `None` when a component exceeds 10 bits.
    pub const fn pack(self) -> Option<u32> {
        let (major, minor, patch) = (self.major as u32, self.minor as u32, self.patch as u32);
        if major > COMPONENT_MAX || minor > COMPONENT_MAX || patch > COMPONENT_MAX {
            return None;
        }
        Some((major << (2 * COMPONENT_BITS)) | (minor << COMPONENT_BITS) | patch)
    }

    /// Unpacks a packed value (the two top bits are ignored).
    pub const fn unpack(packed: u32) -> Self {
        Self {
            major: ((packed >> (2 * COMPONENT_BITS)) & COMPONENT_MAX) as u16,
            minor: ((packed >> COMPONENT_BITS) & COMPONENT_MAX) as u16,
            patch: (packed & COMPONENT_MAX) as u16,
        }
    }

    /// Parses `major.minor.patch[-pre][+build]`; `None` on anything else.
    pub fn parse(text: &str) -> Option<Self> {
        let core = text.split(['-', '+']).next()?;
        let mut parts = core.split('.');
        let mut next = || -> Option<u16> {
            let part = parts.next()?;
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let value: u16 = part.parse().ok()?;
            (u32::from(value) <= COMPONENT_MAX).then_some(value)
        };
        let version = Self {
            major: next()?,
            minor: next()?,
            patch: next()?,
        };
        parts.next().is_none().then_some(version)
    }
}

impl std::fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The server-side gate: `client >= min && client >> 10 <= server >> 10` (patch never matters
/// for the upper bound).
pub const fn is_compatible(client: u32, server: u32, min: u32) -> bool {
    client >= min && (client >> COMPONENT_BITS) <= (server >> COMPONENT_BITS)
}

/// The packed version the 0.11.1-edge.9 SDK sends (`iggy_binary_protocol` 0.11.1-edge.8 packs
/// an explicit `0.12.2` instead of its crate version): `0x00003002`.
pub const PROTOCOL_VERSION_EDGE9: u32 = 0x0000_3002;

const _: () = assert!(PROTOCOL_VERSION_EDGE9 == ((12 << COMPONENT_BITS) | 2));

/// The highest version eddy accepts, as the `IncompatibleProtocol` window advertises it.
pub const PROTOCOL_VERSION_MAX: u32 = PROTOCOL_VERSION_EDGE9;

/// The wire revision a session speaks, chosen at login from the client's packed version
/// (`docs/iggy-sdk-revisions.md` lists what differs). Everything before login is the same in
/// both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Revision {
    /// Protocol 0.11.x: the `iggy` 0.11.0-edge.4 crates, and SDKs built on that wire (the
    /// Python `apache-iggy` 0.9.0).
    #[default]
    V0_11,
    /// Protocol 0.12.2: the `iggy` 0.11.1-edge.9 crates (a bind secret in the login body, a
    /// random request identifier instead of the body checksum, `UPDATE_RESOURCE`, partition
    /// routes, a 33-byte topic header, derived option blocks, poll contexts).
    V0_12_2,
}

impl Revision {
    /// The revision of a client that sent `client` at login; `None` outside every window eddy
    /// serves (0.11.x, and 0.12.2 exactly: edge builds between them share numbers with other
    /// layouts).
    pub const fn of(client: u32) -> Option<Self> {
        if is_compatible(client, PROTOCOL_VERSION, PROTOCOL_VERSION_MIN) {
            Some(Self::V0_11)
        } else if client == PROTOCOL_VERSION_EDGE9 {
            Some(Self::V0_12_2)
        } else {
            None
        }
    }

    /// The packed version login replies of this revision carry.
    pub const fn protocol_version(self) -> u32 {
        match self {
            Self::V0_11 => PROTOCOL_VERSION,
            Self::V0_12_2 => PROTOCOL_VERSION_EDGE9,
        }
    }

    /// Whether this is the 0.12.2 wire.
    pub const fn is_v0_12(self) -> bool {
        matches!(self, Self::V0_12_2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sdk_version_packs_to_spec_value() {
        let v = ProtocolVersion::parse("0.11.0-edge.4").unwrap();
        assert_eq!(v.pack(), Some(0x2C00));
        assert_eq!(ProtocolVersion::unpack(0x2C00), v);
        assert_eq!(v.to_string(), "0.11.0");
        assert_eq!(ProtocolVersion::parse("10.0.0+build.5").unwrap().major, 10);
        assert!(ProtocolVersion::parse("1.2").is_none());
        assert!(ProtocolVersion::parse("1.2.3.4").is_none());
        assert!(ProtocolVersion::parse("1.2.1024").is_none());
        assert!(ProtocolVersion::parse("1.x.3").is_none());
    }

    #[test]
    fn gate_accepts_every_patch_of_the_minor_only() {
        let s = PROTOCOL_VERSION;
        let m = PROTOCOL_VERSION_MIN;
        assert!(is_compatible(0x2C00, s, m));
        assert!(is_compatible(0x2C00 | COMPONENT_MAX, s, m));
        assert!(!is_compatible(0x2BFF, s, m));
        assert!(!is_compatible(0x3000, s, m));
    }

    #[test]
    fn revisions_by_client_version() {
        assert_eq!(Revision::of(0x2C00), Some(Revision::V0_11));
        assert_eq!(Revision::of(0x2C05), Some(Revision::V0_11));
        assert_eq!(Revision::of(0x3002), Some(Revision::V0_12_2));
        for other in [0x2BFF, 0x3000, 0x3001, 0x3003, 0x3400] {
            assert_eq!(Revision::of(other), None, "{other:#x}");
        }
        assert_eq!(Revision::V0_12_2.protocol_version(), PROTOCOL_VERSION_EDGE9);
        assert_eq!(
            ProtocolVersion::unpack(PROTOCOL_VERSION_EDGE9).to_string(),
            "0.12.2"
        );
    }
}
