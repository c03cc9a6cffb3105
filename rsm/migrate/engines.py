"""Running a plan: on local threads (`--engine local`, the default) or as a Spark job (`--engine spark`).

Both run the same items through the same runners (`RUNNERS`: one function per command, `run(ctx, item,
state) -> ItemResult`) against the same journal, so a run started on one engine can be resumed on the
other. The unit of work is a plan unit (`rsm.migrate.plan.Plan.units`: the copies of one segment, run one
after the other).

- local: a thread pool of `--parallel` workers (default 4): at most that many segments transfer at once;
  each streams with bounded memory (`rsm.migrate.transfer`, `rsm.migrate.rekey`), so memory is bounded by
  the parallelism, whatever the segment sizes.
- spark: `sparkContext.parallelize(units, len(units)).map(task)`: one task per unit (one per segment); each
  executor builds its own store and keyring from the configuration (`rsm.migrate.context.context_of`, once
  per Python worker) and records each item in the journal itself; the driver only plans, takes the journal's
  lock, collects the results and closes the run. Concurrency is Spark's (executors x cores).

`execute` is the driver of a run for both: the journal's lock and run (`rsm.migrate.journal`), items a killed
run left unfinished merged into the plan, the engine, then the run's summary recorded.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any, Protocol

from rsm import metrics
from rsm.migrate import move, rekey, verify
from rsm.migrate.context import Context, ItemResult, JobSpec, context_of
from rsm.migrate.journal import ItemState, Journal
from rsm.migrate.plan import Plan, PlanItem

log = logging.getLogger(__name__)

Runner = Callable[[Context, PlanItem, ItemState | None], ItemResult]


def _runners() -> dict[str, Runner]:
    from rsm.migrate import cross, import_

    return {
        "move": move.run,
        cross.KIND: cross.run,
        "rekey": rekey.run_rekey,
        "reencrypt": rekey.run_reencrypt,
        "verify": verify.run,
        "import": import_.run,
    }


class Reporter(Protocol):
    """Where progress goes (the CLI's rich progress bars; nothing in tests)."""

    def start(self, items: int, total_bytes: int) -> None: ...
    def advance(self, n: int) -> None: ...
    def item_done(self, result: ItemResult) -> None: ...
    def stop(self) -> None: ...


class MeteredReporter:
    """Counts each finished item in rsm.metrics (``migrate-segments``, ``migrate-bytes``), then reports it
    on: what the Prometheus endpoint of `rsm migrate` serves (``metrics.prometheus.port``)."""

    def __init__(self, reporter: Reporter, command: str) -> None:
        self.reporter = reporter
        self.command = command

    def start(self, items: int, total_bytes: int) -> None:
        self.reporter.start(items, total_bytes)

    def advance(self, n: int) -> None:
        self.reporter.advance(n)

    def item_done(self, result: ItemResult) -> None:
        item = result.item
        metrics.migrated(self.command, item.topic, item.partition, result.status, result.bytes)
        self.reporter.item_done(result)

    def stop(self) -> None:
        self.reporter.stop()


class NoReporter:
    def start(self, items: int, total_bytes: int) -> None:
        pass

    def advance(self, n: int) -> None:
        pass

    def item_done(self, result: ItemResult) -> None:
        pass

    def stop(self) -> None:
        pass


def run_items(ctx: Context, items: Sequence[PlanItem], states: dict[str, ItemState]) -> list[ItemResult]:
    """One unit's items, in order; a failure is the item's result (one line), never the unit's end."""
    runners = _runners()
    out = []
    for item in items:
        try:
            out.append(runners[item.kind](ctx, item, states.get(item.ident)))
        except Exception as exc:  # noqa: BLE001 - reported per item; the others go on
            message = " ".join(f"{type(exc).__name__}: {exc}".split())[:500]
            log.warning("%s failed: %s", item.describe(), message)
            out.append(ItemResult(item, "failed", message=message))
    return out


# -- local --------------------------------------------------------------------------------------------------
class LocalEngine:
    name = "local"

    def __init__(self, parallel: int = 4) -> None:
        self.parallel = max(1, parallel)

    def run(
        self, ctx: Context, units: list[list[PlanItem]], states: dict[str, ItemState], reporter: Reporter
    ) -> list[ItemResult]:
        counted = threading.local()

        def on_bytes(n: int) -> None:
            counted.n = getattr(counted, "n", 0) + n
            reporter.advance(n)

        def unit(items: list[PlanItem]) -> list[ItemResult]:
            results = []
            for item in items:
                counted.n = 0
                (result,) = run_items(ctx, [item], states)
                if result.status in ("done", "skipped", "vanished") and item.bytes > counted.n:
                    reporter.advance(item.bytes - counted.n)  # work an earlier run did, or nothing to move
                reporter.item_done(result)
                results.append(result)
            return results

        ctx.set_progress(on_bytes)
        results: list[ItemResult] = []
        try:
            with ThreadPoolExecutor(self.parallel, thread_name_prefix="rsm-migrate") as pool:
                futures = [pool.submit(unit, u) for u in units]
                for fut in as_completed(futures):
                    results += fut.result()
        finally:
            ctx.set_progress(None)
        return results


# -- spark --------------------------------------------------------------------------------------------------
def _state_json(state: ItemState | None) -> dict[str, Any] | None:
    if state is None:
        return None
    return {
        "item": state.item.to_json(),
        "step": state.step,
        "detail": state.detail,
        "updated_ms": state.updated_ms,
    }


def _state_of(doc: dict[str, Any] | None) -> ItemState | None:
    if doc is None:
        return None
    return ItemState(
        PlanItem.from_json(doc["item"]), doc["step"], dict(doc["detail"]), int(doc["updated_ms"])
    )


def spark_task(
    spec: JobSpec, payload: tuple[list[dict[str, Any]], list[dict[str, Any] | None]]
) -> list[dict[str, Any]]:
    """One Spark task: one unit's items, run on the executor with its own clients."""
    item_docs, state_docs = payload
    items = [PlanItem.from_json(d) for d in item_docs]
    states = {
        i.ident: s for i, s in zip(items, (_state_of(d) for d in state_docs), strict=True) if s is not None
    }
    ctx = context_of(spec)
    return [{**r.to_json(), "item": r.item.to_json()} for r in run_items(ctx, items, states)]


class SparkEngine:
    name = "spark"

    def __init__(self, spark: Any = None) -> None:
        self._spark = spark

    def session(self) -> Any:
        if self._spark is None:  # the active session, else one whose workers run this interpreter
            from spark_reader.session import tool_session

            self._spark = tool_session("rsm migrate")
        return self._spark

    def run(
        self, ctx: Context, units: list[list[PlanItem]], states: dict[str, ItemState], reporter: Reporter
    ) -> list[ItemResult]:
        if not units:
            return []
        import functools

        payload = [([i.to_json() for i in u], [_state_json(states.get(i.ident)) for i in u]) for u in units]
        sc = self.session().sparkContext
        sc.setJobDescription(f"rsm migrate {ctx.spec.job} ({len(units)} segments)")
        rdd = sc.parallelize(payload, len(payload)).map(functools.partial(spark_task, ctx.spec))
        docs = [d for part in rdd.collect() for d in part]
        results = []
        for d in docs:
            r = ItemResult(
                PlanItem.from_json(d["item"]), d["status"], int(d["bytes"]), d["message"], list(d["problems"])
            )
            reporter.advance(max(r.bytes, r.item.bytes if r.status != "failed" else 0))
            reporter.item_done(r)
            results.append(r)
        return results


# -- the driver ---------------------------------------------------------------------------------------------
@dataclass
class RunReport:
    job: str
    run: int
    resumed: bool
    journal: str
    results: list[ItemResult] = field(default_factory=list)
    earlier: list[ItemResult] = field(default_factory=list)  # finished by an earlier run of the job

    def count(self, status: str) -> int:
        return sum(1 for r in self.results if r.status == status)

    @property
    def failed(self) -> list[ItemResult]:
        return [r for r in self.results if r.status == "failed"]

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.results)

    def summary(self) -> dict[str, Any]:
        statuses = sorted({r.status for r in self.results})
        out = {"items": len(self.results), "bytes": self.bytes, **{s: self.count(s) for s in statuses}}
        if self.earlier:
            out["finished_earlier"] = len(self.earlier)
        return out


