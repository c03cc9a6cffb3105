"""Keeping credentials and key material out of everything the RSM shows: logs, exceptions, CLI output.

A secrets review found four leaks: the configured-RSM INFO line printed `storage.s3.endpoint.url`
verbatim (credentials written into a URL, `https://user:pass@host`, went to the log); a keyring whose id and
key were swapped printed the key and blamed the wrong field; a secret pasted into the wrong config key was
echoed back in the error (and by `rsm topic-config set --dry-run`); and botocore's DEBUG log showed the
session token. One module answers, for every place that shows a value:

- which keys are sensitive (`is_sensitive_key`): their values are never shown, only `[hidden]`;
- which values look like a secret whatever key they came under (`looks_secret`: base64 of 32 bytes as a
  keyring holds, an AWS access key id, a long random token): such a value given for an ordinary key is
  refused naming the key (`rsm.config.settings`), and messages say "a value that looks like a secret" (`shown`);
- how to show a URL (`redact_url`): user information and secret-looking query parameters replaced;
- how to clean any text (`redact_text`): URLs, `Authorization` / `X-Amz-Security-Token` headers, SigV4
  credentials and signatures, and the exact credentials this process was configured with.

Third-party DEBUG logs (botocore, aiobotocore, s3fs, urllib3, aiohttp) are cleaned by `SecretFilter`,
installed by `install_log_redaction` into the log record factory. Why this and not raising those loggers to
INFO: DEBUG is what an operator turns on to find out why S3 misbehaves, and a level we set is undone by any
logging configuration applied after ours (a `logging.ini`, `-vv`, a test's caplog), after which the token
would leak again; a redactor keeps DEBUG useful and safe whoever sets the levels. Why the record factory and
not `Logger.addFilter`: a logger's filters see only records logged on that very logger, not those
propagated from its children (`botocore.endpoint`, `botocore.auth`, created as modules import), and a
handler's filters only cover handlers that exist when we install it; the factory sees every record when it
is made, before any handler, whichever logger made it.
"""

from __future__ import annotations

import base64
import binascii
import logging
import math
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

MASK = "[hidden]"
REDACTED = "[redacted]"
HIDDEN_VALUE = "a value that looks like a secret (not shown)"

# fragments of a key name that mark its value as a credential
SENSITIVE_MARKERS = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "credential",
    "access.key",
    "session",
    "private",
    "key.material",
)
# loggers whose records are cleaned (prefixes of logger names): the S3 stack, its event loop, and ours
REDACTED_LOGGERS = (
    "botocore",
    "aiobotocore",
    "boto3",
    "s3transfer",
    "s3fs",
    "gcsfs",
    "google",
    "adlfs",
    "azure",
    "fsspec",
    "urllib3",
    "aiohttp",
    "asyncio",
    "rsm",
    "spark_reader",
)
KEY_BYTES = 32
_AWS_KEY_ID = re.compile(r"(?:AKIA|ASIA|AIDA|AROA|ANPA|ANVA|AGPA)[A-Z0-9]{16}")
_TOKEN_CHARS = re.compile(r"[A-Za-z0-9+/=_-]+")
_MIN_TOKEN = 32  # AWS secret keys are 40 characters, keyring keys 44, session tokens hundreds
_WORDS = re.compile(r"[a-z]{6,}")


def is_sensitive_key(name: str) -> bool:
    """True for a config key whose value is a credential (`storage.s3.secret.access.key`, `...token`)."""
    lowered = name.lower()
    return any(marker in lowered for marker in SENSITIVE_MARKERS)


