//! The byte-level vocabulary of index files: limits, magics, sizes and file names.

/// Target size of a run's data block.
pub const BLOCK_TARGET: usize = 8 * 1024;
/// Largest data block accepted when reading (a block ends after the entry crossing the target).
pub(super) const MAX_BLOCK_LEN: u64 = 4 * 1024 * 1024;
/// Largest index value accepted when reading.
pub(super) const MAX_VALUE_LEN: usize = 2 * 1024 * 1024;
/// Bloom bits per point key (about 0.8 % false positives with 8 bits set per key).
pub(super) const BLOOM_BITS_PER_KEY: u64 = 10;
/// At most this many frozen memtables wait for their flush; appliers wait beyond it.
pub(super) const MAX_FROZEN: usize = 2;
/// Bytes charged per memtable entry on top of its key and value.
pub(super) const ENTRY_OVERHEAD: u64 = 64;
pub(super) const RUN_MAGIC: [u8; 8] = *b"EDDYEIX\0";
pub(super) const FOOTER_MAGIC: [u8; 8] = *b"EIXFOOT\0";
pub(super) const MANIFEST_MAGIC: [u8; 8] = *b"EDDYEMF\0";
pub(super) const INDEX_VERSION: u32 = 1;
pub(super) const RUN_HEADER_LEN: usize = 32;
pub(super) const FOOTER_LEN: usize = 64;
/// Name of the manifest file.
pub const MANIFEST: &str = "MANIFEST";
/// Most runs a manifest may list.
pub(super) const MAX_RUNS: usize = 1024;

pub(super) fn le_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_le_bytes(a)
}

pub(super) fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

pub(super) fn run_file_name(id: u64) -> String {
    format!("run-{id:020}.eix")
}

pub(super) fn parse_run_name(name: &str) -> Option<u64> {
    name.strip_prefix("run-")?
        .strip_suffix(".eix")?
        .parse()
        .ok()
}
