"""Deprecated path of the topic's `LogConfig`, which lives in `rsm.api.log_config` (and is exported by `rsm`).
Every name still resolves here, with a DeprecationWarning naming its new path."""

from rsm.api.moved import moved_names

__getattr__, __dir__ = moved_names(
    __name__, {"LogConfig": "rsm.api.log_config", "UNCHECKED_PREFIX": "rsm.api.log_config"}
)
