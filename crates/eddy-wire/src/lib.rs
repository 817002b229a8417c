//! Sans-IO framing of eddy's two wire protocols (Iggy 256-byte headers, Celeriant 17-byte headers).
