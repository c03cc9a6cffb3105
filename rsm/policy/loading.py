"""Loading the configured topic management policy: a user's class by name, or the built-in one.

Apart from `rsm.policy.api` because it names the built-in policy, which is written against that API.
"""

from __future__ import annotations

from collections.abc import Mapping

from rsm.api.errors import ConfigException
from rsm.config.classes import load_class
from rsm.policy.api import TopicManagementPolicy
from rsm.policy.builtin import BuiltinTopicPolicy

__all__ = ["load_topic_policy"]


def load_topic_policy(class_name: str | None, configs: Mapping[str, str]) -> TopicManagementPolicy:
    """The configured policy: `module:Class` (or `module.Class`), or the built-in one when None.

    Raises ConfigException naming `policy.class.name` when the class cannot be loaded or is not a
    TopicManagementPolicy.
    """
    if not class_name:
        policy: TopicManagementPolicy = BuiltinTopicPolicy()
    else:
        cls = load_class(class_name, "policy.class.name")
        if not (isinstance(cls, type) and issubclass(cls, TopicManagementPolicy)):
            raise ConfigException(
                f"config policy.class.name: {class_name} is not a rsm.policy.TopicManagementPolicy"
            )
        policy = cls()
    policy.configure(configs)
    return policy
