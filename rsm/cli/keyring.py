"""``rsm keyring new | add | list``: make and grow the keyring file that encryption uses.

The file is JSON, ``{"key-id": "<base64 256-bit key>", ...}`` (see :mod:`rsm.config.keyring`). ``new`` writes a
file with one fresh random key; ``add`` adds a fresh key under a new id (rotation: point
``encryption.key.id`` at it; old ids must stay, old segments name them); ``list`` prints the key ids.
Files are written owner-only (0600) and replaced atomically; a key is never printed, and ``list``
refuses a file that its group or other users can read.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import stat
import sys
import tempfile
from pathlib import Path

KEY_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class _Refused(Exception):
    """One line for the user."""


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "keyring",
        help="make a keyring file (owner-only) and add or list its key ids; keys are never printed",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="keyring_action", metavar="ACTION")
    parser.set_defaults(func=lambda _args: (parser.print_help(), 2)[1])
    p = actions.add_parser("new", help="write a new keyring file holding one fresh key")
    p.add_argument("path", type=Path, metavar="FILE")
    p.add_argument("--key-id", default="k1", help="id of its first key (default %(default)s)")
    p.set_defaults(func=_run, action="new")
    p = actions.add_parser("add", help="add a fresh key under a new id")
    p.add_argument("path", type=Path, metavar="FILE")
    p.add_argument("key_id", metavar="KEY_ID")
    p.set_defaults(func=_run, action="add")
    p = actions.add_parser("list", help="the key ids of a keyring file")
    p.add_argument("path", type=Path, metavar="FILE")
    p.add_argument("--json", action="store_true", help='print {"path": ..., "key_ids": [...]}')
    p.set_defaults(func=_run, action="list")


def _check_id(key_id: str) -> str:
    if not KEY_ID.match(key_id):
        raise _Refused(f"key id {key_id!r}: use 1 to 64 letters, digits, '.', '_' or '-'")
    return key_id


def _read(path: Path) -> dict[str, str]:
    from rsm.api.errors import ConfigException
    from rsm.config.keyring import Keyring, exposed_mode

    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise _Refused(f"cannot read {path}: {exc.strerror}") from None
    who = exposed_mode(mode)
    if who:
        raise _Refused(
            f"{path} is open to {who} (mode {stat.S_IMODE(mode):o}): whoever can read it can decrypt every "
            f"segment; make it owner-only first: chmod 600 {path}"
        )
    try:
        Keyring(path)  # the RSM's own checks: JSON object of base64 256-bit keys
        doc = json.loads(path.read_text("utf-8"))
    except (ConfigException, OSError, ValueError) as exc:
        raise _Refused(str(exc) if isinstance(exc, ConfigException) else f"cannot read {path}") from None
    return {str(k): str(v) for k, v in doc.items()}


def _write(path: Path, keys: dict[str, str], *, new: bool) -> None:
    """Owner-only from the first byte: a temporary file made 0600, then renamed over ``path``."""
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():  # named as the user gave it, not as the temporary file inside it
        what = "is not a directory" if directory.exists() else "does not exist"
        raise _Refused(f"cannot write {path}: directory {directory} {what}")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    except OSError as exc:
        raise _Refused(f"cannot write {path}: directory {directory}: {exc.strerror}") from None
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(keys, fh, indent=2)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        if new:
            os.link(tmp, path)  # fails if the file appeared meanwhile: never overwrite a keyring
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _run(args: argparse.Namespace) -> int:
    from rsm.config.keyring import generate_key

    path: Path = args.path
    try:
        if args.action == "new":
            key_id = _check_id(args.key_id)
            if path.exists():
                raise _Refused(f"{path} exists; add a key to it with: rsm keyring add {path} KEY_ID")
            try:
                _write(path, {key_id: generate_key()}, new=True)
            except FileExistsError:
                raise _Refused(f"{path} exists") from None
            print(f"wrote {path} (owner-only, mode 600) with key id {key_id}; keep it out of version control")
        elif args.action == "add":
            key_id = _check_id(args.key_id)
            keys = _read(path)
            if key_id in keys:
                raise _Refused(f"key id {key_id!r} is already in {path}; a key is never replaced")
            keys[key_id] = generate_key()
            _write(path, keys, new=False)
            print(f"added key id {key_id} to {path}; key ids: {', '.join(sorted(keys))}")
        elif getattr(args, "json", False):
            print(json.dumps({"path": str(path), "key_ids": sorted(_read(path))}))
        else:
            for key_id in sorted(_read(path)):
                print(key_id)
    except _Refused as exc:
        print(f"rsm keyring {args.action}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"rsm keyring {args.action}: {exc.filename or path}: {exc.strerror}", file=sys.stderr)
        return 1
    return 0
