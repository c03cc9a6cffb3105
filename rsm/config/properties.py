"""The broker's properties file as the bridge and the tools read it: ``rsm.config.*`` keys for the RSM,
``bridge.*`` keys for the bridge itself.

Why here, in the configuration: the bridge, the CLI (``rsm topic-config``, ``store``, ``migrate``) and the
Spark reader (its ``rsm.properties`` option) read the same file, and none of them should need the others.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path

RSM_CONFIG_PREFIX = "rsm.config."
BRIDGE_KEY_PREFIX = "bridge."  # keys for the plugin/bridge themselves, not passed to the RSM


def load_properties(path: Path) -> dict[str, str]:
    """Parse a Java properties file (the broker's server.properties) into a dict.

    Handles comments (# and !), `key=value`, `key: value` and `key value`, trailing-backslash line
    continuations and the common escapes; enough for broker configs, which are simple.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read properties file {path}: {exc.strerror}") from None
    props: dict[str, str] = {}
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip() if not pending else raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        backslashes = len(line) - len(line.rstrip("\\"))
        if backslashes % 2 == 1:
            pending += line[:-1]
            continue
        logical.append(pending + line)
        pending = ""
    if pending:
        logical.append(pending)
    for line in logical:
        key, value = _split_property(line)
        props[_unescape(key)] = _unescape(value)
    return props


def _split_property(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=: \t":
            break
        i += 1
    key = line[:i]
    rest = line[i:].lstrip(" \t")
    if rest[:1] in ("=", ":") and (i >= len(line) or line[i] in " \t=:"):
        rest = rest[1:].lstrip(" \t")
    return key, rest


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    mapping = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and i + 5 < len(text) + 0:
                with contextlib.suppress(ValueError):
                    out.append(chr(int(text[i + 2 : i + 6], 16)))
                    i += 6
                    continue
            out.append(mapping.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def split_rsm_configs(props: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """Broker properties -> (configs for RemoteStorageManager.configure, bridge.* settings).

    Kafka strips `rsm.config.` before calling configure(); the bridge does the same, and keeps the
    `bridge.*` keys (socket path, command, pool size, ...) for itself.
    """
    rsm_configs: dict[str, str] = {}
    bridge_settings: dict[str, str] = {}
    for key, value in props.items():
        if not key.startswith(RSM_CONFIG_PREFIX):
            continue
        stripped = key[len(RSM_CONFIG_PREFIX) :]
        if stripped.startswith(BRIDGE_KEY_PREFIX):
            bridge_settings[stripped] = value
        else:
            rsm_configs[stripped] = value
    return rsm_configs, bridge_settings


def mask_configs(configs: Mapping[str, str]) -> dict[str, str]:
    """Configs with sensitive values replaced, safe for logs and the configure_info answer (URLs'
    credentials and secret-looking values too: `rsm.config.redact.redact_configs`)."""
    from rsm.config.redact import redact_configs

    return redact_configs(configs)


def rsm_configs_from_file(path: Path) -> dict[str, str]:
    """The RSM's keys in one file, for the tools: a broker's server.properties (its ``rsm.config.*`` keys,
    bridge ones left out) or an rsm.properties of bare keys (``bridge.*`` left out), so one file serves
    the broker and `rsm store` / `rsm migrate` / `rsm dump-tiered`."""
    props = load_properties(path)
    configs, _ = split_rsm_configs(props)
    return configs or {k: v for k, v in props.items() if not k.startswith(BRIDGE_KEY_PREFIX)}
