"""Which of PySpark's streaming data source interfaces the running Spark has, and stand-ins where it lacks one.

The stream reader is written against PySpark 4.3. Older lines lack parts of it, and the reader must still
run there, with the missing feature off and one log line saying so (`note_missing`), never an error:

- admission control (`pyspark.sql.streaming.datasource`: `ReadLimit`, `ReadMaxRows`, `ReadAllAvailable`,
  and `latestOffset(start, limit)`) came with PySpark 4.2. Before it Spark calls `latestOffset()` with no
  argument and no limit: `maxOffsetsPerTrigger` is not applied;
- `SupportsTriggerAvailableNow` (`prepareForTriggerAvailableNow`) came with the same module. Without it
  Spark runs `Trigger.AvailableNow` as one micro-batch of everything (Spark's own warning says so).

The stand-in classes only keep the reader's code importable and its signatures the same; Spark never
sees them (it neither sends limits nor asks for AvailableNow where the real ones are missing).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)

try:
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

    ADMISSION_CONTROL = True
except ImportError:  # PySpark before 4.2
    ADMISSION_CONTROL = False

    class ReadLimit:  # type: ignore[no-redef]
        """Stands in for PySpark 4.2's ReadLimit."""

    @dataclass
    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]
        """Stands in for PySpark 4.2's ReadAllAvailable."""

    @dataclass
    class ReadMaxRows(ReadLimit):  # type: ignore[no-redef]
        """Stands in for PySpark 4.2's ReadMaxRows."""

        max_rows: int


try:
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    AVAILABLE_NOW_BASES: tuple[type, ...] = (SupportsTriggerAvailableNow,)
except ImportError:  # PySpark before 4.2
    AVAILABLE_NOW_BASES = ()

AVAILABLE_NOW = bool(AVAILABLE_NOW_BASES)

_noted: set[str] = set()


def note_missing(has_limit: bool) -> None:
    """One log line per process naming what this PySpark's stream reader interface lacks, if anything."""
    missing = []
    if not ADMISSION_CONTROL and has_limit:
        missing.append("admission control (maxOffsetsPerTrigger is not applied)")
    if not AVAILABLE_NOW:
        missing.append("SupportsTriggerAvailableNow (Trigger.AvailableNow runs as one micro-batch)")
    line = "; ".join(missing)
    if not line or line in _noted:
        return
    _noted.add(line)
    import pyspark

    log.warning("kafka-tiered: PySpark %s lacks %s: PySpark 4.2 or newer has it", pyspark.__version__, line)
