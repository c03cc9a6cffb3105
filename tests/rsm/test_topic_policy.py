"""The topic management policy: the API, every rule of the built-in policy for every
operation, a user's own policy by `module:Class`, and the RSM's own use of it (copies refused for a topic that
breaks it, tiered segments kept under legal hold). The pending overlays, the bridge ops and the CLI are in
test_topic_policy_paths.py; the JVM classes in test_topic_policy_plugin.py; a real broker in
test_kafka_topic_policy.py."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka_segments import make_segment, write_keyring

from rsm import LogConfig, RemoteStorageException, RemoteStorageManager, TopicIdPartition
from rsm.api.errors import ConfigException
from rsm.policy import (
    AlterTopicRequest,
    CreateTopicRequest,
    DeleteRecordsRequest,
    DeleteTopicRequest,
    PolicyViolationException,
    RequestedTopicState,
    StaticClusterState,
    TopicManagementPolicy,
    TopicState,
    load_topic_policy,
)
from rsm.policy.api import broker_configs_for_policy
from rsm.policy.builtin import BuiltinTopicPolicy
from rsm.store.overlays import TopicOverlayStore

SECRET = "s3-secret-that-must-never-show-0xC0FFEE"
TIERED = {"remote.storage.enable": "true"}


@pytest.fixture
def keyring(tmp_path: Path) -> Path:
    path = write_keyring(tmp_path / "keyring.json", ("k1", "k2"))
    path.chmod(0o600)
    return path


def broker_configs(tmp_path: Path, keyring: Path, **extra: str) -> dict[str, str]:
    configs = {
        "storage.backend": "file",
        "storage.file.root": str(tmp_path / "store"),
        "bucket": "main",
        "encryption.keyring.path": str(keyring),
        "storage.s3.secret.access.key": SECRET,
    }
    configs.update({k.replace("_", "."): v for k, v in extra.items()})
    return configs


def policy_for(tmp_path: Path, keyring: Path, **extra: str) -> BuiltinTopicPolicy:
    policy = BuiltinTopicPolicy()
    policy.configure(broker_configs(tmp_path, keyring, **extra))
    return policy


def create(
    policy: TopicManagementPolicy, topic: str, configs: dict[str, str], broker: dict | None = None
) -> None:
    state = RequestedTopicState(
        num_partitions=3, replication_factor=1, configs=configs, requested_configs=configs
    )
    policy.validate_create_topic(
        CreateTopicRequest(topic, state, "User:alice"), StaticClusterState({}, broker)
    )


def alter(
    policy: TopicManagementPolicy,
    topic: str,
    before: dict[str, str],
    changes: dict[str, str | None],
    broker: dict | None = None,
) -> None:
    after = {**before, **{k: v for k, v in changes.items() if v is not None}}
    for k, v in changes.items():
        if v is None:
            after.pop(k, None)
    state = RequestedTopicState(configs=after, requested_configs=changes)
    cluster = StaticClusterState({topic: TopicState(configs=before)}, broker)
    policy.validate_alter_topic(AlterTopicRequest(topic, state), cluster)


def refused(call: Any, *args: Any) -> str:
    with pytest.raises(PolicyViolationException) as info:
        call(*args)
    message = str(info.value)
    assert SECRET not in message
    return message


# ------------------------------------------------------------------------------------ the rules


def test_a_plain_tiered_topic_passes_every_operation(tmp_path: Path, keyring: Path) -> None:
    policy = policy_for(tmp_path, keyring)
    create(policy, "orders", {**TIERED, "retention.ms": "-1"})
    alter(policy, "orders", TIERED, {"unchecked.rsm.chunk.size": "64KiB", "retention.ms": "1000"})
    cluster = StaticClusterState({"orders": TopicState(configs=TIERED)})
    policy.validate_delete_topic(DeleteTopicRequest("orders"), cluster)
    policy.validate_delete_records(DeleteRecordsRequest("orders", {0: 100}), cluster)
    # a topic the path knows nothing about may be deleted (the RSM checks its own overlay)
    policy.validate_delete_topic(DeleteTopicRequest("ghost"), StaticClusterState())


@pytest.mark.parametrize(
    ("key", "hint"),
    [
        ("unchecked.rsm.bukket", "did you mean 'unchecked.rsm.bucket'?"),
        ("unchecked.rsm.encryption.enable", "did you mean 'unchecked.rsm.encryption.enabled'?"),
        ("unchecked.rsm.encryption.keyid", "did you mean 'unchecked.rsm.encryption.key.id'?"),
        ("unchecked.record.validaton.policy", "did you mean 'unchecked.record.validation.policy'?"),
        ("unchecked.rms.prefix", "did you mean 'unchecked.rsm.prefix'?"),
        ("unchecked.rsm.zzz", "known: unchecked.rsm.bucket"),
    ],
)
def test_unknown_unchecked_keys_are_refused_with_the_closest_valid_name(
    tmp_path: Path, keyring: Path, key: str, hint: str
) -> None:
    policy = policy_for(tmp_path, keyring)
    message = refused(create, policy, "orders", {**TIERED, key: "x"})
    assert f"unknown topic config {key!r}" in message and hint in message
    message = refused(alter, policy, "orders", TIERED, {key: "x"})
    assert hint in message


def test_other_plugins_unchecked_keys_pass_and_accepted_keys_are_not_relitigated(
    tmp_path: Path, keyring: Path
) -> None:
    policy = policy_for(tmp_path, keyring)
    create(policy, "orders", {**TIERED, "unchecked.other.plugin.mode": "fast"})
    # an alteration is judged on the keys it sets: a foreign key the topic already has is left alone
    alter(policy, "orders", {**TIERED, "unchecked.another.thing": "1"}, {"retention.ms": "5"})


def test_values_are_parsed_as_the_rsm_parses_them(tmp_path: Path, keyring: Path) -> None:
    policy = policy_for(tmp_path, keyring)
    message = refused(create, policy, "orders", {**TIERED, "unchecked.rsm.chunk.size": "12"})
    assert "unchecked.rsm.chunk.size must be between" in message
    message = refused(alter, policy, "orders", TIERED, {"unchecked.rsm.compression.enabled": "maybe"})
    assert "must be true or false" in message


def test_a_secret_looking_key_is_refused_without_echoing_its_value(tmp_path: Path, keyring: Path) -> None:
    policy = policy_for(tmp_path, keyring)
    message = refused(create, policy, "orders", {**TIERED, "unchecked.rsm.secret.key": "hunter2-value"})
    assert "looks like a secret" in message and "hunter2-value" not in message


@pytest.mark.parametrize(
    ("bucket", "backend", "why"),
    [
        ("a..b", "file", "must not hold '..'"),
        ("UPPER_case!", "file", "may hold only lowercase letters"),
        ("-dash", "file", "must begin and end with a letter or a digit"),
        ("192.168.1.1", "file", "IP address"),
        ("x" * 64, "file", "must be 1 to 63 characters"),
        ("ab", "s3", "must be 3 to 63 characters on S3"),
    ],
)
def test_buckets_follow_s3_naming_rules(
    tmp_path: Path, keyring: Path, bucket: str, backend: str, why: str
) -> None:
    extra = {"storage.backend": backend} if backend == "s3" else {}
    policy = policy_for(tmp_path, keyring, **extra)
    message = refused(create, policy, "orders", {**TIERED, "unchecked.rsm.bucket": bucket})
    assert why in message and "unchecked.rsm.bucket" in message


def test_allowed_buckets_and_the_prefix_pattern(tmp_path: Path, keyring: Path) -> None:
    policy = policy_for(
        tmp_path,
        keyring,
        **{"policy.buckets.allowed": "main, tier-*", "policy.prefix.pattern": r"(teams/[a-z]+/)?"},
    )
    create(
        policy, "orders", {**TIERED, "unchecked.rsm.bucket": "tier-eu", "unchecked.rsm.prefix": "teams/pay/"}
    )
    create(policy, "orders", TIERED)  # the broker's bucket "main" and the empty prefix are allowed
    message = refused(create, policy, "orders", {**TIERED, "unchecked.rsm.bucket": "elsewhere"})
    assert "bucket 'elsewhere' (unchecked.rsm.bucket) is not allowed" in message
    assert "rsm.config.policy.buckets.allowed=main,tier-*" in message
    message = refused(alter, policy, "orders", TIERED, {"unchecked.rsm.prefix": "teams/Pay/"})
    assert "prefix 'teams/Pay/' (unchecked.rsm.prefix) does not match" in message
    # the broker's own default counts as well
    strict = policy_for(tmp_path, keyring, **{"policy.buckets.allowed": "tier-*"})
    assert "bucket 'main' (rsm.config.bucket) is not allowed" in refused(create, strict, "orders", TIERED)


def test_prefixes_must_stay_relative(tmp_path: Path, keyring: Path) -> None:
    policy = policy_for(tmp_path, keyring)
    for prefix in ("/abs/", "a/../b/", "a//b/"):
        assert "must be a relative key prefix" in refused(
            create, policy, "orders", {**TIERED, "unchecked.rsm.prefix": prefix}
        )


def test_encryption_required_for_matching_tiered_topics(tmp_path: Path, keyring: Path) -> None:
    policy = policy_for(tmp_path, keyring, **{"policy.encryption.required.topics": "pci-.*|payments"})
    message = refused(create, policy, "pci-cards", TIERED)
    assert "must be encrypted" in message and "pci-.*|payments" in message
    assert "encryption.enabled is false (the built-in default)" in message
    assert (
        "rsm topic-config --config server.properties set --topic pci-cards" in message
        and "--pending" in message
    )
    encrypted = {
        **TIERED,
        "unchecked.rsm.encryption.enabled": "true",
        "unchecked.rsm.encryption.key.id": "k2",
    }
    create(policy, "pci-cards", encrypted)
    create(policy, "payments-eu", TIERED)  # a full match is needed: "payments" is not "payments-eu"
    create(policy, "pci-cache", {"remote.storage.enable": "false"})  # not tiered: nothing to encrypt
    # unknown remote.storage.enable (a path that sees only the overlay): judged as tiered
    assert "must be encrypted" in refused(create, policy, "payments", {})
    # switching it on for an unencrypted topic, or switching encryption off, is refused
    assert "must be encrypted" in refused(
        alter, policy, "pci-cache", {"remote.storage.enable": "false"}, TIERED
    )
    message = refused(alter, policy, "pci-cards", encrypted, {"unchecked.rsm.encryption.enabled": "false"})
    assert "encryption.enabled is false (unchecked.rsm.encryption.enabled)" in message
    # the broker's default may satisfy it
    by_default = policy_for(
        tmp_path,
        keyring,
        **{
            "policy.encryption.required.topics": "pci-.*",
            "encryption.enabled": "true",
            "encryption.key.id": "k1",
        },
    )
    create(by_default, "pci-cards", TIERED)


def test_key_ids_must_be_in_the_keyring(tmp_path: Path, keyring: Path) -> None:
    policy = policy_for(tmp_path, keyring)
    on = {**TIERED, "unchecked.rsm.encryption.enabled": "true"}
    message = refused(create, policy, "orders", {**on, "unchecked.rsm.encryption.key.id": "k9"})
    assert "key id 'k9' is not in the keyring" in message and "known ids: k1, k2" in message
    assert "rsm keyring add" in message
    assert "no key id is set" in refused(create, policy, "orders", on)
    # a key id named while encryption is off must exist too (turning encryption on later would fail)
    assert "key id 'k7'" in refused(
        alter, policy, "orders", TIERED, {"unchecked.rsm.encryption.key.id": "k7"}
    )
    create(policy, "orders", {**on, "unchecked.rsm.encryption.key.id": "k2"})
    # no keyring at all
    bare = BuiltinTopicPolicy()
    bare.configure({"storage.backend": "file", "storage.file.root": str(tmp_path / "s")})
    message = refused(create, bare, "orders", {**on, "unchecked.rsm.encryption.key.id": "k1"})
    assert "no rsm.config.encryption.keyring.path" in message
    # an unreadable keyring says why, and never shows key material
    broken = tmp_path / "broken.json"
    broken.write_text('{"k1": "not base64 at all!!"}')
    bad = policy_for(tmp_path, broken)
    message = refused(create, bad, "orders", {**on, "unchecked.rsm.encryption.key.id": "k1"})
    assert "the keyring cannot be read" in message and "not base64 at all" not in message


def test_tiered_storage_sanity(tmp_path: Path, keyring: Path) -> None:
    policy = policy_for(tmp_path, keyring)
    message = refused(create, policy, "orders", {**TIERED, "cleanup.policy": "compact,delete"})
    assert "remote storage needs cleanup.policy=delete" in message
    # the broker's default counts when the topic does not set it
    assert "cleanup.policy=delete" in refused(
        create, policy, "orders", TIERED, {"log.cleanup.policy": "compact"}
    )
    create(policy, "logs", {"cleanup.policy": "compact"})  # not tiered: fine
    message = refused(
        create, policy, "orders", {**TIERED, "retention.ms": "1000", "local.retention.ms": "5000"}
    )
    assert "local.retention.ms=5000 but retention.ms=1000" in message
    # -1 (unlimited) local retention under a bounded total retention
    assert "local.retention.ms=-1" in refused(
        create, policy, "orders", {**TIERED, "retention.ms": "1000", "local.retention.ms": "-1"}
    )
    create(policy, "orders", {**TIERED, "retention.ms": "-1", "local.retention.ms": "5000"})
    create(policy, "orders", {**TIERED, "retention.ms": "1000", "local.retention.ms": "-2"})
    # against the broker's log.retention.hours default (1 h here)
    message = refused(
        create, policy, "orders", {**TIERED, "local.retention.ms": "7200000"}, {"log.retention.hours": "1"}
    )
    assert "retention.ms=3600000" in message
    # bytes, the same rule; and an alteration that lowers the total below the local one
    message = refused(
        alter, policy, "orders", {**TIERED, "local.retention.bytes": "1000"}, {"retention.bytes": "10"}
    )
    assert "local.retention.bytes=1000 but retention.bytes=10" in message


def test_record_validation_policy_names_must_resolve(tmp_path: Path, keyring: Path) -> None:
    policy = policy_for(tmp_path, keyring)
    for good in ("json", "schema-id", "schema-id:1,7,100-199", "header:trace-id"):
        create(policy, "orders", {**TIERED, "unchecked.record.validation.policy": good})
    message = refused(create, policy, "orders", {**TIERED, "unchecked.record.validation.policy": "jsn"})
    assert "unchecked.record.validation.policy 'jsn' is not a built-in policy" in message
    assert "schema-id: 'x' is not an id" in refused(
        alter, policy, "orders", TIERED, {"unchecked.record.validation.policy": "schema-id:x"}
    )
    # with a class of the broker's own, the class interprets the value
    custom = policy_for(tmp_path, keyring, **{"record.validation.policy.class.name": "mypkg:Policy"})
    create(custom, "orders", {**TIERED, "unchecked.record.validation.policy": "anything-it-knows"})


def test_legal_hold_refuses_deleting_topics_and_records(tmp_path: Path, keyring: Path) -> None:
    policy = policy_for(tmp_path, keyring)
    held = StaticClusterState(
        {"evidence": TopicState(configs={**TIERED, "unchecked.rsm.legal.hold": "true"})}
    )
    message = refused(policy.validate_delete_topic, DeleteTopicRequest("evidence", "User:bob"), held)
    assert "deleting the topic is refused" in message and "unchecked.rsm.legal.hold=true" in message
    assert "unset --topic evidence unchecked.rsm.legal.hold" in message
    message = refused(policy.validate_delete_records, DeleteRecordsRequest("evidence", {0: 10, 2: 7}), held)
    assert "partition 0 before offset 10, 2 before offset 7" in message
    # lifting the hold is an ordinary change, and then deletion passes
    alter(
        policy, "evidence", {**TIERED, "unchecked.rsm.legal.hold": "true"}, {"unchecked.rsm.legal.hold": None}
    )
    free = StaticClusterState(
        {"evidence": TopicState(configs={**TIERED, "unchecked.rsm.legal.hold": "false"})}
    )
    policy.validate_delete_topic(DeleteTopicRequest("evidence"), free)
    # a broker-wide hold, and a topic that opts out of it
    everything = policy_for(tmp_path, keyring, **{"legal.hold": "true"})
    plain = StaticClusterState({"t": TopicState(configs=TIERED)})
    assert "rsm.config.legal.hold=true" in refused(
        everything.validate_delete_topic, DeleteTopicRequest("t"), plain
    )


def test_all_problems_are_reported_at_once(tmp_path: Path, keyring: Path) -> None:
    policy = policy_for(tmp_path, keyring, **{"policy.encryption.required.topics": "pci-.*"})
    message = refused(
        create,
        policy,
        "pci-x",
        {
            **TIERED,
            "cleanup.policy": "compact",
            "unchecked.rsm.bukket": "b",
            "unchecked.record.validation.policy": "?",
        },
    )
    assert message.startswith("topic pci-x: creation refused by the topic policy: ")
    for part in (
        "did you mean 'unchecked.rsm.bucket'",
        "must be encrypted",
        "cleanup.policy=delete",
        "'?' is not",
    ):
        assert part in message
    assert "invalid" in refused(create, policy, "bad/name", TIERED)


def test_an_unconfigured_policy_refuses_everything() -> None:
    assert "not configured" in refused(create, BuiltinTopicPolicy(), "orders", TIERED)


def test_broker_configs_the_policy_sees_hold_no_secret() -> None:
    shown = broker_configs_for_policy(
        {
            "log.retention.hours": "1",
            "log.cleanup.policy": "delete",
            "ssl.key.password": SECRET,
            "log.dirs": "/data",
            "sasl.jaas.config": SECRET,
            "num.partitions": "3",
            "rsm.config.storage.s3.secret.access.key": SECRET,
        }
    )
    assert shown == {
        "log.retention.hours": "1",
        "log.cleanup.policy": "delete",
        "log.dirs": "/data",
        "num.partitions": "3",
    }


# ------------------------------------------------------------------------------------ your own policy


class NoWideTopics(TopicManagementPolicy):
    """A user's policy: at most 12 partitions, no deleting anything named "keep-*"."""

    configured: dict[str, str] = {}

    def configure(self, configs: Any) -> None:
        NoWideTopics.configured = dict(configs)
        self.limit = int(configs.get("policy.max.partitions", "12"))

    def validate_create_topic(self, request: CreateTopicRequest, cluster_state: Any) -> None:
        if (request.requested_state.num_partitions or 0) > self.limit:
            raise PolicyViolationException(f"{request.topic}: at most {self.limit} partitions")

    def validate_alter_topic(self, request: AlterTopicRequest, cluster_state: Any) -> None:
        if request.requested_state.configs.get("unchecked.rsm.bucket") == "forbidden":
            raise PolicyViolationException(f"{request.topic}: not that bucket")

    def validate_delete_topic(self, request: DeleteTopicRequest, cluster_state: Any) -> None:
        if request.topic.startswith("keep-"):
            raise PolicyViolationException(f"{request.topic} is kept")

    def validate_delete_records(self, request: DeleteRecordsRequest, cluster_state: Any) -> None:
        self.validate_delete_topic(DeleteTopicRequest(request.topic), cluster_state)