def execute(
    plan: Plan,
    spec: JobSpec,
    *,
    engine: LocalEngine | SparkEngine,
    reporter: Reporter | None = None,
    sticky: bool = False,
    force: bool = False,
    context: Context | None = None,
) -> RunReport:
    """Run a plan under its job's journal (see the module docstring)."""
    reporter = reporter or NoReporter()
    ctx = context or Context(spec)
    if ctx.config.get("metrics.enabled"):
        reporter = MeteredReporter(reporter, plan.command)
    journal = Journal(ctx.store, ctx.home, spec.job)
    run, resumed = journal.start(
        plan.command, plan.topic, plan.topic_id, plan.params, sticky=sticky, force=force
    )
    try:
        spec = dataclasses.replace(spec, run=run, options=(*spec.options, ("resumed", resumed)))
        ctx.spec = spec
        ctx.journal = Journal(ctx.store, ctx.home, spec.job, run)
        # a job's next run after a complete one has nothing recorded yet (a first run may: its job document
        # is written while the run works, so a run killed early leaves items and no document)
        states = {} if journal.fresh_run else ctx.journal.states()
        plan.merge_pending(s.item for s in states.values() if not s.finished)
        report = RunReport(spec.job, run, resumed, journal.describe())
        # items this job finished in an earlier (killed, or sticky) run: their results, not their work again
        report.earlier = [
            ItemResult(st.item, st.step, int(st.detail.get("bytes", 0)), "finished in an earlier run",
                       list(st.detail.get("problems", [])))
            for item in plan.items if (st := states.get(item.ident)) is not None and st.finished
        ]  # fmt: skip
        earlier = {r.item.ident for r in report.earlier}
        plan.items = [i for i in plan.items if i.ident not in earlier]
        reporter.start(len(plan.items), plan.bytes)
        try:
            report.results = engine.run(ctx, plan.units(), states, reporter)
        finally:
            reporter.stop()
        journal.finish(report.summary(), complete=not report.failed)
    finally:
        journal.release()
    return report
