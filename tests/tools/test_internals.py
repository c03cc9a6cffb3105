"""Other projects' internals we rely on still have the shape we use (docs/INTERNALS.md).

One test per internal: each names the project, the attribute or method, and the adapter of ours that uses
it, so a new Spark, JDK or gcsfs that changes it fails here, loudly, before a query or an upload does.
The JVM's are asked through the Spark session's own JVM (its classes, its module options).
"""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DOC = "docs/INTERNALS.md"


def _changed(what: str, used_by: str, found: str) -> str:
    return f"{what} changed ({found}): {used_by} relies on it; see {DOC}"


# -- Python -----------------------------------------------------------------------------------------------


def test_spark_worker_modules_are_where_pushdown_looks() -> None:
    from spark_reader.pushdown import PUSHDOWN_WORKER, SPARK_WORKERS

    plan_worker = SPARK_WORKERS + "plan_data_source_read"
    for module in (PUSHDOWN_WORKER, plan_worker):
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin, _changed(
            f"PySpark's worker module {module}", "spark_reader.pushdown.reader_kind", "no such module"
        )
        source = Path(spec.origin).read_text()
        assert "data_source.reader(" in source, _changed(
            f"PySpark's worker module {module}",
            "spark_reader.pushdown.reader_kind",
            "it no longer calls data_source.reader itself",
        )


def test_kafka_python_connection_manager_keeps_its_shape() -> None:
    from kafka.net.manager import KafkaConnectionManager

    from spark_reader.brokerwire.transport import WireConnectionManager

    used_by = "spark_reader.brokerwire.transport.WireConnectionManager"
    build = getattr(KafkaConnectionManager, "_build_transport", None)
    assert build is not None and inspect.iscoroutinefunction(build), _changed(
        "kafka-python's KafkaConnectionManager._build_transport", used_by, "no such coroutine"
    )
    assert list(inspect.signature(build).parameters)[:3] == ["self", "node", "timeout_at"], _changed(
        "kafka-python's KafkaConnectionManager._build_transport", used_by, str(inspect.signature(build))
    )
    from kafka.net.selector import NetworkSelector

    net = NetworkSelector(bootstrap_servers=["127.0.0.1:9"])
    try:
        manager = WireConnectionManager(net, bootstrap_servers=["127.0.0.1:9"])
        conns = getattr(manager, "_conns", None)
        assert isinstance(conns, dict), _changed(
            "kafka-python's KafkaConnectionManager._conns", used_by, repr(conns)
        )
        assert manager.open_connections() == []
    finally:
        net.close()


def test_kafka_python_protocol_decodes_from_a_frame_view() -> None:
    """FrameProtocol's override still sits where kafka-python hands over each frame, and a response
    decoded from the view is the response kafka-python decodes from its own copies."""
    from kafka.protocol.consumer import FetchRequest, FetchResponse
    from kafka.protocol.frame import KafkaBytes
    from kafka.protocol.parser import KafkaProtocol

    from spark_reader.brokerwire.transport import FrameProtocol

    used_by = "spark_reader.brokerwire.transport.FrameProtocol"
    process = getattr(KafkaProtocol, "_process_response", None)
    assert process is not None and list(inspect.signature(process).parameters) == ["self", "read_buffer"], (
        _changed("kafka-python's KafkaProtocol._process_response", used_by, repr(process))
    )
    records = bytes(range(256)) * 400  # ~100 KB: a Fetch response's records, as large as they come
    topic = FetchResponse.FetchableTopicResponse
    response = FetchResponse(
        version=12, throttle_time_ms=0, error_code=0, session_id=0,
        responses=[topic(version=12, topic="t", partitions=[topic.PartitionData(
            version=12, partition_index=0, error_code=0, high_watermark=9, last_stable_offset=9,
            log_start_offset=0, aborted_transactions=None, preferred_read_replica=-1, records=records,
        )])],
    )  # fmt: skip
    answers = []
    for cls in (KafkaProtocol, FrameProtocol):
        parser = cls(client_id="internals")
        request = FetchRequest(
            version=12, replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
            session_id=0, session_epoch=-1, topics=[], forgotten_topics_data=[], rack_id="",
        )  # fmt: skip
        correlation_id = parser.send_request(request)
        frame = FetchResponse.header_class(correlation_id=correlation_id).encode(flexible=True)
        frame += response.encode(version=12)
        buffer = KafkaBytes(len(frame))
        buffer.write(frame)
        buffer.seek(0)
        answers.append(parser._process_response(buffer)[1])
    got = [bytes(a.responses[0].partitions[0].records) for a in answers]
    assert got == [records, records], _changed(
        "kafka-python's KafkaProtocol._process_response", used_by, "a frame view decodes differently"
    )


def test_the_pushdown_check_uses_no_private_frame_api() -> None:
    import spark_reader.pushdown

    assert "_getframe" not in Path(spark_reader.pushdown.__file__).read_text()


