"""The migration journal: kept in the store, so a run killed at any moment resumes where it stopped.

Layout (a format other tools read), under the configuration's default location, beside the topic
overlays and location records:

    <bucket>/<prefix>_rsm/migrate/<job id>/job.json
    <bucket>/<prefix>_rsm/migrate/<job id>/lock.json
    <bucket>/<prefix>_rsm/migrate/<job id>/items/r<run>/<partition>/<20-digit offset>-<segment id>-<loc>.json

- The job id names the work, not the run: `<command>-<topic>-<12 hex digits>`, the digits from SHA-256 over
  the command, topic id, partitions and parameters (destination, key id, ...) in canonical JSON. Running
  the same command again finds the same job, so a killed run is resumed by running it again.
- `job.json`: `{"format": "kafka-tiered-rsm/migrate-job", "version": 1, "job_id", "command", "topic",
  "topic_id", "params", "run": n, "status": "running" | "complete", "created_ms", "updated_ms",
  "runs": [{"run", "started_ms", "finished_ms", "summary"}]}`. A run that finds its job `running` resumes
  it (same run number); one that finds it `complete` starts run n + 1, except for jobs whose finished items
  cannot be told from the store (`sticky`: an in-place re-encryption), which keep their run so that a
  second run re-encrypts nothing.
- One item object per segment copy worked on: `{"format": "kafka-tiered-rsm/migrate-item", "version": 1,
  "item": <PlanItem JSON>, "step": "...", "updated_ms", "detail": {...}}`, rewritten (one PUT) after the
  steps of an item that the store alone would not show; the steps of each command are in its module
  (`move`, `rekey`, ...). Terminal
  steps: `done`, `skipped` (nothing to do), `vanished` (deleted meanwhile, by retention). A resumed run
  carries on each unfinished item from its last recorded step; every step is idempotent, so a step done
  but not yet recorded when the process died is simply done again.
- `lock.json`: `{"host", "pid", "run", "started_ms", "heartbeat_ms"}`, refreshed every `HEARTBEAT_S`; another
  run refuses to start while it is fresh (`STALE_S`) unless its process is gone from this host (a killed
  run is resumed at once) or `--force` is given. Object stores have no atomic create-if-absent here, so
  this guards against mistakes, not against two operators starting runs in the same second.

Reading the journal costs one listing per 1000 items plus one GET per item, in parallel.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from rsm.migrate.plan import PlanItem
from rsm.processes import pid_alive
from rsm.store.layout import Location
from rsm.store.objects import ObjectNotFound, ObjectStore

log = logging.getLogger(__name__)

JOURNAL_DIR = "_rsm/migrate/"
JOB_FORMAT = "kafka-tiered-rsm/migrate-job"
ITEM_FORMAT = "kafka-tiered-rsm/migrate-item"
VERSION = 1
TERMINAL = frozenset({"done", "skipped", "vanished"})
HEARTBEAT_S = 20.0
STALE_S = 120.0
READ_THREADS = 16


class JournalError(Exception):
    """The journal cannot be used (held by another run, unreadable): one line, exit status 1."""


def job_id(command: str, topic: str | None, topic_id: str | None, params: dict[str, Any]) -> str:
    doc = {"command": command, "topic_id": topic_id, "params": params}
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return f"{command}-{topic or 'all'}-{digest[:12]}"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _dumps(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode() + b"\n"


@dataclass(frozen=True)
class ItemState:
    item: PlanItem
    step: str
    detail: dict[str, Any]
    updated_ms: int

    @property
    def finished(self) -> bool:
        return self.step in TERMINAL


class Journal:
    """One job's journal (see the module docstring). Thread-safe; executors open their own."""

    def __init__(self, store: ObjectStore, location: Location, job: str, run: int = 1) -> None:
        self.store = store
        self.location = location
        self.job = job
        self.run = run
        self.fresh_run = False
        self.dir = f"{location.prefix}{JOURNAL_DIR}{job}/"
        self._heartbeat: threading.Thread | None = None
        self._stop = threading.Event()

    # -- keys --------------------------------------------------------------------------------------------
    @property
    def bucket(self) -> str:
        return self.location.bucket

    def describe(self) -> str:
        return self.store.describe(self.bucket, self.dir)

    def _items_dir(self) -> str:
        return f"{self.dir}items/r{self.run}/"

    def item_key(self, item: PlanItem) -> str:
        return self._items_dir() + item.ident + ".json"

    # -- the job -----------------------------------------------------------------------------------------
    def read_job(self) -> dict[str, Any] | None:
        try:
            doc = json.loads(self.store.get(self.bucket, self.dir + "job.json"))
        except ObjectNotFound:
            return None
        except ValueError:
            raise JournalError(f"journal {self.describe()}job.json is not JSON") from None
        if not isinstance(doc, dict) or doc.get("format") != JOB_FORMAT or doc.get("version") != VERSION:
            raise JournalError(f"journal {self.describe()}job.json is not a {JOB_FORMAT} document")
        return doc

    def start(
        self,
        command: str,
        topic: str | None,
        topic_id: str | None,
        params: dict[str, Any],
        *,
        sticky: bool = False,
        force: bool = False,
    ) -> tuple[int, bool]:
        """Take the lock and open the run; returns (run number, whether an unfinished run is resumed)."""
        with ThreadPoolExecutor(1) as pool:  # the lock and the job document at once: two round trips in one
            job = pool.submit(self.read_job)
            self._lock(force)
            doc = job.result()
        now = _now_ms()
        resumed = False
        if doc is None:
            doc = {
                "format": JOB_FORMAT, "version": VERSION, "job_id": self.job, "command": command,
                "topic": topic, "topic_id": topic_id, "params": params, "run": 1, "status": "running",
                "created_ms": now, "updated_ms": now, "runs": [{"run": 1, "started_ms": now}],
            }  # fmt: skip
        elif doc.get("status") == "running":
            resumed = True
        elif not sticky:
            self.fresh_run = True  # a new run number: nothing is recorded under it yet
            doc["run"] = int(doc.get("run", 0)) + 1
            doc["status"] = "running"
            doc.setdefault("runs", []).append({"run": doc["run"], "started_ms": now})
        else:
            doc["status"] = "running"
            doc.setdefault("runs", []).append({"run": doc["run"], "started_ms": now})
        doc["updated_ms"] = now
        self.run = int(doc["run"])
        self._doc = doc
        if resumed:  # a killed run's half-written journal records (temporary files: the file store's only)
            for key in self.store.list(self.bucket, self.dir, include_temporary=True):
                if ".tmp-" in key.rsplit("/", 1)[-1]:
                    self.store.delete(self.bucket, key)
        # written while the run starts its work (joined by `finish`): items are recorded under the run's own
        # prefix, so a run killed before these land is resumed the same (its items are found, the run is 1)
        self._background = ThreadPoolExecutor(2, thread_name_prefix="rsm-journal")
        self._pending = [
            self._background.submit(self.store.put, self.bucket, self.dir + "job.json", _dumps(doc)),
            self._background.submit(self._write_lock),
        ]
        return self.run, resumed

    def _join(self) -> None:
        pending, self._pending = getattr(self, "_pending", []), []
        for future in pending:
            future.result()

    def finish(self, summary: dict[str, Any], complete: bool) -> None:
        """Record the run's summary; `complete` when nothing is left to do (else it stays `running`)."""
        self._join()
        doc = getattr(self, "_doc", None) or self.read_job() or {}
        now = _now_ms()
        doc["status"] = "complete" if complete else "running"
        doc["updated_ms"] = now
        runs = doc.setdefault("runs", [])
        if runs and runs[-1].get("run") == self.run:
            runs[-1].update(finished_ms=now, summary=summary)
        self.store.put(self.bucket, self.dir + "job.json", _dumps(doc))

    # -- the lock ----------------------------------------------------------------------------------------
    def _lock(self, force: bool) -> None:
        try:
            lock = json.loads(self.store.get(self.bucket, self.dir + "lock.json"))
        except (ObjectNotFound, ValueError):
            return
        if force or not isinstance(lock, dict):
            return
        age = time.time() - int(lock.get("heartbeat_ms", 0)) / 1000
        same_host = lock.get("host") == socket.gethostname()
        alive = same_host and pid_alive(int(lock.get("pid", -1)))
        if age < STALE_S and (alive or not same_host) and int(lock.get("pid", -1)) != os.getpid():
            raise JournalError(
                f"job {self.job} is being run by process {lock.get('pid')} on {lock.get('host')} "
                f"(journal {self.describe()}, heartbeat {age:.0f} s ago); --force takes it over"
            )

    def _write_lock(self) -> None:
        self._lock_doc = {
            "host": socket.gethostname(), "pid": os.getpid(), "run": self.run, "started_ms": _now_ms(),
        }  # fmt: skip
        self._beat()
        self._stop.clear()
        self._heartbeat = threading.Thread(target=self._beat_loop, name="rsm-migrate-lock", daemon=True)
        self._heartbeat.start()

    def _beat(self) -> None:
        self.store.put(
            self.bucket, self.dir + "lock.json", _dumps({**self._lock_doc, "heartbeat_ms": _now_ms()})
        )

    def _beat_loop(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self._beat()
            except Exception as exc:  # noqa: BLE001 - a missed heartbeat only weakens the guard
                log.warning("could not refresh the journal lock: %s", exc)

    def release(self) -> None:
        try:
            self._join()
        except Exception as exc:  # noqa: BLE001 - reported; the lock is removed below anyway
            log.warning("could not write the journal's job document or lock: %s", exc)
        if getattr(self, "_background", None) is not None:
            self._background.shutdown(wait=True)
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join(5)
            self._heartbeat = None
        try:
            self.store.delete(self.bucket, self.dir + "lock.json")
        except Exception as exc:  # noqa: BLE001
            log.warning("could not remove the journal lock: %s", exc)

    # -- items -------------------------------------------------------------------------------------------
    def record(self, item: PlanItem, step: str, **detail: Any) -> None:
        doc = {
            "format": ITEM_FORMAT, "version": VERSION, "item": item.to_json(), "step": step,
            "updated_ms": _now_ms(), "detail": detail,
        }  # fmt: skip
        self.store.put(self.bucket, self.item_key(item), _dumps(doc))

    def state(self, item: PlanItem) -> ItemState | None:
        return self._read(self.item_key(item))

    def _read(self, key: str) -> ItemState | None:
        try:
            doc = json.loads(self.store.get(self.bucket, key))
        except ObjectNotFound:
            return None
        except ValueError:
            log.warning("ignoring unreadable journal item %s", self.store.describe(self.bucket, key))
            return None
        if not isinstance(doc, dict) or doc.get("format") != ITEM_FORMAT:
            return None
        return ItemState(PlanItem.from_json(doc["item"]), str(doc["step"]), dict(doc.get("detail") or {}),
                         int(doc.get("updated_ms", 0)))  # fmt: skip

    def states(self) -> dict[str, ItemState]:
        """Every item recorded in this run, by ident."""
        keys = [k for k in self.store.list(self.bucket, self._items_dir()) if k.endswith(".json")]
        if not keys:
            return {}
        with ThreadPoolExecutor(min(READ_THREADS, len(keys)), thread_name_prefix="rsm-journal") as pool:
            found = [s for s in pool.map(self._read, keys) if s is not None]
        return {s.item.ident: s for s in found}


# -- crash points, for the kill -9 tests ----------------------------------------------------------------------
_crash_lock = threading.Lock()
_crash_count = 0


def crash_point(label: str) -> None:
    """Die by SIGKILL at the N-th crash point when RSM_MIGRATE_KILL_AT=N (tests of resumption).

    Called between the store writes of every step, so a test can stop a run at each of them in turn.
    """
    at = os.environ.get("RSM_MIGRATE_KILL_AT")
    if not at:
        return
    global _crash_count
    with _crash_lock:
        _crash_count += 1
        n = _crash_count
    trace = os.environ.get("RSM_MIGRATE_KILL_TRACE")
    if trace:
        with open(trace, "a") as f:
            f.write(f"{n} {label}\n")
    if n == int(at):
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
