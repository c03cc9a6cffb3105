"""The copy's first step: read the segment once and check everything before anything is uploaded.

One pass over the file, chunk by chunk: its integrity (every batch, the offset and time indexes, the leader
epochs: `rsm.validation.SegmentIntegrityVerifier`), a CRC-32C per chunk (the upload checks each chunk
again against it, in case the file changed), and the topic's record validation policy over the same bytes
(compressed batches decompressed once, by the validation's decoder). A fault refuses the copy naming the
file and byte; a policy's violations refuse it or go into the manifest, as the topic says.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from rsm.api.errors import RecordValidationError, RemoteStorageException, SegmentIntegrityError
from rsm.api.metadata import LogSegmentData, RemoteLogSegmentMetadata
from rsm.config.settings import TopicSettings, ViolationAction
from rsm.copy.integrity import IntegritySummary, SegmentIntegrityVerifier, read_index
from rsm.stored.pieces import crc32c
from rsm.validation.records import RecordValidator, ValidationResult
from rsm.validation.values import TopicMetadata

if TYPE_CHECKING:
    from rsm.metrics import RsmMetrics
    from rsm.validation.api import RecordValidationPolicy
    from rsm.validation.records import ValidationStats

log = logging.getLogger("rsm.manager")  # the copy's lines, under the name operators' filters know


def verify_segment(
    metadata: RemoteLogSegmentMetadata,
    data: LogSegmentData,
    settings: TopicSettings,
    *,
    policy: RecordValidationPolicy | None,
    stats: ValidationStats,
    metrics: RsmMetrics,
) -> tuple[IntegritySummary, list[int], dict[str, object] | None]:
    """Read the segment once, chunk by chunk: integrity (every batch, the offset and time indexes), a
    CRC-32C per chunk, and the topic's record validation policy over the same bytes (compressed batches
    are decompressed once, by the validation's decoder: `rsm.validation.records`). Returns the summary,
    the chunk CRCs and the validation report for the manifest (None when the topic has no policy)."""
    path = data.log_segment
    validator = _record_validator(policy, metadata, settings, path)
    crcs: list[int] = []
    buf = bytearray(settings.chunk_size)
    view = memoryview(buf)
    try:
        verifier = SegmentIntegrityVerifier(
            str(path),
            metadata.start_offset,
            metadata.end_offset,
            metadata.segment_size_in_bytes,
            settings.chunk_size,
            offset_index=read_index(data.offset_index),
            time_index=read_index(data.time_index),
            offset_index_file=_file_name(data.offset_index, "offset index"),
            time_index_file=_file_name(data.time_index, "time index"),
            on_batch=None if validator is None else validator.on_batch,
            leader_epochs=metadata.segment_leader_epochs.keys(),
        )
        with path.open("rb", buffering=0) as f:
            while True:
                n = f.readinto(buf)
                if not n:
                    break
                n = fill(f, view, n)
                verifier.feed(view[:n])
                if validator is not None:
                    validator.feed(view[:n])
                crcs.append(crc32c(view[:n]))
        summary = verifier.finish()
        result = None if validator is None else validator.finish()
    except SegmentIntegrityError as exc:
        seg = metadata.remote_log_segment_id
        raise SegmentIntegrityError(
            exc.file, exc.position, f"{exc.reason} (segment {seg.id_base64} of {seg.topic_id_partition})"
        ) from None
    except OSError as exc:
        raise RemoteStorageException(
            f"cannot read segment file {path} of {metadata.remote_log_segment_id}: {exc.strerror or exc}"
        ) from None
    report = None if result is None else _validation_report(stats, metrics, metadata, path, settings, result)
    return summary, crcs, report


def _record_validator(
    policy: RecordValidationPolicy | None,
    metadata: RemoteLogSegmentMetadata,
    settings: TopicSettings,
    path: Path,
) -> RecordValidator | None:
    if settings.validation_policy is None or policy is None:
        return None
    topic = TopicMetadata(metadata.topic_id_partition, settings.validation_policy)
    return RecordValidator(policy.for_topic(topic), topic, str(path))


def _validation_report(
    stats: ValidationStats,
    metrics: RsmMetrics,
    metadata: RemoteLogSegmentMetadata,
    path: Path,
    settings: TopicSettings,
    result: ValidationResult,
) -> dict[str, object]:
    tip = metadata.topic_id_partition
    count, violations = result.violation_count, result.violations
    refuse = bool(count) and settings.on_violation is ViolationAction.FAIL
    totals = stats.add(tip.topic, result, refuse)
    metrics.validated(tip.topic, tip.partition, result.records, count, refuse, result.seconds)
    # the copy's line names the records checked; a segment with violations gets its own line
    log.log(
        logging.INFO if count else logging.DEBUG,
        "validated segment %s of %s with policy %r: %d records, %d violation(s), %.3fs%s "
        "(topic totals: %d segments, %d records, %d violations, %.3fs)",
        metadata.remote_log_segment_id.id_base64,
        tip,
        result.policy,
        result.records,
        count,
        result.seconds,
        "; copy refused" if refuse else ("; tiered with a report" if count else ""),
        totals.segments,
        totals.records,
        totals.violations,
        totals.seconds,
    )
    if refuse:
        first = violations[0]
        raise RecordValidationError(
            f"segment {metadata.remote_log_segment_id} of {tip}: {count} record(s) violate policy "
            f"{settings.validation_policy!r}; first at offset {first.offset} (batch at byte {first.position} "
            f"of {path}): {first.reason}"
        )
    return {
        "policy": settings.validation_policy,
        "action": settings.on_violation.value,
        "records": result.records,
        "violation_count": count,
        "violations": [{"offset": v.offset, "position": v.position, "reason": v.reason} for v in violations],
    }


def fill(f: object, view: memoryview, n: int) -> int:
    """Keep reading until the buffer is full or the file ends (raw reads may return short)."""
    total = len(view)
    while n < total:
        more = f.readinto(view[n:])  # type: ignore[attr-defined]
        if not more:
            break
        n += more
    return n


def _file_name(source: object, what: str) -> str:
    return str(source) if isinstance(source, Path) else what
