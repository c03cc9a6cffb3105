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
    return _rsm_configs(load_properties(path))[0]


def _rsm_configs(props: Mapping[str, str]) -> tuple[dict[str, str], str]:
    """The RSM's keys and the prefix they carry in the file (``rsm.config.`` or none)."""
    configs, _ = split_rsm_configs(props)
    if configs:
        return configs, RSM_CONFIG_PREFIX
    return {k: v for k, v in props.items() if not k.startswith(BRIDGE_KEY_PREFIX)}, ""


def tool_configs(path: Path) -> dict[str, str]:
    """`rsm_configs_from_file` for a tool given the file: a key that is no setting is refused (ValueError,
    one line naming the key, the file and the closest setting), where a broker only warns. A misspelled
    key would otherwise leave its setting at the default, and a read succeed on an empty store."""
    configs, prefix = _rsm_configs(load_properties(path))
    check_known_keys(configs, path, prefix)
    return configs


def check_known_keys(configs: Mapping[str, str], path: Path, prefix: str = "") -> None:
    """ValueError ``unknown key bukcet in FILE: did you mean bucket?`` for keys of `configs` (without
    `prefix`, as the file spells them with it) that are no setting."""
    from rsm.config.settings import SETTINGS_BY_NAME, closest_setting, unknown_setting

    unknown = sorted(k for k in configs if k not in SETTINGS_BY_NAME)
    if not unknown:
        return
    if len(unknown) == 1:
        guess = closest_setting(unknown[0])
        hint = f": did you mean {prefix}{guess}?" if guess else " (no setting is close to it)"
        raise ValueError(f"unknown key {prefix}{unknown[0]} in {path}{hint}")
    named = ", ".join(unknown_setting(prefix + key, prefix) for key in unknown)
    raise ValueError(f"unknown keys in {path}: {named}")
