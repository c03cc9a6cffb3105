"""What `configure` decides is one immutable value, what it builds is one set of services, swapped as a pair.

The settings (`rsm.broker_settings.RsmSettings`) are made once from the broker's keys and cannot be
changed; the services (`rsm.services.RsmServices`) are what the operations use. A reconfiguration replaces
both at once, a refused one replaces neither, and the copy's helpers work from the one service they use
(here: a failed copy's clean-up from the store alone), on the real file store.
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import pytest
from kafka_segments import make_segment, read_all

from rsm import RemoteStorageManager, TopicIdPartition
from rsm.api.errors import ConfigException
from rsm.broker_settings import RsmSettings
from rsm.copy.cleanup import remove_failed_copy
from rsm.services import RsmServices
from rsm.store.layout import Location, SegmentKeys
from rsm.stored import custom_metadata as cm


def _configs(root: Path, **more: str) -> dict[str, str]:
    return {"storage.backend": "file", "storage.file.root": str(root), "bucket": "tiers", **more}


def test_configure_makes_the_settings_once_and_they_cannot_change(tmp_path: Path) -> None:
    rsm = RemoteStorageManager()
    rsm.configure(
        _configs(
            tmp_path,
            prefix="p/",
            **{
                "catalog.bucket": "home",
                "fetch.prefetch.chunks": "3",
                "copy.timeout.ms": "2500",
                "manifest.require.authenticated": "false",
                "topic.overlay.cache.ms": "0",
            },
        )
    )
    try:
        settings, services = rsm._state.configured()
        assert isinstance(settings, RsmSettings) and isinstance(services, RsmServices)
        assert settings.home == Location("home", "p/")  # catalog.bucket, the prefix from `prefix`
        assert settings.data_default == Location("tiers", "p/")
        assert (settings.prefetch_chunks, settings.copy_timeout_s, settings.overlay_ttl_ms) == (3, 2.5, 0)
        assert settings.require_authenticated is False and settings.record_policy_class is None
        assert settings.plain["fetch.prefetch.chunks"] == "3"
        with pytest.raises(dataclasses.FrozenInstanceError):
            settings.prefetch_chunks = 8  # type: ignore[misc]
        with pytest.raises(TypeError):
            settings.plain["bucket"] = "elsewhere"  # type: ignore[index]
        with pytest.raises(dataclasses.FrozenInstanceError):
            services.store = services.store  # type: ignore[misc]
        # the services are those of these settings: documents at the catalog home
        assert (services.registry.bucket, services.overlays.overlays.bucket) == ("home", "home")
    finally:
        rsm.close()


def test_reconfiguration_swaps_the_pair_and_a_refused_one_swaps_nothing(tmp_path: Path) -> None:
    tip = TopicIdPartition(uuid.uuid4(), "orders", 0)
    seg = make_segment(tmp_path / "seg", tip, batches=3)
    rsm = RemoteStorageManager()
    rsm.configure(_configs(tmp_path / "store"))
    try:
        custom = rsm.copy_log_segment_data(seg.metadata, seg.data)
        first = rsm._state.configured()
        rsm.configure(_configs(tmp_path / "store", prefix="new/"))
        second = rsm._state.configured()
        assert second[0] is not first[0] and second[1] is not first[1]
        assert second[0].data_default == Location("tiers", "new/") and first[0].data_default.prefix == ""
        # refused before anything is swapped: the settings and services in use stay
        with pytest.raises(ConfigException, match="encryption.keyring.path"):
            rsm.configure(_configs(tmp_path / "store", **{"encryption.enabled": "true"}))
        assert rsm._state.configured() is second
        # the segment copied under the first settings is still found where its custom metadata says
        assert cm.decode(custom) == Location("tiers", "")
        md = dataclasses.replace(seg.metadata, custom_metadata=custom)
        assert read_all(rsm.fetch_log_segment(md, 0)) == seg.data.log_segment.read_bytes()
    finally:
        rsm.close()


def test_a_failed_copy_is_cleaned_up_from_the_store_alone(tmp_path: Path) -> None:
    tip = TopicIdPartition(uuid.uuid4(), "orders", 0)
    seg = make_segment(tmp_path / "seg", tip, batches=2)
    rsm = RemoteStorageManager()
    rsm.configure(_configs(tmp_path / "store"))
    try:
        store = rsm._state.services.store
        keys = SegmentKeys.of(Location("tiers", ""), seg.metadata)
        for key in keys.all():  # what a copy cut short may have left
            store.put(keys.bucket, key, b"partial")
        assert remove_failed_copy(store, seg.metadata, keys) is True
        assert not any(store.exists(keys.bucket, key) for key in keys.all())
    finally:
        rsm.close()