def test_a_users_policy_by_module_and_class(tmp_path: Path, keyring: Path) -> None:
    configs = {**broker_configs(tmp_path, keyring), "policy.max.partitions": "4"}
    policy = load_topic_policy(f"{__name__}:NoWideTopics", configs)
    assert isinstance(policy, NoWideTopics) and NoWideTopics.configured["policy.max.partitions"] == "4"
    create(policy, "orders", TIERED)  # 3 partitions
    state = RequestedTopicState(num_partitions=5, configs=TIERED)
    with pytest.raises(PolicyViolationException, match="at most 4 partitions"):
        policy.validate_create_topic(CreateTopicRequest("orders", state), StaticClusterState())
    assert isinstance(load_topic_policy(None, configs), BuiltinTopicPolicy)
    with pytest.raises(ConfigException, match="policy.class.name: cannot load 'nope:Missing'"):
        load_topic_policy("nope:Missing", configs)
    with pytest.raises(ConfigException, match="is not a rsm.policy.TopicManagementPolicy"):
        load_topic_policy("rsm.policy.api:StaticClusterState", configs)


# ------------------------------------------------------------------------------------ the RSM's own checks


def configured_rsm(tmp_path: Path, keyring: Path, **extra: str) -> RemoteStorageManager:
    rsm = RemoteStorageManager()
    rsm.configure(broker_configs(tmp_path, keyring, **{"topic.overlay.cache.ms": "0", **extra}))
    return rsm


