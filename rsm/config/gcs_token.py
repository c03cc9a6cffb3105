"""`storage.gcs.token` checked as what it claims to be: a keyword, or the path of a JSON credentials file.

gcsfs takes anything it is not told otherwise as an OAuth access token and sends it to Google (a token-info
request), so a mistyped path became a network call, and a real token pasted there ended up verbatim in the
resulting exception. Here the value is one of gcsfs's keywords (`anon` for an emulator, `google_default`,
`cloud` for the metadata server), or a file that exists and holds a service account's or an authorized
user's credentials with the fields Google's libraries need. Anything else is refused when the configuration
is read, naming the key, and a value that is not a path is never echoed (it may be a token).
"""

from __future__ import annotations

import json
from pathlib import Path

from rsm.api.errors import ConfigException

KEYWORDS = ("anon", "google_default", "cloud")
REQUIRED = {
    "service_account": ("client_email", "private_key", "token_uri"),
    "authorized_user": ("client_id", "client_secret", "refresh_token"),
    "external_account": ("audience", "subject_token_type", "token_url"),
}

__all__ = ["KEYWORDS", "REQUIRED"]


def _looks_like_path(value: str) -> bool:
    return "/" in value or "\\" in value or value.endswith(".json") or value.startswith("~")


def _gcs_token(key: str, value: str) -> str:
    """The setting's parser (see the module docstring); returns the keyword or the expanded path."""
    v = value.strip()
    if v in KEYWORDS:
        return v
    if not _looks_like_path(v):
        raise ConfigException(
            f"config {key} must be {', '.join(KEYWORDS)} or the path of a JSON credentials file; the value "
            "given is none of these (not shown: it may be a token; tokens are never accepted here)"
        )
    path = Path(v).expanduser()
    if not path.is_file():
        raise ConfigException(
            f"config {key}: {path} is not a file (a service account or authorized user JSON)"
        )
    try:
        doc = json.loads(path.read_bytes())
    except OSError as exc:
        raise ConfigException(f"config {key}: cannot read {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        where = f" (line {exc.lineno})" if isinstance(exc, json.JSONDecodeError) else ""
        raise ConfigException(f"config {key}: {path} is not JSON{where}") from None
    kind = doc.get("type") if isinstance(doc, dict) else None
    if kind not in REQUIRED:
        raise ConfigException(
            f"config {key}: {path} is not a Google credentials file (its type is {kind!r}; expected one of "
            f"{', '.join(REQUIRED)})"
        )
    missing = [field for field in REQUIRED[kind] if not isinstance(doc.get(field), str) or not doc[field]]
    if missing:
        raise ConfigException(f"config {key}: {path} ({kind}) lacks {', '.join(missing)}")
    return str(path)
