"""Configuration: the frozen models loaded from TOML (gateway settings, peers and pins), read by every layer above."""
