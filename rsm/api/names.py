"""Names that become parts of object paths: Kafka topic names, bucket names, key prefixes, object keys.

Why a module of their own: these names reach the store through many doors (the broker's `rsm.config.*`, a
topic's `unchecked.rsm.*` keys or overlay, the custom metadata Kafka hands back, a manifest read from the
store, the `rsm` CLI, the value types the bridge builds), and a name let through one door unchecked once
made the file store unlink and read files outside its root. Every door refuses the same things
with the same rules, written once here.

Each function answers what is wrong with a name, or None when it is fine, so every entry point raises its
own exception naming its own key or object (`config unchecked.rsm.prefix ...`, `custom metadata ...`,
`manifest s3://... location.log ...`). Messages show names with `repr`, so a control character in a hostile
name cannot forge a log line.
"""

from __future__ import annotations

import re
import string

TOPIC_MAX_LENGTH = 249  # Kafka's Topic.MAX_NAME_LENGTH
BUCKET_MAX_LENGTH = 63  # S3's limit, kept for the file store too so data can move between backends
S3_BUCKET_MIN_LENGTH = 3  # S3 only: a file store bucket is a directory, one character is enough
PREFIX_MAX_BYTES = (
    60  # keeps the custom metadata within Kafka's default 128 bytes (rsm.stored.custom_metadata)
)
KEY_MAX_BYTES = 1024  # S3's limit on object keys

_TOPIC_CHARS = frozenset(string.ascii_letters + string.digits + "._-")
_BUCKET_CHARS = frozenset(string.ascii_lowercase + string.digits + ".-")
_IPV4 = re.compile(r"\d{1,3}(\.\d{1,3}){3}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# what no object key may hold: an empty, "." or ".." segment (so also a leading or trailing "/" and "//"),
# a backslash (a separator on some file systems and tools) or a control character
_BAD_KEY = re.compile(r"(?:^|/)\.{0,2}(?:/|$)|\\|[\x00-\x1f\x7f]")


def topic_problem(name: object) -> str | None:
    """What makes `name` an illegal Kafka topic name (Kafka's `Topic.validate` rules), or None."""
    if not isinstance(name, str):
        return f"must be a string, got {type(name).__name__}"
    if not name:
        return "is empty"
    if len(name) > TOPIC_MAX_LENGTH:
        return f"is {len(name)} characters long, over Kafka's {TOPIC_MAX_LENGTH}"
    if name in (".", ".."):
        return "cannot be '.' or '..'"
    if not _TOPIC_CHARS.issuperset(name):
        return "may hold only ASCII letters, digits, '.', '_' and '-'"
    return None


def bucket_problem(name: object, min_length: int = 1) -> str | None:
    """What makes `name` unusable as a bucket (S3's naming rules; `min_length` 3 on S3), or None.

    Lowercase letters, digits, dots and hyphens, beginning and ending with a letter or digit, no "..", not
    shaped like an IPv4 address, at most 63 characters: such a name is one plain directory on the file store
    and a valid bucket on S3.
    """
    if not isinstance(name, str):
        return f"must be a string, got {type(name).__name__}"
    if not min_length <= len(name) <= BUCKET_MAX_LENGTH:
        return f"must be {min_length} to {BUCKET_MAX_LENGTH} characters long, is {len(name)}"
    if not _BUCKET_CHARS.issuperset(name):
        return "may hold only lowercase letters, digits, '.' and '-'"
    if not (name[0].isalnum() and name[-1].isalnum()):
        return "must begin and end with a letter or a digit"
    if ".." in name:
        return "must not hold '..'"
    if _IPV4.fullmatch(name):
        return "must not be shaped like an IP address"
    return None


def prefix_problem(prefix: object) -> str | None:
    """What makes `prefix` unusable as a key prefix, or None.

    A prefix is used verbatim in front of `<topic>-<id>/...` (`tenant-a/` makes a directory level), so it
    must keep every key relative and inside its bucket: no leading "/", no "." or ".." segment, no empty
    segment ("a//b" is one directory on the file store but another key on S3), no backslash, no control
    character, and at most 60 bytes.
    """
    if not isinstance(prefix, str):
        return f"must be a string, got {type(prefix).__name__}"
    if len(prefix.encode()) > PREFIX_MAX_BYTES:
        return f"is {len(prefix.encode())} bytes long, over {PREFIX_MAX_BYTES}"
    if not prefix:
        return None
    # the last segment is followed by the topic's directory name, so it may be empty ("p/") but not a dot
    # segment; checking `prefix + "x"` as a key covers every other segment with the key rule
    last = prefix.rsplit("/", 1)[-1]
    if last in (".", "..") or _BAD_KEY.search(prefix + "x"):
        return "must be relative, without '.', '..' or empty segments, backslashes or control characters"
    return None


def key_problem(key: object) -> str | None:
    """What makes `key` unusable as an object key (it could address something else than one object)."""
    if not isinstance(key, str):
        return f"must be a string, got {type(key).__name__}"
    if _BAD_KEY.search(key):
        if _CONTROL.search(key):
            return "holds a control character"
        return "must be relative, without '.', '..' or empty segments or backslashes"
    if len(key.encode()) > KEY_MAX_BYTES:
        return f"is over {KEY_MAX_BYTES} bytes long"
    return None


def azure_container_problem(name: str) -> str | None:
    """What Azure refuses in a container name that `bucket_problem` lets through, or None: only lowercase
    letters, digits and single hyphens (no '.', no '--'), at least 3 characters."""
    if len(name) < S3_BUCKET_MIN_LENGTH:
        return f"must be {S3_BUCKET_MIN_LENGTH} to {BUCKET_MAX_LENGTH} characters on Azure, is {len(name)}"
    if "." in name:
        return "must not hold '.' on Azure (a container name is letters, digits and single hyphens)"
    if "--" in name:
        return "must not hold '--' on Azure (hyphens stand alone in a container name)"
    return None


def gcs_bucket_problem(name: str) -> str | None:
    """What GCS refuses in a bucket name that `bucket_problem` lets through, or None."""
    if len(name) < S3_BUCKET_MIN_LENGTH:
        return f"must be {S3_BUCKET_MIN_LENGTH} to {BUCKET_MAX_LENGTH} characters on GCS, is {len(name)}"
    if name.startswith("goog") or "google" in name:
        return "must not begin with 'goog' nor hold 'google' on GCS"
    return None


def s3_bucket_problem(name: str) -> str | None:
    """What S3 refuses in a bucket name that `bucket_problem` lets through, or None."""
    if len(name) < S3_BUCKET_MIN_LENGTH:
        return f"must be {S3_BUCKET_MIN_LENGTH} to {BUCKET_MAX_LENGTH} characters on S3, is {len(name)}"
    if name.startswith("xn--") or name.endswith("-s3alias"):
        return "must not begin with 'xn--' nor end with '-s3alias' on S3"
    return None


# each cloud's own rules on top of `bucket_problem` (the file store takes any name it does), by backend name
CLOUD_BUCKET_RULES = {"s3": s3_bucket_problem, "gcs": gcs_bucket_problem, "azure": azure_container_problem}
