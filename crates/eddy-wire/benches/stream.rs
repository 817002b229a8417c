// Filled by the stream protocol work.
fn main() {}
