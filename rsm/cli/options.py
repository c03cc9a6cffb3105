"""Options the store-facing commands share (`topic-config`, `store`, `migrate`): --config and --json."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def config_and_json(parser: argparse.ArgumentParser, default: Any) -> None:
    """--config and --json, accepted before or after the action (`default` is argparse.SUPPRESS on the
    action's parser, so a value given before the action is not overwritten)."""
    parser.add_argument(
        "--config", type=Path, default=default, help="broker server.properties (rsm.config.* keys)"
    )
    parser.add_argument("--json", action="store_true", default=default, help="JSON output for scripts")
