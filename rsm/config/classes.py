"""Classes a broker setting names (`record.validation.policy.class.name`, `policy.class.name`): one loader
for both, so they accept the same spellings and fail the same way."""

from __future__ import annotations

import importlib

from rsm.api.errors import ConfigException


def load_class(class_name: str, setting: str) -> object:
    """`module:Class` (or `module.Class`), imported; ConfigException naming `setting` when it cannot be."""
    module_name, sep, attr = class_name.partition(":")
    if not sep:
        module_name, _, attr = class_name.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigException(f"config {setting}: cannot load {class_name!r}: {exc}") from None