def test_a_copy_of_a_topic_that_breaks_the_policy_is_refused_until_it_is_fixed(
    tmp_path: Path, keyring: Path
) -> None:
    rsm = configured_rsm(tmp_path, keyring, **{"policy.encryption.required.topics": "pci-.*"})
    try:
        tip = TopicIdPartition(uuid.uuid4(), "pci-cards", 0)
        seg = make_segment(tmp_path / "seg", tip, batches=3)
        with pytest.raises(
            RemoteStorageException, match="to tiered storage refused: .*must be encrypted"
        ) as info:
            rsm.copy_log_segment_data(seg.metadata, seg.data)
        assert SECRET not in str(info.value)
        store = tmp_path / "store"
        assert not [p for p in store.rglob("*") if p.suffix in (".log", ".manifest")]  # nothing uploaded
        # the topic's overlay fixes it: the next copy goes through, encrypted
        TopicOverlayStore(rsm.store, "main").write(
            tip.topic,
            tip.topic_id,
            {"unchecked.rsm.encryption.enabled": "true", "unchecked.rsm.encryption.key.id": "k1"},
        )
        rsm.copy_log_segment_data(seg.metadata, seg.data)
        manifest = next(store.rglob("*.manifest"))
        assert '"key_id":"k1"' in manifest.read_text().replace(" ", "")
        # a LogConfig (a broker that passes one) is part of the state judged too
        with pytest.raises(RemoteStorageException, match="cleanup.policy=delete"):
            rsm.copy_log_segment_data(seg.metadata, seg.data, LogConfig({"cleanup.policy": "compact"}))
    finally:
        rsm.close()


