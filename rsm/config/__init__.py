"""Configuration: every setting (`settings`), per-topic overlays read through a cache (`overlay`; the document
is `rsm.stored.overlay`), names, the keyring, redaction of secrets."""
