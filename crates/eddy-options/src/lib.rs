//! The option catalogs (topic, stream, user) of the stream protocol and their options block.
