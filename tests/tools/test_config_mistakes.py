"""Wrong configuration is one line naming what is wrong, never an empty
table with exit 0.

A key that is no setting, in a file given to a tool, is refused naming the closest setting (a broker only
warns, with the same suggestion); a missing required key names the typo that was meant for it; the
read-only tools refuse a store root or an S3 bucket that does not exist (and create neither); a missing
bucket is named with its setting and the endpoint, in the RSM and every command; `rsm keyring new` into a
directory that does not exist names the directory.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from cli_runs import one_line, properties, rsm
from kafka_segments import make_segment

from rsm import RemoteStorageException, RemoteStorageManager, TopicIdPartition
from rsm.api.errors import ConfigException
from rsm.cli.main import main
from rsm.config.classes import load_class
from rsm.config.settings import RsmConfig

READ_ONLY = (
    ["store", "--config", "{p}", "du"],
    ["store", "--config", "{p}", "ls", "--topic", "t"],
    ["store", "--config", "{p}", "locate"],
    ["migrate", "--config", "{p}", "verify"],
    ["migrate", "--config", "{p}", "move", "--topic", "t", "--dry-run"],  # the plan
    ["dump-log", "--config", "{p}", "--topic", "t", "--partition", "0", "--offset", "0"],
)
EVERY_COMMAND = (
    *READ_ONLY,
    ["topic-config", "--config", "{p}", "list"],
    ["migrate", "--config", "{p}", "import", "--dir", "{d}", "--topic", "t", "--partition", "0"],
)


def _command(template: list[str], props: Path, tmp_path: Path) -> list[str]:
    return [a.format(p=props, d=tmp_path / "t-0") for a in template]


# -- an unknown key in a file given to a tool ------------------------------------------------------


def test_an_unknown_key_in_a_server_properties_is_one_line_with_the_closest_setting(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    props = properties(
        tmp_path / "server.properties",
        **{"storage.backend": "file", "storage.file.root": str(root)},
        bukcet="t",
    )
    for template in EVERY_COMMAND:
        done = rsm(*_command(template, props, tmp_path))
        one_line(done, f"unknown key rsm.config.bukcet in {props}: did you mean rsm.config.bucket?")
    assert list(root.iterdir()) == [], "a refused command wrote into the store"


def test_an_unknown_key_in_an_rsm_properties_is_one_line_with_the_closest_setting(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    props = tmp_path / "rsm.properties"
    props.write_text(f"storage.backend=file\nstorage.file.root={root}\nbukcet=tiered\n")
    one_line(
        rsm("store", "--config", str(props), "du"), f"unknown key bukcet in {props}: did you mean bucket?"
    )
    props.write_text(f"storage.backend=file\nstorage.file.root={root}\nbukcet=tiered\nchunk.sise=4MiB\n")
    one_line(
        rsm("migrate", "--config", str(props), "verify"),
        "bukcet (did you mean bucket?)",
        "chunk.sise (did you mean chunk.size?)",
    )


def test_a_broker_still_only_warns_about_an_unknown_key_with_the_closest_setting(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import rsm.state

    rsm.state._warned_unknown.discard("cache.chunk.byte")
    with caplog.at_level(logging.WARNING):
        manager = RemoteStorageManager()
        manager.configure(
            {"storage.backend": "file", "storage.file.root": str(tmp_path), "cache.chunk.byte": "1"}
        )
        manager.close()
    warnings = [r.getMessage() for r in caplog.records if "unknown RSM config" in r.getMessage()]
    assert warnings and "cache.chunk.byte (did you mean cache.chunk.bytes?)" in warnings[0]


# -- read-only tools refuse a root that does not exist ---------------------------------------------


def test_read_only_commands_refuse_a_store_root_that_does_not_exist(tmp_path: Path) -> None:
    root = tmp_path / "no-such-store"
    props = properties(
        tmp_path / "server.properties", **{"storage.backend": "file", "storage.file.root": str(root)}
    )
    for template in READ_ONLY:
        done = rsm(*_command(template, props, tmp_path))
        one_line(done, f"config storage.file.root {root} does not exist")
        assert not root.exists(), f"{template[0]} created the store root"


# -- a typo of a required key names itself ----------------------------------------------------------


def test_a_misspelled_required_key_is_named_with_the_one_it_misspells(tmp_path: Path) -> None:
    with pytest.raises(ConfigException) as caught:
        RsmConfig({"storage.backend": "file", "storage.file.rot": str(tmp_path)})
    assert str(caught.value) == (
        "config storage.file.root is required when storage.backend=file "
        "(storage.file.rot is not a setting: did you mean storage.file.root?)"
    )
    props = properties(
        tmp_path / "server.properties", **{"storage.backend": "file", "storage.file.rot": str(tmp_path)}
    )
    done = rsm("bridge", "serve", "--config", str(props), "--socket", str(tmp_path / "b.sock"), timeout=60)
    one_line(
        done,
        "storage.file.root is required",
        "storage.file.rot is not a setting: did you mean storage.file.root?",
    )
    one_line(
        rsm("store", "--config", str(props), "du"),
        "unknown key rsm.config.storage.file.rot",
        "did you mean rsm.config.storage.file.root?",
    )


# -- a bucket that does not exist is named ----------------------------------------------------------


def test_every_command_names_a_missing_s3_bucket_and_its_setting(tmp_path: Path, s3_server: Any) -> None:
    props = properties(tmp_path / "server.properties", **s3_server.rsm_configs(bucket="tiered-missing"))
    (tmp_path / "t-0").mkdir()
    expected = f"bucket 'tiered-missing' (config bucket) does not exist in s3 at {s3_server.endpoint_url}"
    for template in EVERY_COMMAND:
        done = rsm(*_command(template, props, tmp_path), env=s3_server.env())
        line = one_line(done, expected)
        assert s3_server.secret_key not in line
    assert "tiered-missing" not in [b["Name"] for b in s3_server.boto3_client().list_buckets()["Buckets"]]


def test_the_rsm_names_a_missing_s3_bucket_and_its_setting(tmp_path: Path, s3_server: Any) -> None:
    seg = make_segment(tmp_path / "seg", TopicIdPartition(uuid.uuid4(), "orders", 0), batches=3)
    manager = RemoteStorageManager()
    manager.configure(s3_server.rsm_configs(bucket="tiered-gone"))
    try:
        with pytest.raises(RemoteStorageException) as caught:
            manager.copy_log_segment_data(seg.metadata, seg.data)
    finally:
        manager.close()
    message = str(caught.value)
    assert f"bucket 'tiered-gone' (config bucket) does not exist in s3 at {s3_server.endpoint_url}" in message
    assert "not found" not in message


# -- keyring new into a directory that does not exist ----------------------------------------------


def test_keyring_new_in_a_directory_that_does_not_exist_names_the_directory(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir"
    line = one_line(
        rsm("keyring", "new", str(missing / "kr.json")),
        f"cannot write {missing / 'kr.json'}: directory {missing} does not exist",
    )
    assert ".kr.json." not in line
    assert not missing.exists()


def test_a_topics_missing_bucket_is_named_by_topic_config_and_import(tmp_path: Path, s3_server: Any) -> None:
    from rsm.api.metadata import uuid_to_base64

    default, elsewhere = s3_server.make_bucket(), s3_server.make_bucket()
    props = properties(tmp_path / "server.properties", **s3_server.rsm_configs(bucket=default))
    tid = uuid.uuid4()
    make_segment(tmp_path / "t-0", TopicIdPartition(tid, "t", 0), batches=3)
    topic = ["--topic", "t", f"--topic-id={uuid_to_base64(tid)}"]  # a base64 id may begin with '-'
    missing = "no-such-bucket-26"
    done = rsm(
        "topic-config",
        "--config",
        str(props),
        "set",
        *topic,
        f"unchecked.rsm.bucket={missing}",
        env=s3_server.env(),
    )
    one_line(
        done, f"bucket '{missing}' (unchecked.rsm.bucket) does not exist in s3 at {s3_server.endpoint_url}"
    )
    done = rsm(
        "topic-config",
        "--config",
        str(props),
        "set",
        *topic,
        f"unchecked.rsm.bucket={elsewhere}",
        env=s3_server.env(),
    )
    assert done.returncode == 0, done.stderr
    s3_server.boto3_client().delete_bucket(Bucket=elsewhere)  # gone after the topic was pointed at it
    command = [
        "migrate",
        "--config",
        str(props),
        "import",
        "--dir",
        str(tmp_path / "t-0"),
        *topic,
        "--partition",
        "0",
    ]
    one_line(
        rsm(*command, env=s3_server.env()),
        f"bucket '{elsewhere}' (the topic's unchecked.rsm.bucket) does not exist in s3 at {s3_server.endpoint_url}",
    )


def test_a_fetch_from_a_bucket_deleted_since_names_the_bucket(tmp_path: Path, s3_server: Any) -> None:
    bucket = s3_server.make_bucket()
    seg = make_segment(tmp_path / "seg", TopicIdPartition(uuid.uuid4(), "orders", 0), batches=3)
    manager = RemoteStorageManager()
    manager.configure(s3_server.rsm_configs(bucket=bucket))
    try:
        manager.copy_log_segment_data(seg.metadata, seg.data)
        client = s3_server.boto3_client()
        for obj in client.list_objects_v2(Bucket=bucket).get("Contents", []):
            client.delete_object(Bucket=bucket, Key=obj["Key"])
        client.delete_bucket(Bucket=bucket)
        fresh = RemoteStorageManager()  # no cached manifest
        fresh.configure(s3_server.rsm_configs(bucket=bucket))
        try:
            with pytest.raises(RemoteStorageException) as caught:
                fresh.fetch_log_segment(seg.metadata, 0)
        finally:
            fresh.close()
    finally:
        manager.close()
    assert f"bucket '{bucket}' (config bucket) does not exist in s3 at {s3_server.endpoint_url}" in str(
        caught.value
    )


def test_the_cli_names_the_settings_of_refused_credentials_and_an_unreachable_endpoint(
    tmp_path: Path,
) -> None:
    """`rsm store` against S3 with credentials S3 refuses, and against a closed port: one line naming the
    settings to look at, not botocore's bare sentence or its exception name."""
    from rsm.cli.main import describe_error

    class ClientError(Exception):
        pass

    refused = describe_error(ClientError("The AWS Access Key Id you provided does not exist in our records."))
    assert "storage.s3.access.key.id" in refused and "does not exist in our records" in refused
    props = tmp_path / "closed.properties"
    props.write_text(
        "rsm.config.storage.backend=s3\nrsm.config.storage.s3.endpoint.url=http://127.0.0.1:9\n"
        "rsm.config.storage.s3.region=us-east-1\nrsm.config.storage.s3.access.key.id=AKIAIOSFODNN7EXAMPLE\n"
        "rsm.config.storage.s3.secret.access.key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n"
        "rsm.config.storage.s3.retry.max.attempts=1\nrsm.config.bucket=tiered\n"
    )
    done = rsm("store", "--config", str(props), "du")
    line = done.stderr.strip()
    assert done.returncode == 1 and "\n" not in line, line
    assert "storage" in line and "endpoint" in line and "127.0.0.1:9" in line, line
    assert "wJalrXUtnFEMI" not in line


