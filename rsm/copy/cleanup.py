"""What a failed copy wrote, removed within the copy's budget; what is left then is the debris sweep's.

Why a budget and not the requests' own deadlines: the clean-up is several requests (the manifest, the
`.log`, the `.indexes`, then the unfinished writes: S3's multipart uploads, Azure's uncommitted blocks), and
against a store that stopped answering each one waited a whole `request.timeout.ms` in turn, so a copy
into a black hole answered after 4 to 5 request deadlines: longer than the bridge waits. The copy runs
`within` one `Budget` (`copy.timeout.ms`, `rsm.store.deadlines`), the clean-up included: each of its requests
gets what is left, and once the budget is spent the rest are not sent and the copy's own error is raised at
once.

Nothing of the copy runs after it returned (a request cut by the budget is cancelled, its connection
dropped), so a retry of the same segment id can never meet a clean-up removing its new objects. What the
clean-up could not remove stays findable by the segment's stem (`rsm.store.debris`): Kafka deletes the
segment ids whose copy failed (`delete_log_segment_data` removes the objects and the unfinished writes),
`rsm migrate gc` removes segment objects without a manifest, and a retry with the same id deletes any earlier
manifest first and sweeps the leftovers when it ends. Readers, `rsm store du` and `ls` count a segment only by
its manifest, written last (`rsm.catalog.keys.parse_listing`), which the clean-up removes first.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from rsm.api.metadata import RemoteLogSegmentMetadata
from rsm.store.deadlines import current_budget
from rsm.store.debris import remove_segment_leftovers
from rsm.store.layout import SegmentKeys

if TYPE_CHECKING:
    from rsm.store.objects import ObjectStore

log = logging.getLogger("rsm.manager")


def remove_failed_copy(store: ObjectStore, metadata: RemoteLogSegmentMetadata, keys: SegmentKeys) -> bool:
    """Remove every object of the segment, the manifest first, then its unfinished writes; every key whether
    or not its write seemed to succeed (a write whose answer was lost may have landed). Only this copy
    writes these keys (Kafka runs one copy of a segment id at a time), so nothing removed belongs to anyone
    else. Failures are not raised (the copy's error is the answer); returns whether everything went, and
    says in one line what is left and who removes it otherwise."""
    left: list[str] = []
    first_problem = ""
    for key in keys.all():
        try:
            store.delete(keys.bucket, key)
        except Exception as exc:  # noqa: BLE001 - see the docstring
            left.append(key.rpartition("/")[2])
            first_problem = first_problem or str(exc)
    try:
        remove_segment_leftovers(store, keys.bucket, keys.stem)
    except Exception as exc:  # noqa: BLE001 - see the docstring
        left.append("unfinished writes")
        first_problem = first_problem or str(exc)
    if not left:
        return True
    budget = current_budget()
    spent = budget is not None and budget.remaining() <= 0
    log.warning(
        "copy of segment %s failed and what it may have written (%s of %s) could not be removed%s; Kafka's "
        "delete of the segment id or `rsm migrate gc` removes it, readers never count it (no manifest): %s",
        metadata.remote_log_segment_id.id_base64,
        ", ".join(left),
        store.describe(keys.bucket, keys.stem),
        f" within {budget.setting}" if spent and budget is not None else "",
        " ".join(first_problem.split())[:300],
    )
    return False
