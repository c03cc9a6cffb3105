"""``rsm bridge serve``: the bridge process's entry point - read the broker's properties, configure the RSM,
serve it on the socket until SIGTERM (or the broker is gone).

Why a module of its own: turning properties into a configured server is the one place every ``bridge.*``
setting the bridge reads is parsed; the server itself takes typed arguments.
"""

from __future__ import annotations

import importlib
import logging
import signal
from pathlib import Path
from typing import Any

from rsm.bridge import shm
from rsm.bridge.admission import Limits, setting_int
from rsm.bridge.memory import DEFAULT_MALLOC_ARENAS, DEFAULT_MMAP_THRESHOLD_BYTES, tune_allocator
from rsm.bridge.policy_ops import policy_handlers
from rsm.bridge.protocol import DEFAULT_DATA_FRAME_BYTES
from rsm.bridge.server import DEFAULT_INITIAL_FRAME_BYTES, DEFAULT_SEND_BUFFER_BYTES, BridgeServer
from rsm.config.properties import load_properties, mask_configs, split_rsm_configs

log = logging.getLogger("rsm.bridge.server")  # the name operators' log configurations already know


def _load_class(spec: str) -> type:
    module_name, _, attr = spec.partition(":")
    if not attr:
        module_name, _, attr = spec.rpartition(".")
    module = importlib.import_module(module_name)
    return getattr(module, attr)


def serve(
    config_path: Path,
    socket_path: Path | None,
    *,
    rsm_class: str | None = None,
    parent_pid: int | None = None,
) -> int:
    """`rsm bridge serve`: configure the RSM from a broker properties file and serve until SIGTERM."""
    props = load_properties(config_path)
    rsm_configs, settings = split_rsm_configs(props)
    if socket_path is None:
        raw = settings.get("bridge.socket.path")
        if not raw:
            raise ValueError(f"no --socket given and no rsm.config.bridge.socket.path in {config_path}")
        socket_path = Path(raw)
    frame_bytes = setting_int(settings, "bridge.frame.bytes", DEFAULT_DATA_FRAME_BYTES)
    initial_frame_bytes = setting_int(settings, "bridge.frame.initial.bytes", DEFAULT_INITIAL_FRAME_BYTES)
    grace = setting_int(settings, "bridge.shutdown.grace.ms", 10000) / 1000.0
    send_buffer = setting_int(settings, "bridge.socket.send.buffer.bytes", DEFAULT_SEND_BUFFER_BYTES)
    mmap_threshold = setting_int(settings, "bridge.malloc.mmap.threshold.bytes", DEFAULT_MMAP_THRESHOLD_BYTES)
    arenas = setting_int(settings, "bridge.malloc.arenas", DEFAULT_MALLOC_ARENAS)
    transport = settings.get("bridge.transport", "shm").strip().lower()
    if transport not in ("shm", "socket"):
        raise ValueError(f"bridge.transport={transport!r}: expected 'shm' or 'socket'")
    shm_dir_raw = settings.get("bridge.shm.dir")
    permits_raw = settings.get("bridge.fetch.permits", "").strip()
    arena_raw = settings.get("bridge.arena.blocks", "").strip()
    if tune_allocator(mmap_threshold, arenas):
        log.info("glibc malloc tuned: mmap threshold %d bytes, %d arena(s)", mmap_threshold, arenas)
    if rsm_class:
        cls = _load_class(rsm_class)
    else:
        from rsm import RemoteStorageManager as cls  # noqa: N813 - the default class
    rsm = cls()
    log.info("configuring %s with %s", cls.__name__, mask_configs(rsm_configs))
    rsm.configure(dict(rsm_configs))
    server = BridgeServer(
        rsm,
        socket_path,
        configs=rsm_configs,
        frame_bytes=frame_bytes,
        initial_frame_bytes=initial_frame_bytes,
        shutdown_grace_s=grace,
        send_buffer_bytes=send_buffer,
        shm_enabled=transport == "shm",
        shm_dir=Path(shm_dir_raw) if shm_dir_raw else None,
        shm_slots=setting_int(settings, "bridge.shm.slots", shm.DEFAULT_SLOTS),
        shm_slot_bytes=setting_int(settings, "bridge.shm.slot.bytes", shm.DEFAULT_SLOT_BYTES),
        fetch_permits=setting_int(settings, "bridge.fetch.permits", 0) if permits_raw else None,
        arena_blocks=setting_int(settings, "bridge.arena.blocks", 0) if arena_raw else None,
        limits=Limits.from_settings(settings),
        handlers=policy_handlers(rsm),  # the broker's topic policy classes ask the RSM's policy
    )
    server.bind()
    from rsm.metrics import serve_prometheus_from_config

    try:  # after bind: a second bridge refused there never takes the port
        serve_prometheus_from_config(rsm_configs)
    except (OSError, ValueError) as exc:  # the broker's tiering goes on without the endpoint
        log.error("no Prometheus endpoint (metrics.prometheus.port): %s", exc)

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("signal %d received", signum)
        server.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server.serve_forever(parent_pid=parent_pid)
    return 0
