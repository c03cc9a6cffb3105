"""Our public surface stays where plugins find it.

A plugin is a file of its own, loaded the way the product loads it (`record.validation.policy.class.name`
and `policy.class.name`, `module:Class`, given to `RemoteStorageManager.configure` as the broker hands over
its `rsm.config.*` keys), written against the paths README names (`rsm.validation`, `rsm.policy`), and
again against the paths an earlier layout had (`rsm.errors`, `rsm.policies`, ...): both load and refuse
the same records and topics; the old paths give one DeprecationWarning naming the new path, per name.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from rsm import (
    LogConfig,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteStorageManager,
    TopicIdPartition,
)
from rsm.api.errors import ConfigException, RecordValidationError
from rsm.api.metadata import LogSegmentData
from segment_format.indexes import build_indexes
from segment_format.writer import build_batch

# the seed's sample policy, as a user writes it, against the documented paths
RECORD_POLICY_DOCUMENTED = """
    from rsm.validation import (
        InvalidRecordException, RecordIntrospectionHints, RecordProxy, RecordValidationPolicy, TopicMetadata,
    )

    class RequireHeader(RecordValidationPolicy):
        def validate(self, topic: TopicMetadata, record: RecordProxy) -> None:
            if not any(h.key == topic.validation_policy for h in record.headers):
                raise InvalidRecordException(f"no header {topic.validation_policy}")

        def hints(self) -> RecordIntrospectionHints:
            return RecordIntrospectionHints(access_headers=True, access_key_bytes=0, access_value_bytes=0)
"""

# the same policy against the paths of the first layout (rsm.errors, rsm.policies)
RECORD_POLICY_OLD = """
    from rsm.errors import InvalidRecordException
    from rsm.policies import RecordIntrospectionHints, RecordValidationPolicy

    class RequireHeader(RecordValidationPolicy):
        def validate(self, topic, record):
            if not any(h.key == topic.validation_policy for h in record.headers):
                raise InvalidRecordException(f"no header {topic.validation_policy}")

        def hints(self):
            return RecordIntrospectionHints(access_headers=True, access_key_bytes=0, access_value_bytes=0)
"""

TOPIC_POLICY_DOCUMENTED = """
    from rsm.policy import (
        AlterTopicRequest, ClusterState, CreateTopicRequest, DeleteRecordsRequest, DeleteTopicRequest,
        PolicyViolationException, TopicManagementPolicy,
    )

    class NoOrders(TopicManagementPolicy):
        def configure(self, configs):
            self.configured = dict(configs)

        def _check(self, topic: str) -> None:
            if topic == "orders":
                raise PolicyViolationException("topic orders may not be tiered: ask the payments team")

        def validate_create_topic(self, request: CreateTopicRequest, cluster: ClusterState) -> None:
            self._check(request.topic)

        def validate_alter_topic(self, request: AlterTopicRequest, cluster: ClusterState) -> None:
            self._check(request.topic)

        def validate_delete_topic(self, request: DeleteTopicRequest, cluster: ClusterState) -> None:
            pass

        def validate_delete_records(self, request: DeleteRecordsRequest, cluster: ClusterState) -> None:
            pass
"""

# a topic policy module as it could be written before the loader left rsm.policy.api
TOPIC_POLICY_OLD = (
    TOPIC_POLICY_DOCUMENTED
    + """
    from rsm.policy.api import load_topic_policy
    from rsm.errors import ConfigException