def test_gcsfs_request_and_call_keep_their_shape() -> None:
    pytest.importorskip("gcsfs")
    from gcsfs.core import GCSFileSystem

    request = GCSFileSystem.__dict__.get("_request")
    once = getattr(request, "__wrapped__", None)
    assert once is not None, _changed(
        "gcsfs GCSFileSystem._request.__wrapped__",
        "rsm.store.gcs._filesystem_class",
        "not a wrapped function",
    )
    params = list(inspect.signature(once).parameters)
    assert params[:3] == ["self", "method", "path"], _changed(
        "gcsfs GCSFileSystem._request", "rsm.store.gcs._filesystem_class", f"parameters {params}"
    )
    call = GCSFileSystem._call
    assert inspect.iscoroutinefunction(call), _changed(
        "gcsfs GCSFileSystem._call", "rsm.store.gcs (resumable uploads)", "no longer a coroutine"
    )
    sig = inspect.signature(call).parameters
    assert list(sig)[:3] == ["self", "method", "path"] and "headers" not in sig, _changed(
        "gcsfs GCSFileSystem._call", "rsm.store.gcs (resumable uploads)", f"parameters {list(sig)}"
    )
    assert "info_out" in sig and "json_out" in sig, _changed(
        "gcsfs GCSFileSystem._call", "rsm.store.gcs (resumable uploads)", f"parameters {list(sig)}"
    )


# -- the JVM (Spark's own) --------------------------------------------------------------------------------


def _class(spark: SparkSession, name: str) -> Any:  # noqa: ANN401 - a py4j proxy
    jvm = spark._jvm  # noqa: SLF001 - the session's JVM is what the jar runs in
    try:
        return jvm.java.lang.Class.forName(name)
    except Exception as exc:  # noqa: BLE001 - py4j wraps ClassNotFoundException
        pytest.fail(_changed(name, "the columnar jar", f"class not found: {exc}"))


def _methods(cls: Any, name: str) -> list[list[str]]:  # noqa: ANN401
    """The parameter type names of every public method `name` of a Java class."""
    return [[p.getName() for p in m.getParameterTypes()] for m in cls.getMethods() if m.getName() == name]


def test_python_data_source_v2_is_constructible_with_a_short_name(spark: SparkSession) -> None:
    name = "org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2"
    cls = _class(spark, name)
    used_by = "KafkaTieredProvider.python()"
    assert any(len(c.getParameterTypes()) == 0 for c in cls.getConstructors()), _changed(
        name, used_by, "no public no-argument constructor"
    )
    assert ["java.lang.String"] in _methods(cls, "setShortName"), _changed(
        f"{name}.setShortName(String)", used_by, f"found {_methods(cls, 'setShortName')}"
    )
    provider = _class(spark, "org.apache.spark.sql.connector.catalog.TableProvider")
    assert provider.isAssignableFrom(cls), _changed(name, used_by, "no longer a TableProvider")


def test_session_state_answers_data_source_exists(spark: SparkSession) -> None:
    used_by = "KafkaTieredProvider.python()"
    state = _class(spark, "org.apache.spark.sql.internal.SessionState")
    getters = [m for m in state.getMethods() if m.getName() == "dataSourceManager"]
    assert getters and len(getters[0].getParameterTypes()) == 0, _changed(
        "SessionState.dataSourceManager()", used_by, "no such method"
    )
    manager = getters[0].getReturnType()
    assert ["java.lang.String"] in _methods(manager, "dataSourceExists"), _changed(
        f"{manager.getName()}.dataSourceExists(String)",
        used_by,
        f"found {_methods(manager, 'dataSourceExists')}",
    )


def test_filter_input_stream_in_is_reachable_in_spark(spark: SparkSession) -> None:
    used_by = "PipeInput.channelOf"
    cls = _class(spark, "java.io.FilterInputStream")
    field = cls.getDeclaredField("in")
    assert field.getType().getName() == "java.io.InputStream", _changed(
        "java.io.FilterInputStream.in", used_by, f"type {field.getType().getName()}"
    )
    # Spark's launcher opens java.io to the class path (--add-opens): without it the reflection falls back
    assert field.trySetAccessible(), _changed(
        "java.io.FilterInputStream.in", used_by, "java.io is not opened to Spark's class path any more"
    )


def test_unsafe_invoke_cleaner_is_there(spark: SparkSession) -> None:
    used_by = "PythonWorker.unmapSlots and BridgeConnection.unmap"
    cls = _class(spark, "sun.misc.Unsafe")
    the_unsafe = cls.getDeclaredField("theUnsafe")
    assert the_unsafe.getType().getName() == "sun.misc.Unsafe", _changed(
        "sun.misc.Unsafe.theUnsafe", used_by, f"type {the_unsafe.getType().getName()}"
    )
    assert ["java.nio.ByteBuffer"] in _methods(cls, "invokeCleaner"), _changed(
        "sun.misc.Unsafe.invokeCleaner(ByteBuffer)", used_by, f"found {_methods(cls, 'invokeCleaner')}"
    )
