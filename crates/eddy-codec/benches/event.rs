// Filled by the event protocol work.
fn main() {}