def looks_like_key_material(value: object) -> bool:
    """True for base64 of exactly 32 bytes (padded, standard or URL-safe alphabet): a keyring key.

    Nothing else a user writes into a config has that shape, so it is safe to refuse and to hide.
    """
    if not isinstance(value, str):
        return False
    text = value.strip()
    if len(text) != 44 or not text.endswith("=") or text.endswith("==") or not _TOKEN_CHARS.fullmatch(text):
        return False
    if ("-" in text or "_" in text) and ("+" in text or "/" in text):
        return False  # two alphabets mixed: not base64
    try:
        raw = base64.b64decode(text.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        return False
    return len(raw) == KEY_BYTES


def _entropy(text: str) -> float:
    """Shannon entropy in bits per character."""
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def _class_changes(text: str) -> float:
    """How often the next character is of another class (upper, lower, digit, other): about 0.65 in random
    base64, under 0.45 in CamelCase words and paths, whose letters come in runs."""

    def kind(c: str) -> int:
        return 0 if c.isupper() else 1 if c.islower() else 2 if c.isdigit() else 3

    return sum(kind(a) != kind(b) for a, b in zip(text, text[1:], strict=False)) / (len(text) - 1)


def looks_secret(value: object) -> bool:
    """True for a value that looks like a credential whatever key it came under: key material, an AWS
    access key id, or a long random token.

    Why a heuristic at all: a secret pasted into the wrong key (`prefix=<secret key>`) would otherwise be
    stored, printed by `--dry-run` and echoed in errors. A random token is told from what people write
    (names, paths, prefixes such as `Tenant42/ProductionCluster7/`) by being 32+ characters of the base64
    alphabet mixing upper- and lowercase letters and digits, with no two lowercase words of six letters or
    more covering a fifth of it, and with character classes changing as often as in random text (measured:
    about 1 in 100 random 32-character tokens and 1 in 250 AWS-sized ones pass unnoticed; the credentials
    this process was configured with are redacted exactly anyway, see `register_secrets`).
    """
    if not isinstance(value, str):
        return False
    text = value.strip()
    if looks_like_key_material(text) or _AWS_KEY_ID.fullmatch(text):
        return True
    if len(text) < _MIN_TOKEN or not _TOKEN_CHARS.fullmatch(text):
        return False
    if not (
        any(c.isupper() for c in text) and any(c.islower() for c in text) and any(c.isdigit() for c in text)
    ):
        return False
    words = _WORDS.findall(text)
    if len(words) >= 2 and sum(map(len, words)) >= 0.2 * len(text):
        return False
    changes = _class_changes(text)
    return changes >= 0.45 or (changes >= 0.35 and _entropy(text) >= 4.5)


def shown(value: object) -> str:
    """How a value given by a user appears in an error message: its `repr`, unless it looks secret."""
    return HIDDEN_VALUE if looks_secret(value) else repr(value)


# scheme://userinfo@ ; the userinfo ends at the last "@" before the path
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^/?#\s'\"<>@]*(?::[^/?#\s'\"<>]*)?)@")
_SECRET_PARAM = re.compile(
    r"(?i)([?&;](?:[a-z0-9_.-]*(?:signature|credential|token|password|passwd|secret|apikey|api_key|"
    r"access_key|accesskeyid|auth)[a-z0-9_.-]*|sig|key)=)([^&#\s'\"<>]*)"
)


def redact_url(text: str) -> str:
    """`text` with every URL's user information (`https://user:pass@host` -> `https://[redacted]@host`) and
    secret-looking query parameters (`X-Amz-Signature=`, `X-Amz-Security-Token=`, `password=`...)
    replaced. Any other text is returned unchanged."""
    if "://" not in text and "=" not in text:
        return text
    text = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    return _SECRET_PARAM.sub(lambda m: f"{m.group(1)}{REDACTED}", text)


def split_userinfo(url: str) -> tuple[str, str | None]:
    """(`url` without its user information, that user information or None)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, _, host = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=host)), userinfo


def endpoint_without_credentials(url: str, setting: str, signed_by: str, logger: logging.Logger) -> str:
    """`url` without its user information. Every store signs its requests its own way (`signed_by` says
    how), so credentials written into an endpoint URL are never used: they are registered as secrets (never
    shown again) and `logger` warns once, naming the setting, not them."""
    url, userinfo = split_userinfo(url)
    if userinfo is not None:
        register_secrets(userinfo, *userinfo.split(":", 1))
        logger.warning(
            "config %s carries credentials (user information, not shown): they are not used; %s",
            setting,
            signed_by,
        )
    return url


_HEADERS = (
    # "Authorization': b'AWS4-HMAC-SHA256 Credential=..." and "'X-Amz-Security-Token': b'...'" (dict reprs)
    re.compile(
        r"(?i)((?:proxy-)?authorization|x-amz-security-token|x-amz-server-side-encryption-customer-key[a-z0-9-]*)"
        r"(['\"]?\s*[:=]\s*b?['\"])([^'\"]*)"
    ),
    # canonical request lines: "x-amz-security-token:..." at the start of a line
    re.compile(r"(?im)^((?:proxy-)?authorization|x-amz-security-token)(:)(.*)$"),
    # SigV4: "Credential=AKIA.../20260101/..." and "Signature=<hex>", "Signature:\n<hex>"
    re.compile(r"(Credential)(=)([^/,\s'\"&]+)"),
    re.compile(r"(?i)(signature)(\s*[:=]\s*)([0-9a-f]{64})"),
    # KMS: a data key in the clear, in GenerateDataKey's and Decrypt's answers and Encrypt's request (JSON
    # bodies, dict reprs); Azure SAS signatures in URLs
    re.compile(r"(?i)(['\"]?plaintext['\"]?)(\s*[:=]\s*b?['\"])([^'\"]*)"),
    re.compile(r"(?i)([?&]sig)(=)([^&\s'\"]+)"),
)


class _Known:
    """The exact credentials this process was configured with, in every form they could be printed."""

    def __init__(self, limit: int = 64) -> None:
        self._lock = threading.Lock()
        self._limit = limit
        self._values: dict[str, None] = {}
        self._pattern: re.Pattern[str] | None = None

    def add(self, values: Iterable[str | None]) -> None:
        with self._lock:
            for value in values:
                # shorter ones would mangle ordinary words ("minio"); botocore shows credentials only in
                # the headers and SigV4 fields the patterns above clean whatever their length
                if value is None or len(value) < 8:
                    continue
                raw = value.encode()
                for form in (
                    value,
                    base64.b64encode(raw).decode(),
                    base64.b64encode(raw).decode().rstrip("="),
                    base64.urlsafe_b64encode(raw).decode().rstrip("="),
                ):
                    self._values.pop(form, None)
                    self._values[form] = None
            while len(self._values) > self._limit:
                del self._values[next(iter(self._values))]
            forms = sorted(self._values, key=len, reverse=True)
            self._pattern = re.compile("|".join(map(re.escape, forms))) if forms else None

    def sub(self, text: str) -> str:
        pattern = self._pattern
        return pattern.sub(REDACTED, text) if pattern is not None else text


_KNOWN = _Known()


def register_secrets(*values: str | None) -> None:
    """Remember credentials this process uses (S3 keys, a session token, URL user information), so that
    `redact_text` and the log filter replace them wherever they appear, in plain or base64 form."""
    _KNOWN.add(values)


def redact_text(text: str) -> str:
    """`text` with URLs' credentials, credential headers, SigV4 credentials and signatures, and every
    registered secret replaced by `[redacted]`."""
    text = redact_url(text)
    for pattern in _HEADERS:
        text = pattern.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    return _KNOWN.sub(text)


def redact_configs(configs: Mapping[str, str]) -> dict[str, str]:
    """Configs safe to log or answer: sensitive keys' values masked, URLs cleaned, secret-looking values
    hidden (a secret pasted under an ordinary key)."""
    out: dict[str, str] = {}
    for key, value in configs.items():
        if is_sensitive_key(key) or looks_secret(value):
            out[key] = MASK
        else:
            out[key] = redact_url(value) if isinstance(value, str) else value
    return out


class SecretFilter(logging.Filter):
    """Cleans a log record with `redact_text`: its message (formatted with its arguments, which may hold a
    request object whose repr carries headers), its exception text and its stack. Never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a record that cannot format is the handler's to report
            return True
        cleaned = redact_text(message)
        if cleaned != message or record.args:
            record.msg, record.args = cleaned, ()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        if record.stack_info:
            record.stack_info = redact_text(record.stack_info)
        return True


_install_lock = threading.Lock()
_installed: list[Callable[..., logging.LogRecord]] = []


def install_log_redaction() -> None:
    """Clean every record of the `REDACTED_LOGGERS` as it is made (see the module docstring); idempotent.

    The factory in place before (anyone's) still makes the record; ours only cleans it afterwards.
    """
    with _install_lock:
        if _installed and logging.getLogRecordFactory() is _installed[0]:
            return
        previous = logging.getLogRecordFactory()
        redactor = SecretFilter()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            if record.name.startswith(REDACTED_LOGGERS):
                redactor.filter(record)
            return record

        logging.setLogRecordFactory(factory)
        _installed[:] = [factory]
