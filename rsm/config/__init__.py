"""Configuration: every setting (`settings`), the keyring, redaction of secrets. Per-topic overlays are read
and cached by `rsm.store.overlays` (the document is `rsm.stored.overlay`); names are checked by
`rsm.api.names`."""