# -- a class a setting names ---------------------------------------------------------------------------------
def test_a_class_setting_takes_both_spellings_and_names_itself_when_it_cannot_load() -> None:
    """`module:Class` and `module.Class` load the same class; one that cannot be loaded is one line naming
    the setting and the value, for the validation policy and the topic policy alike."""
    assert load_class("pathlib:PurePosixPath", "policy.class.name") is load_class(
        "pathlib.PurePosixPath", "policy.class.name"
    )
    for value in ("pathlib:NoSuchClass", "no_such_module_xyz:Policy", "NoDots"):
        with pytest.raises(ConfigException) as refused:
            load_class(value, "record.validation.policy.class.name")
        message = str(refused.value)
        assert message.startswith(f"config record.validation.policy.class.name: cannot load {value!r}")
        assert "\n" not in message


# -- one line per mistake ----------------------------------------------------------------------------------


@pytest.mark.parametrize("records", ["0", "-1", "many"])
def test_quickstart_refuses_bad_record_counts(records: str) -> None:
    done = rsm("quickstart", "--records", records, "--no-spark")
    assert done.returncode == 2
    one_line(done, "--records", "(see rsm quickstart --help)")


def test_s3_without_credentials_is_one_line(tmp_path: Path) -> None:
    props = properties(
        tmp_path / "s3.properties",
        **{"storage.backend": "s3", "storage.s3.endpoint.url": "http://127.0.0.1:9", "storage.s3.region": "us-east-1",
           "bucket": "my-bucket"},
    )  # fmt: skip
    env: dict[str, str | None] = dict.fromkeys(
        (
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "AWS_PROFILE",
            "AWS_DEFAULT_PROFILE",
        )
    )
    env.update(AWS_EC2_METADATA_DISABLED="true", AWS_CONFIG_FILE=str(tmp_path / "none"),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"))  # fmt: skip
    for command in (
        ["topic-config", "--config", str(props), "list"],
        ["store", "--config", str(props), "du"],
    ):
        one_line(rsm(*command, env=env), "no S3 credentials", "storage.s3.access.key.id", "--debug")
    done = rsm("--debug", "store", "--config", str(props), "du", env=env)
    assert "Traceback" in done.stderr and "NoCredentialsError" in done.stderr


def test_file_root_that_is_a_file(tmp_path: Path) -> None:
    from rsm import RemoteStorageManager
    from rsm.api.errors import ConfigException

    afile = tmp_path / "afile"
    afile.write_text("x")
    for root, problem in ((afile, "is a file, not a directory"), (afile / "sub", "cannot be created")):
        with pytest.raises(ConfigException, match=re.escape(f"config storage.file.root {root} {problem}")):
            RemoteStorageManager().configure({"storage.backend": "file", "storage.file.root": str(root)})
        props = properties(
            tmp_path / "p.properties", **{"storage.backend": "file", "storage.file.root": str(root)}
        )
        # the read-only tools (and topic-config's list) create no root: one under a file does not exist
        for tool in (
            ("topic-config", "--config", str(props), "list"),
            ("store", "--config", str(props), "du"),
        ):
            one_line(
                rsm(*tool),
                "storage.file.root",
                "does not exist" if problem == "cannot be created" else problem,
            )
        done = rsm(
            "bridge", "serve", "--config", str(props), "--socket", str(tmp_path / "b.sock"), timeout=60
        )
        one_line(done, "storage.file.root", problem)


def test_bad_bridge_setting_names_the_key(tmp_path: Path) -> None:
    props = properties(
        tmp_path / "p.properties",
        **{"storage.backend": "file", "storage.file.root": str(tmp_path / "s"), "bridge.frame.bytes": "abc"},
    )
    done = rsm("bridge", "serve", "--config", str(props), "--socket", str(tmp_path / "b.sock"), timeout=60)
    one_line(done, "bridge.frame.bytes", "abc")
    assert "invalid literal" not in done.stderr


def test_dry_run_with_a_missing_keyring_says_why(tmp_path: Path) -> None:
    props = properties(
        tmp_path / "p.properties",
        **{"storage.backend": "file", "storage.file.root": str(tmp_path / "s"),
           "encryption.keyring.path": str(tmp_path / "missing.json"), "encryption.key.id": "k1"},
    )  # fmt: skip
    done = rsm("topic-config", "--config", str(props), "set", "--topic", "t", "--topic-id", "AAAAAAAAAAAAAAAAAAAAAQ",
               "unchecked.rsm.encryption.enabled=true", "--dry-run")  # fmt: skip
    one_line(done, "missing.json", "No such file or directory")


def test_bootstrap_server_without_a_broker_is_one_quick_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    props = properties(
        tmp_path / "p.properties", **{"storage.backend": "file", "storage.file.root": str(tmp_path)}
    )
    (tmp_path / "kafka-tiered-storage").mkdir()  # the store's bucket: describe reads it
    started = time.monotonic()
    done = rsm("topic-config", "--config", str(props), "describe", "--topic", "t",
               "--bootstrap-server", f"127.0.0.1:{port}")  # fmt: skip
    assert time.monotonic() - started < 15
    one_line(done, f"no broker answers at 127.0.0.1:{port}", "--topic-id")


def test_every_error_in_main_is_one_line_and_debug_shows_it(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    import rsm.cli.dump_log as dump_log

    def boom(args):  # type: ignore[no-untyped-def]
        raise RuntimeError("something specific broke")

    monkeypatch.setattr(dump_log, "run", boom)
    assert main(["dump-log", "x.log"]) == 1
    assert capsys.readouterr().err == "rsm dump-log: something specific broke (--debug shows the traceback)\n"
    with pytest.raises(RuntimeError):
        main(["--debug", "dump-log", "x.log"])


def test_unknown_config_keys_are_warned_about_once_per_process(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    from rsm import RemoteStorageManager

    configs = {"storage.backend": "file", "storage.file.root": str(tmp_path), "bukket": "typo",
               "chunk.sise": "1", "bridge.frame.bytes": "262144"}  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="rsm.manager"):
        for _ in range(5):  # a bridge configures one RSM per connection
            rsm_ = RemoteStorageManager()
            rsm_.configure(configs)
            rsm_.close()
    warnings = [r.getMessage() for r in caplog.records if "unknown RSM config" in r.getMessage()]
    assert len(warnings) == 1 and "bukket" in warnings[0] and "chunk.sise" in warnings[0]
    assert "bridge.frame.bytes" not in warnings[0]
