"""Configuration: every setting (`settings`), per-topic overlays, names, the keyring, redaction of secrets."""