"""
)

# every old path: (module, name, the module the warning names)
OLD_PATHS = [
    ("rsm.errors", "InvalidRecordException", "rsm.validation"),
    ("rsm.errors", "RemoteStorageException", "rsm.api.errors"),
    ("rsm.errors", "RemoteResourceNotFoundException", "rsm.api.errors"),
    ("rsm.errors", "InvalidArgumentException", "rsm.api.errors"),
    ("rsm.errors", "SegmentIntegrityError", "rsm.api.errors"),
    ("rsm.errors", "RecordValidationError", "rsm.api.errors"),
    ("rsm.errors", "ConfigException", "rsm.api.errors"),
    ("rsm.metadata", "TopicIdPartition", "rsm.api.metadata"),
    ("rsm.metadata", "RemoteLogSegmentMetadata", "rsm.api.metadata"),
    ("rsm.log_config", "LogConfig", "rsm.api.log_config"),
    ("rsm.policies", "RecordValidationPolicy", "rsm.validation"),
    ("rsm.policies", "BuiltinPolicies", "rsm.validation.builtin"),
    ("rsm.record_validation", "RecordValidator", "rsm.validation.records"),
    ("rsm.record_validation", "projection_for", "rsm.validation.arrow"),
    ("rsm.validation", "SegmentIntegrityVerifier", "rsm.copy.integrity"),
    ("rsm.validation", "read_index", "rsm.copy.integrity"),
    ("rsm.policy.api", "load_topic_policy", "rsm.policy.loading"),
]

SHIMS = sorted({module for module, _, _ in OLD_PATHS})


@pytest.fixture
def fresh_shims() -> Iterator[None]:
    """Old paths as in a new process: no name resolved (and warned about) yet; plugin modules unloaded."""
    for module in SHIMS:
        shim = importlib.import_module(module)
        for _, name, _ in (p for p in OLD_PATHS if p[0] == module):
            vars(shim).pop(name, None)
    yield
    for name in [m for m in sys.modules if m.startswith("plugin_")]:
        del sys.modules[name]


def _plugin(directory: Path, name: str, source: str, monkeypatch: pytest.MonkeyPatch) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(directory))
    return name


def _segment(directory: Path, missing_header_at: int) -> Path:
    """A segment of 30 records carrying header 'trace', except record `missing_header_at`."""
    directory.mkdir(parents=True, exist_ok=True)
    records = [
        (b"k%d" % i, b"v%d" % i, [] if i == missing_header_at else [("trace", b"t")], 1_700_000_000_000 + i)
        for i in range(30)
    ]
    raw = build_batch(records[:10], base_offset=0) + build_batch(records[10:], base_offset=10)
    log = directory / "00000000000000000000.log"
    log.write_bytes(raw)
    offset_index, time_index = build_indexes(raw, 0)
    (directory / "00000000000000000000.index").write_bytes(offset_index)
    (directory / "00000000000000000000.timeindex").write_bytes(time_index)
    return log


def _copy(tmp_path: Path, log: Path, topic: str, log_config: dict[str, str], **configs: str) -> None:
    """One copy through a RemoteStorageManager configured with `configs`, as the broker does it."""
    rsm = RemoteStorageManager()
    rsm.configure({"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), **configs})
    try:
        tip = TopicIdPartition(uuid.uuid4(), topic, 0)
        size = log.stat().st_size
        md = RemoteLogSegmentMetadata(RemoteLogSegmentId(tip, uuid.uuid4()), 0, 29, 0, 1, 0, size, {0: 0})
        d = log.parent
        data = LogSegmentData(log, d / f"{log.stem}.index", d / f"{log.stem}.timeindex", None,
                              d / f"{log.stem}.index", b"0\n1\n0 0\n")  # fmt: skip
        rsm.copy_log_segment_data(md, data, LogConfig(log_config))
    finally:
        rsm.close()


def _deprecations(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]


@pytest.mark.parametrize(
    ("source", "old"),
    [(RECORD_POLICY_DOCUMENTED, False), (RECORD_POLICY_OLD, True)],
    ids=["documented", "old"],
)
def test_record_validation_policy_plugin_loads_and_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_shims: None, source: str, old: bool
) -> None:
    module = _plugin(
        tmp_path / "plugins", f"plugin_record_{'old' if old else 'documented'}", source, monkeypatch
    )
    log = _segment(tmp_path / "seg", missing_header_at=17)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(RecordValidationError, match="first at offset 17 .*no header trace"):
            _copy(tmp_path, log, "orders", {"record.validation.policy": "trace"},
                  **{"record.validation.policy.class.name": f"{module}:RequireHeader"})  # fmt: skip
        clean = _segment(tmp_path / "clean", missing_header_at=-1)
        _copy(tmp_path, clean, "orders", {"record.validation.policy": "trace"},
              **{"record.validation.policy.class.name": f"{module}:RequireHeader"})  # fmt: skip
    assert len(list((tmp_path / "store").rglob("*.manifest"))) == 1  # the clean segment only
    expected = (
        [
            "rsm.errors.InvalidRecordException is deprecated: import InvalidRecordException from rsm.validation",
            "rsm.policies.RecordIntrospectionHints is deprecated: import RecordIntrospectionHints from rsm.validation",
            "rsm.policies.RecordValidationPolicy is deprecated: import RecordValidationPolicy from rsm.validation",
        ]
        if old
        else []
    )
    assert sorted(_deprecations(caught)) == expected


@pytest.mark.parametrize(
    ("source", "old"), [(TOPIC_POLICY_DOCUMENTED, False), (TOPIC_POLICY_OLD, True)], ids=["documented", "old"]
)
def test_topic_management_policy_plugin_loads_and_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_shims: None, source: str, old: bool
) -> None:
    module = _plugin(
        tmp_path / "plugins", f"plugin_topic_{'old' if old else 'documented'}", source, monkeypatch
    )
    log = _segment(tmp_path / "seg", missing_header_at=-1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ConfigException, match="orders may not be tiered: ask the payments team"):
            _copy(tmp_path, log, "orders", {}, **{"policy.class.name": f"{module}:NoOrders"})
        _copy(tmp_path, log, "payments", {}, **{"policy.class.name": f"{module}:NoOrders"})
    assert len(list((tmp_path / "store").rglob("*.manifest"))) == 1  # the payments copy only
    expected = (
        [
            "rsm.errors.ConfigException is deprecated: import ConfigException from rsm.api.errors",
            "rsm.policy.api.load_topic_policy is deprecated: import load_topic_policy from rsm.policy.loading",
        ]
        if old
        else []
    )
    assert sorted(_deprecations(caught)) == expected


@pytest.mark.parametrize(("old", "name", "new"), OLD_PATHS, ids=[f"{m}.{n}" for m, n, _ in OLD_PATHS])
def test_old_path_warns_once_naming_the_new_one(fresh_shims: None, old: str, name: str, new: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = getattr(importlib.import_module(old), name)
        again = getattr(importlib.import_module(old), name)
        exec(f"from {old} import {name} as third", namespace := {})  # noqa: S102 - the import statement itself
    assert first is again is namespace["third"] is getattr(importlib.import_module(new), name)
    assert _deprecations(caught) == [f"{old}.{name} is deprecated: import {name} from {new}"]


def test_unknown_names_of_old_paths_are_attribute_errors() -> None:
    for module in SHIMS:
        with pytest.raises(AttributeError, match=f"module '{module}' has no attribute 'no_such_name'"):
            _ = importlib.import_module(module).no_such_name


def test_plugins_find_what_they_need_where_readme_names_it() -> None:
    import rsm.policy
    import rsm.validation

    for name in ("RecordValidationPolicy", "VectorizedRecordValidationPolicy", "RecordIntrospectionHints",
                 "TopicMetadata", "RecordProxy", "Header", "Failures", "InvalidRecordException"):  # fmt: skip
        assert name in rsm.validation.__all__ and hasattr(rsm.validation, name)
    for name in ("TopicManagementPolicy", "PolicyViolationException", "ClusterState", "CreateTopicRequest",
                 "AlterTopicRequest", "DeleteTopicRequest", "DeleteRecordsRequest", "RequestedTopicState"):  # fmt: skip
        assert name in rsm.policy.__all__ and hasattr(rsm.policy, name)


def test_nothing_of_ours_imports_an_old_path() -> None:
    root = Path(__file__).resolve().parents[2]
    old_modules = [m for m in SHIMS if m not in ("rsm.validation", "rsm.policy.api")]
    offenders = [
        f"{path.relative_to(root)}: {line.strip()}"
        for tree in ("rsm", "segment_format", "spark_reader", "tests", "benchmarks")
        for path in (root / tree).rglob("*.py")
        if path != Path(__file__).resolve()
        for line in path.read_text().splitlines()
        if any(line.strip().startswith((f"from {m} import", f"import {m}")) for m in old_modules)
    ]
    assert offenders == []
