"""How a setting is defined and parsed: the `Setting` record and the value parsers every setting uses.

Why a module of its own: the settings are defined in more than one module (`rsm.config.settings` for the
core, `rsm.config.cloud_settings` for the GCS, Azure and KMS ones), and each needs the same parsers with the
same one-line messages naming the key, never a secret value (`shown`).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from rsm.api.errors import ConfigException
from rsm.api.names import bucket_problem, prefix_problem
from rsm.config.redact import redact_url, shown


def _bool(key: str, value: str) -> bool:
    v = value.strip().lower()
    if v in ("true", "1", "yes", "on"):
        return True
    if v in ("false", "0", "no", "off"):
        return False
    raise ConfigException(f"config {key} must be true or false, got {shown(value)}")


def _size(key: str, value: str, lo: int = 0, hi: int = 1 << 62) -> int:
    text = value.strip().lower()
    units = {"k": 1024, "kib": 1024, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30}
    mult = 1
    for suffix in sorted(units, key=len, reverse=True):
        if text.endswith(suffix):
            mult, text = units[suffix], text[: -len(suffix)].strip()
            break
    try:
        n = int(text) * mult
    except ValueError:
        raise ConfigException(
            f"config {key} must be a byte size (e.g. 4194304 or 4MiB), got {shown(value)}"
        ) from None
    if not lo <= n <= hi:
        raise ConfigException(f"config {key} must be between {lo} and {hi} bytes, got {n}")
    return n


def _int(key: str, value: str, lo: int = 0, hi: int = 1 << 31) -> int:
    try:
        n = int(value.strip())
    except ValueError:
        raise ConfigException(f"config {key} must be an integer, got {shown(value)}") from None
    if not lo <= n <= hi:
        raise ConfigException(f"config {key} must be between {lo} and {hi}, got {n}")
    return n


def _str(key: str, value: str) -> str:
    return value.strip()


def _url(key: str, value: str) -> str:
    """An endpoint: an http(s) URL with a host (a malformed one is refused here, naming the key, rather than
    by the SDK at the first request). User information in it is never echoed (`redact_url`)."""
    v = value.strip()
    try:
        parts = urlsplit(v)
        parts.port  # noqa: B018 - raises ValueError for a port that is no number or out of range
    except ValueError as exc:
        raise ConfigException(f"config {key} is not a URL ({exc}): {redact_url(v)}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigException(
            f"config {key} must be an http:// or https:// URL with a host, got {redact_url(v)}"
        )
    return v


def _bucket(key: str, value: str) -> str:
    v = value.strip()
    problem = bucket_problem(v)
    if problem:
        raise ConfigException(f"config {key} must be a bucket name, got {shown(value)}: it {problem}")
    return v


def _prefix(key: str, value: str) -> str:
    v = value.strip()
    problem = prefix_problem(v)
    if problem:
        raise ConfigException(f"config {key} must be a relative key prefix, got {shown(value)}: it {problem}")
    return v


def _regex(key: str, value: str) -> re.Pattern[str]:
    try:
        return re.compile(value.strip())
    except re.error as exc:
        raise ConfigException(f"config {key} must be a regular expression, got {value!r}: {exc}") from None


def _enum(kind: type[enum.Enum]) -> Callable[[str, str], enum.Enum]:
    def parse(key: str, value: str) -> enum.Enum:
        try:
            return kind(value.strip().lower())
        except ValueError:
            allowed = ", ".join(str(m.value) for m in kind)
            raise ConfigException(f"config {key} must be one of {allowed}, got {shown(value)}") from None

    return parse


@dataclass(frozen=True)
class Setting:
    """One configuration key: how to parse it, its default, and whether a topic may override it."""

    name: str
    default: str | None
    parse: Callable[[str, str], object]
    doc: str
    topic: bool = False  # overridable by `unchecked.rsm.<name>`
    sensitive: bool = False