def test_a_broken_user_policy_refuses_copies_rather_than_passing_them(tmp_path: Path, keyring: Path) -> None:
    rsm = configured_rsm(tmp_path, keyring, **{"policy.class.name": f"{__name__}:Exploding"})
    try:
        seg = make_segment(tmp_path / "seg", TopicIdPartition(uuid.uuid4(), "orders", 0), batches=2)
        with pytest.raises(RemoteStorageException, match="the topic policy failed: ZeroDivisionError"):
            rsm.copy_log_segment_data(seg.metadata, seg.data)
    finally:
        rsm.close()


class Exploding(NoWideTopics):
    def validate_alter_topic(self, request: AlterTopicRequest, cluster_state: Any) -> None:
        raise ZeroDivisionError("bug in the policy")


def test_tiered_segments_under_legal_hold_are_kept(
    tmp_path: Path, keyring: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rsm = configured_rsm(tmp_path, keyring)
    try:
        tip = TopicIdPartition(uuid.uuid4(), "evidence", 1)
        seg = make_segment(tmp_path / "seg", tip, batches=3)
        custom = rsm.copy_log_segment_data(seg.metadata, seg.data)
        md = dataclasses.replace(seg.metadata, custom_metadata=custom)
        overlays = TopicOverlayStore(rsm.store, "main")
        overlays.write(tip.topic, tip.topic_id, {"unchecked.rsm.legal.hold": "true"})
        kept = "refused, the segment is kept: .*legal hold"
        with caplog.at_level(logging.DEBUG), pytest.raises(RemoteStorageException, match=kept) as info:
            rsm.delete_log_segment_data(md)
        assert f"partition 1 before offset {md.end_offset + 1}" in str(info.value)
        assert len(list((tmp_path / "store").rglob("*.manifest"))) == 1
        overlays.write(tip.topic, tip.topic_id, {"unchecked.rsm.legal.hold": "false"})
        rsm.delete_log_segment_data(md)
        assert not list((tmp_path / "store").rglob("*.manifest"))
        assert SECRET not in caplog.text
    finally:
        rsm.close()
