//! Every request and reply of both eddy protocols, shared encodings and message batches.
