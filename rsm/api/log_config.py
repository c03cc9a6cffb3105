"""The topic configuration Kafka passes to every RSM operation (the KIP "topic configs for the RSM").

Kafka's `LogConfig` gains `uncheckedConfigs()`: the topic's keys prefixed `unchecked.`, stored by the
controller without validation so a plugin can define its own per-topic settings. Here a `LogConfig` is an
immutable string-to-string mapping (Kafka's configs travel as strings over the admin API and the bridge).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

UNCHECKED_PREFIX = "unchecked."


@dataclass(frozen=True, init=False)
class LogConfig(Mapping[str, str]):
    """A topic's configuration: `LogConfig({"retention.ms": "...", "unchecked.rsm.bucket": "a"})`."""

    configs: Mapping[str, str] = field(default_factory=dict)

    def __init__(self, configs: Mapping[str, object] | None = None) -> None:
        values: dict[str, str] = {}
        for key, value in dict(configs or {}).items():
            if not isinstance(key, str):
                raise TypeError(f"topic config keys must be strings, got {key!r}")
            if value is None:
                continue
            values[key] = _as_config_string(value)
        object.__setattr__(self, "configs", MappingProxyType(values))

    def unchecked_configs(self) -> dict[str, str]:
        """The topic's `unchecked.*` keys with their values (Kafka's `LogConfig.uncheckedConfigs()`)."""
        return {k: v for k, v in self.configs.items() if k.startswith(UNCHECKED_PREFIX)}

    def __getitem__(self, key: str) -> str:
        return self.configs[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.configs)

    def __len__(self) -> int:
        return len(self.configs)

    def __hash__(self) -> int:
        return hash(frozenset(self.configs.items()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LogConfig):
            return dict(self.configs) == dict(other.configs)
        if isinstance(other, Mapping):
            return dict(self.configs) == dict(other)
        return NotImplemented

    def __reduce__(self) -> tuple[type[LogConfig], tuple[dict[str, str]]]:
        return (LogConfig, (dict(self.configs),))

    def __repr__(self) -> str:
        return f"LogConfig({dict(self.configs)!r})"


def _as_config_string(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
