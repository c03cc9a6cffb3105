"""The source's options checked on the driver, without Spark: each mistake is one
line naming the option or key, with the closest valid name when one is close."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_reader.options import OptionError, parse_options, spelled

STORE = {"storage.backend": "file", "storage.file.root": "/tmp/store", "bucket": "main"}


def refused(options: dict[str, str]) -> str:
    with pytest.raises(OptionError) as caught:
        parse_options({k.lower(): v for k, v in options.items()})  # as Spark passes them: lowercased
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_misspelled_option_gets_the_closest_one() -> None:
    assert refused({**STORE, "subscibe": "t"}) == (
        "unknown option 'subscibe' for format kafka-tiered: did you mean subscribe?"
    )
    assert "did you mean startingOffsets?" in refused(
        {**STORE, "subscribe": "t", "startingOffset": "earliest"}
    )
    assert "did you mean includeHeaders?" in refused({**STORE, "subscribe": "t", "includeHeader": "true"})
    assert "did you mean kafka.isolation.level?" in refused(
        {**STORE, "subscribe": "t", "kafka.isolation.levle": "read_committed"}
    )
    assert parse_options({**STORE, "subscribe": "t", "kafka.bootstrap.servers": "b:9092"}).subscribe == ("t",)
    far = refused({**STORE, "subscribe": "t", "colour": "blue"})
    assert "did you mean" not in far and "rsm.properties" in far


def test_names_come_back_as_documented() -> None:
    assert spelled("startingoffsetsbytimestamp") == "startingOffsetsByTimestamp"
    assert spelled("failondataloss") == "failOnDataLoss"
    assert "option maxRecordsPerPartition must be a positive integer" in refused(
        {**STORE, "subscribe": "t", "maxrecordsperpartition": "-1"}
    )


def test_store_keys_are_named_with_the_closest_one() -> None:
    typo = {k: v for k, v in STORE.items() if k != "storage.file.root"} | {"storage.file.rot": "/tmp/store"}
    assert refused({**typo, "subscribe": "t"}) == (
        "unknown store key 'storage.file.rot' for format kafka-tiered: did you mean storage.file.root?"
    )
    assert "did you mean storage.s3.endpoint.url?" in refused(
        {**STORE, "subscribe": "t", "rsm.config.storage.s3.endpoint.uri": "http://x"}
    )


def test_no_store_is_one_line_naming_rsm_properties() -> None:
    message = refused({"subscribe": "t"})
    assert message.startswith("no store given: set the option rsm.properties")
    assert "storage.file.root" in message and "bucket" in message


def test_the_properties_file_is_checked_too(tmp_path: Path) -> None:
    props = tmp_path / "rsm.properties"
    props.write_text("storage.backend=file\nstorage.file.root=/tmp/store\nbukcet=main\n")
    message = refused({"rsm.properties": str(props), "subscribe": "t"})
    assert message == (
        f"in rsm.properties {props}: unknown store key 'bukcet' for format kafka-tiered: did you mean bucket?"
    )
    broker = tmp_path / "server.properties"
    broker.write_text("node.id=1\nlisteners=PLAINTEXT://:9092\n")
    assert f"{broker} names no store" in refused({"rsm.properties": str(broker), "subscribe": "t"})
    broker.write_text("node.id=1\nrsm.config.storage.file.root=/tmp/store\nrsm.config.bridge.pool.size=8\n")
    assert parse_options({"rsm.properties": str(broker), "subscribe": "t"}).rsm_configs == {
        "storage.file.root": "/tmp/store"
    }
