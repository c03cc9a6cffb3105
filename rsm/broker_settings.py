"""What a RemoteStorageManager's `configure` decided, as one immutable value.

Why apart from the services (`rsm.services`): the broker's `rsm.config.*` keys are read once, when Kafka
configures the RSM, and never change until the next `configure`; the store, the keyring, the policies and
the caches an operation talks to are things it *uses*. Kept as one frozen value, the settings can be handed
to any function without it being able to change them, a reconfiguration swaps the whole value at once (an
operation in flight keeps the one it started with), and a function's signature says whether it reads
settings, uses a service, or both.

It lives beside `rsm.services` and `rsm.state`, not in `rsm.config`: it names locations of the stored format
(`rsm.stored.layout.Location`), which itself reads the configuration's names. `RsmConfig` stays the parsed
configuration (it answers a topic's effective settings and their sources); the fields beside it are the
broker-level values the RSM's paths read on every operation, parsed once here rather than looked up (and
converted) per call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from rsm.config.settings import RsmConfig
from rsm.stored.layout import Location

__all__ = ["RsmSettings"]


@dataclass(frozen=True)
class RsmSettings:
    """The broker-level settings of one `configure` (see the module docstring)."""

    config: RsmConfig  # the parsed configuration: per-topic resolution, `describe`, every other key
    plain: Mapping[str, str]  # the keys as the broker handed them, as text (what plugins are configured with)
    home: Location  # the catalog home: where the store's own documents live (`catalog.bucket` / `prefix`)
    data_default: Location  # where new segments of a topic without its own bucket or prefix go
    overlay_ttl_ms: int  # how long topic overlays, encryption memory and home checks are cached
    copy_timeout_s: float  # the budget of one copy, its clean-up included (`copy.timeout.ms`)
    require_authenticated: bool  # fetch refuses manifests without a seal (`manifest.require.authenticated`)
    prefetch_chunks: int  # chunks a fetch stream reads ahead (`fetch.prefetch.chunks`)
    fetch_threads: int  # the fetch thread pool's size (`fetch.threads`)
    metrics_enabled: bool
    manifest_cache_bytes: int
    chunk_cache_bytes: int
    record_policy_class: str | None  # `record.validation.policy.class.name` (None: the built-in policies)
    topic_policy_class: str | None  # `policy.class.name` (None: the built-in topic policy)
    encryption_enabled: bool  # the broker's default (`encryption.enabled`)
    keyring_path: str | None  # `encryption.keyring.path`
    default_key_id: str | None  # `encryption.key.id`

    @classmethod
    def of(cls, configs: Mapping[str, str]) -> RsmSettings:
        """Parse and check the broker's keys (ConfigException naming the first bad one)."""
        return cls.from_config(RsmConfig(configs), configs)

    @classmethod
    def from_config(cls, config: RsmConfig, configs: Mapping[str, object]) -> RsmSettings:
        def text(name: str) -> str | None:
            value = config.get(name)
            return str(value) if value else None

        return cls(
            config=config,
            plain=MappingProxyType({k: str(v) for k, v in configs.items()}),
            home=Location(config.catalog_bucket, config.catalog_prefix),
            data_default=Location(str(config.get("bucket")), str(config.get("prefix"))),
            overlay_ttl_ms=int(config.get("topic.overlay.cache.ms")),  # type: ignore[call-overload]
            copy_timeout_s=int(config.get("copy.timeout.ms")) / 1000,  # type: ignore[call-overload]
            require_authenticated=bool(config.get("manifest.require.authenticated")),
            prefetch_chunks=int(config.get("fetch.prefetch.chunks")),  # type: ignore[call-overload]
            fetch_threads=int(config.get("fetch.threads")),  # type: ignore[call-overload]
            metrics_enabled=bool(config.get("metrics.enabled")),
            manifest_cache_bytes=int(config.get("cache.manifest.bytes")),  # type: ignore[call-overload]
            chunk_cache_bytes=int(config.get("cache.chunk.bytes")),  # type: ignore[call-overload]
            record_policy_class=text("record.validation.policy.class.name"),
            topic_policy_class=text("policy.class.name"),
            encryption_enabled=bool(config.get("encryption.enabled")),
            keyring_path=text("encryption.keyring.path"),
            default_key_id=text("encryption.key.id"),
        )
