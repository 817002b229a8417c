//! Users, passwords, permissions, tokens, sessions, RSA identity and API keys.
