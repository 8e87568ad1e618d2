"""What a perf test holds: a measured point, a gate, a crossover, and the policy that judges it.

The policy (re-run an inconclusive point, when to record under ``--llmperf-update``, what a
missing baseline means) lives here and ends in an ``Outcome``: pass, fail or skip with the
sentence a reviewer can paste into a PR, plus warnings. No pytest here: the plugin layer turns
an ``Outcome`` into ``pytest.fail``/``skip``/warnings (``plugin/checks.py``), and hands down
callbacks for what it collects (JUnit properties, comparisons), as pytest-benchmark does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pytest_llmperf.base.gpu_stats import clock_note
from pytest_llmperf.base.results import LevelResult, SweepResult, Workload
from pytest_llmperf.report.results_file import Judgement
from pytest_llmperf.report.tables import junit_properties
from pytest_llmperf.run import accuracy
from pytest_llmperf.run.adjust import can_adjust, current_residuals, entry_lookup, launch_noise
from pytest_llmperf.run.busy import (
    BusyPoint,
    OnBusy,
    all_starved,
    all_throttled,
    busy_point,
    launch_redo,
    settle,
    skip_message,
    throttle_note,
)
from pytest_llmperf.run.history_checks import HistoryJudge
from pytest_llmperf.run.passes import AUTO, Passes, recorded_ratio
from pytest_llmperf.run.perfrun import PerfRun, PointError
from pytest_llmperf.run.probing import answer_every_launch, judge_point, launch_probes
from pytest_llmperf.run.record_launches import METRIC, record_launches
from pytest_llmperf.run.recording import git_commit, recorded_entry, run_provenance, valid_samples
from pytest_llmperf.run.sequential import settle_config
from pytest_llmperf.verdicts.accuracy import AccuracyComparison
from pytest_llmperf.verdicts.baseline import BaselineFileError, BaselineStore, EntryKey
from pytest_llmperf.verdicts.compare import (
    DEFAULT_METRICS,
    PointComparison,
    compare_point,
    resolve_tolerance,
)
from pytest_llmperf.verdicts.consistency import Consistency
from pytest_llmperf.verdicts.crossover import sweep_line
from pytest_llmperf.verdicts.gates import Gate, GateResult, evaluate_gate
from pytest_llmperf.verdicts.green import green_means, missable
from pytest_llmperf.verdicts.launch_adjust import pooled_residual_noise
from pytest_llmperf.verdicts.stats import LaunchNoise
from pytest_llmperf.verdicts.validity import ValidityPolicy
from pytest_llmperf.verdicts.verdict import Verdict

WarningKind = Literal["stale", "inconclusive"]
Properties = Callable[[list[tuple[str, str]]], None]
# What a test judged and with which of its settings, for the results file (``llmperf compare``).
OnJudgement = Callable[[Judgement], None]


def _judged(
    check: Any,
    kind: Literal["point", "gate", "crossover"],
    config: str,
    verdict: Verdict,
    **settings: Any,
) -> None:
    """Hand ``check``'s verdict and the settings it was judged with to its ``on_judgement``."""
    if check.on_judgement is not None:
        policy = check.policy or ValidityPolicy()
        key = check.workload.key()
        check.on_judgement(Judgement(kind=kind, nodeid=check.nodeid, config=config, workload=key,
                                     verdict=verdict, policy=policy, **settings))  # fmt: skip


def _busy(on_busy: OnBusy | None, points: list[BusyPoint]) -> Outcome:
    """Undecided: the machine, not the server or the client, made these points unmeasurable."""
    if on_busy is not None:
        for p in points:
            on_busy(p)
    return Outcome("skip", skip_message(points))


@dataclass
class Outcome:
    """What a check concluded, for the plugin to enact: pass, fail or skip, and warnings."""

    kind: Literal["pass", "fail", "skip"] = "pass"
    message: str = ""
    warnings: list[tuple[WarningKind, str]] = field(default_factory=list)

    @classmethod
    def fail(cls, message: str) -> Outcome:
        return cls("fail", message)


@dataclass(frozen=True)
class SweepCheckResult:
    """A whole-sweep number's verdict (crossover or SLO), for the summary and the plots."""

    metric: str
    label: str
    value: int | None
    baseline: int | None
    verdict: Verdict

    def line(self) -> str:
        return sweep_line(self.label, self.value, self.baseline, self.verdict)


@dataclass
class PointCheck:
    """One (config, concurrency) point: its samples and the baseline assertion."""

    config: str
    concurrency: int
    workload: Workload
    run: PerfRun
    store: BaselineStore
    repeat: int = 1
    max_reruns: int = 2
    baseline_repeat: int = 1  # samples when recording (update), each from its own launch
    metrics: Sequence[str] | None = None
    tolerances: dict[str, float] = field(default_factory=dict)
    update: bool = False
    rerecord: bool = False  # record even a passing point (a fresh baseline with its noise)
    invalid_policy: str = "fail"
    policy: ValidityPolicy | None = None  # validity thresholds from the settings
    nodeid: str = ""
    record_command: str = ""  # the session's own command narrowed to this test, updating
    on_properties: Properties | None = None
    on_compared: Callable[[PointComparison], None] | None = None
    on_invalid: Callable[[str], None] | None = None
    on_judgement: OnJudgement | None = None
    on_busy: OnBusy | None = None  # a point the machine was too busy to measure (run/busy.py)
    adjust: str = "none"  # "launch": launch-adjusted verdicts (run/adjust.py); "auto": chosen
    levels: Sequence[int] = ()  # the sweep each launch measures when adjusting
    history: HistoryJudge | None = None  # judge_against = history: the window of earlier runs
    # Sequential verdicts (run/sequential.py): launches added while a point is undecided, up to
    # launch_budget per config (or time_budget minutes); False: max_reruns fixed re-runs.
    sequential: bool = False
    launch_budget: int = 6
    time_budget: float | None = None
    looks: int | None = None  # the launch budget this point was judged at, when sequential
    # passes of the sweep a recording launch measures (adjusting); "auto": run/passes.py
    baseline_passes: Passes = 1
    samples: list[LevelResult] = field(default_factory=list)
    comparison: PointComparison | None = None
    accuracy_items: int = 0  # the accuracy probe's items (0: off), run/accuracy.py
    accuracy_drop: float = 0.05
    accuracy: AccuracyComparison | None = None
    consistency: Consistency | None = None  # the greedy probes against the entry's answers

    @property
    def adjusting(self) -> bool:
        return self.adjust in ("launch", "auto") and can_adjust(self.levels, self.concurrency)

    @property
    def passes(self) -> Passes:
        """Passes of the sweep a launch measures: ``baseline_passes`` when recording, else
        as many as this point's baseline recorded (its residual noise is that of their mean)."""
        return self.baseline_passes if self.update else self.entry_passes

    @property
    def entry_passes(self) -> int:
        """The passes this point's baseline recorded (1 without one)."""
        entry = self.store.get(self.key, mark_used=False)
        return entry.passes if entry is not None else 1

    def measure(self) -> None:
        """Measure (or reuse) ``repeat`` samples of this point (``baseline_repeat`` when
        recording, from fresh launches); ``PointError`` if it cannot. Adjusting, each of
        those launches measures the whole sweep."""
        self._every_launch_answers()
        n = max(self.repeat, self.baseline_repeat) if self.update else self.repeat
        if self.adjusting:
            ratio = None
            if self.passes == AUTO:  # re-recording: the ratio the entries being replaced show
                ratio = recorded_ratio(self.store, self.key.hardware, self.config,
                                       self.workload.key(), self.levels)  # fmt: skip
            redo = launch_redo(self.workload, self.policy, self.max_reruns)
            if self.update and self.sequential:  # launches added while the noise is too wide
                old = self.store.get(self.key, mark_used=False)
                tol = resolve_tolerance(METRIC, test=self.tolerances or None, entry=old)
                record_launches(self.run, self.config, self.workload, self.levels, n, self.passes,
                                ratio, tolerance=tol, launch_budget=self.launch_budget,
                                time_budget_min=self.time_budget, policy=self.policy,
                                redo=redo)  # fmt: skip
            else:
                self.run.ensure_launches(self.config, self.workload, self.levels, n,
                                         self.passes, ratio, redo)  # fmt: skip
            self.samples = self.run.samples(self.config, self.workload, self.concurrency)
            return
        # each recording launch answers the probes (``_every_launch_answers``)
        self.run.ensure(self.config, self.workload, self.concurrency, n, independent=n > 1)
        self.samples = settle(self.run, self.config, self.workload, self.concurrency, n,
                              self.max_reruns, self.policy)  # fmt: skip
        if self.update:
            self._replace_invalid(n)

    def _passes_moved(self) -> bool:
        """Recording at other passes than the entry's: re-recorded though it passes, so that a
        sweep's entries agree (a run measures the passes they recorded)."""
        entry = self.store.get(self.key, mark_used=False) if self.adjusting else None
        got = entry and self.run.launch_passes(self.config, self.workload, self.levels, self.passes)
        return entry is not None and entry.passes != got

    def _replace_invalid(self, n: int) -> None:
        """Recording: re-measure (fresh launches where possible) while fewer than ``n`` samples
        are valid, at most ``max_reruns`` times; invalid ones are then left out of the entry."""
        for _ in range(self.max_reruns):
            valid, _ = valid_samples(self.samples, self.workload, self.policy)
            if len(valid) >= n:
                return
            try:
                self.run.measure(self.config, self.workload, self.concurrency, fresh_launch=True)
            except PointError:
                break
            self.samples = self.run.samples(self.config, self.workload, self.concurrency)

    def _residuals(self, concurrency: int | None = None) -> dict[str, list[float]] | None:
        if not self.adjusting:
            return None
        hw = self.run.hardware_for(self.config)
        wl = self.workload.key()
        return current_residuals(
            self.run.by_launch(self.config, self.workload),
            lambda c: self.store.get(EntryKey(hw, self.config, wl, c), mark_used=False),
            self.concurrency if concurrency is None else concurrency,
            list(self.metrics or DEFAULT_METRICS),
        )

    def _compare(self, concurrency: int, *, looks: int | None = None) -> PointComparison:
        """This test's comparison of level ``concurrency`` of its config (its own level, or a
        sibling the sequential loop judges with this test's metrics and tolerances)."""
        key = EntryKey(self.key.hardware, self.config, self.key.workload, concurrency)
        own = concurrency == self.concurrency
        return compare_point(
            self.config,
            self.run.samples(self.config, self.workload, concurrency),
            self.store.get(key, mark_used=own),
            workload=self.workload,
            metrics=self.metrics,
            tolerances=self.tolerances or None,
            policy=self.policy,
            adjusted=self._residuals(concurrency),
            attached=self.run.mode_for(self.config) == "attached",
            adjust="auto" if self.adjust == "auto" else "both",
            looks=looks,
            residual_noise=self._pooled_noise() if looks is not None else None,
        )

    def _pooled_noise(self) -> dict[str, LaunchNoise]:
        """Per metric, the residual spread pooled over this sweep's recorded levels: the
        sequential rule's noise, known to more degrees of freedom than one level gives."""
        if not self.adjusting:
            return {}
        entries = [
            self.store.get(EntryKey(self.key.hardware, self.config, self.key.workload, c),
                           mark_used=False)
            for c in sorted({*self.levels, self.concurrency})
        ]  # fmt: skip
        names = self.metrics or DEFAULT_METRICS
        pooled = {n: pooled_residual_noise(entries, n) for n in names}
        return {n: v for n, v in pooled.items() if v is not None}

    def _evaluate_sequential(self) -> PointComparison:
        """The sequential rule over the config's sweep (``run/sequential.py``): launches are
        added for the undecided points only, and this point's verdict is its last look."""
        levels = sorted({*self.levels, self.concurrency}) if self.levels else [self.concurrency]
        budget = self.looks = self.launch_budget
        settle_config(self.run, self.config, self.workload, levels,
                      lambda c: self._compare(c, looks=budget), adjusting=self.adjusting,
                      launch_budget=budget, time_budget_min=self.time_budget,
                      policy=self.policy, passes=self.entry_passes)  # fmt: skip
        self.samples = self.run.samples(self.config, self.workload, self.concurrency)
        self.comparison = self._compare(self.concurrency, looks=budget)
        return self.comparison

    def _every_launch_answers(self) -> None:
        """Each launch answers the probes before the next replaces it, where they count."""
        try:
            entry = None if self.update else self.store.get(self.key, mark_used=False)
        except BaselineFileError:
            return  # judging the point fails naming the file and field
        held = entry is not None and entry.probes is not None
        answer_every_launch(self.run, self.config, self.workload, self.update or held)

    @property
    def result(self) -> LevelResult:
        """The first sample (per-request facts, failures); verdicts and tables use all."""
        return self.samples[0]

    @property
    def key(self) -> EntryKey:
        return EntryKey(
            self.run.hardware_for(self.config), self.config, self.workload.key(), self.concurrency
        )

    def evaluate(self) -> PointComparison:
        """Judge against the baseline without asserting, re-measuring an inconclusive point up
        to ``max_reruns`` times (a failing one once, to confirm it), in fresh launches where it
        can. Sequential (not recording, a config that can be relaunched):
        ``_evaluate_sequential``."""
        self._every_launch_answers()
        # An attached server is one launch: no look after the first, so the plain rule; a point
        # judged against its history has no baseline launches to look against.
        sequential = self.sequential and self.history is None and not self.update
        if sequential and self.run.can_relaunch(self.config):
            return self._evaluate_sequential()
        entry = self.store.get(self.key)

        def judge() -> PointComparison:
            if self.history is not None:
                return self.history.compare(
                    self.config,
                    self.samples,
                    workload=self.workload,
                    hardware_key=self.run.hardware_for(self.config),
                    metrics=self.metrics,
                    policy=self.policy,
                    attached=self.run.mode_for(self.config) == "attached",
                )
            return compare_point(
                self.config,
                self.samples,
                entry,
                workload=self.workload,
                metrics=self.metrics,
                tolerances=self.tolerances or None,
                policy=self.policy,
                adjusted=self._residuals(),
                attached=self.run.mode_for(self.config) == "attached",
                adjust="auto" if self.adjust == "auto" else "both",
            )

        pc = judge()
        for rerun in range(self.max_reruns):
            # A failure is confirmed once before it fails the test: a stall or a neighbour's
            # burst hits one measurement, a regression every one (judged on all samples).
            confirm = pc.verdict == Verdict.FAIL and rerun == 0
            if self.update or (pc.verdict != Verdict.INCONCLUSIVE and not confirm):
                break
            if pc.verdict == Verdict.INCONCLUSIVE and not pc.rerun:
                break  # against its history: the next run settles it, not more samples
            if not confirm and not self.run.can_relaunch(self.config) and pc.needs_launches:
                break  # more samples of this launch cannot narrow a launch-noise margin
            try:
                # A re-run on the same launch shares its speed and proves little: relaunch.
                if self.adjusting:
                    n = len(self.run.by_launch(self.config, self.workload)) + 1
                    self.run.ensure_launches(
                        self.config, self.workload, self.levels, n, self.entry_passes
                    )
                else:
                    self.run.measure(
                        self.config, self.workload, self.concurrency, fresh_launch=True
                    )
            except PointError:
                break
            self.samples = self.run.samples(self.config, self.workload, self.concurrency)
            pc = judge()
        self.comparison = pc
        return pc

    compare = evaluate  # the older name, kept as an alias

    def judge(self) -> Outcome:
        """Fail when a gated metric regressed beyond tolerance and beyond noise.

        Missing baseline: fail with the command that records it. ``--llmperf-update``: record
        new or changed entries and pass. Invalid measurement: skip (or fail, by setting).
        Raises ``BaselineFileError`` when the stored file cannot be read.
        """
        pc = self.evaluate()
        if self.on_compared is not None:
            self.on_compared(pc)
        acc = self._accuracy() if pc.verdict != Verdict.INVALID else None
        # Answers do not depend on the load: changed ones fail even where speed was invalid.
        cons = self._consistency()
        out = self._enact(pc, acc, cons)
        # after _enact: a point it recorded is RECORDED in JUnit and results, as in the terminal
        if self.on_properties is not None:
            self.on_properties(junit_properties(point=pc))
        _judged(self, "point", self.config, pc.verdict, concurrency=self.concurrency,
                metrics=None if self.metrics is None else list(self.metrics),
                tolerances=dict(self.tolerances), adjust=self.adjust, looks=self.looks,
                green_means=green_means(pc), missable=missable(pc), accuracy=acc,
                consistency=cons)  # fmt: skip
        return out

    def _enact(
        self, pc: PointComparison, acc: AccuracyComparison | None, cons: Consistency | None
    ) -> Outcome:
        """What the point's verdicts do to its test and, updating, to its baseline entry."""
        if cons is not None and cons.verdict == Verdict.FAIL and not self.update:
            speed = f"\n{pc.message()}" if pc.verdict == Verdict.FAIL else ""
            return Outcome.fail(cons.message + speed)
        if pc.verdict == Verdict.INVALID and all_starved(self.samples, self.workload, self.policy):
            return _busy(self.on_busy, [busy_point(self.config, self.samples)])
        if pc.verdict == Verdict.INVALID:
            message = pc.message()
            if all_throttled(self.samples, self.workload, self.policy):
                message += throttle_note(self.samples)
            if self.on_invalid is not None:
                self.on_invalid(message)
            if self.update or self.invalid_policy == "fail":
                return Outcome.fail(
                    f"INVALID measurement (not a performance verdict, not recorded): {message}"
                )
            return Outcome("skip", f"llmperf INVALID measurement: {message}")
        if acc is not None and acc.verdict == Verdict.INVALID:
            if self.update or self.invalid_policy == "fail":
                return Outcome.fail(f"INVALID accuracy probe (not recorded): {acc.message}")
            return Outcome("skip", f"llmperf INVALID accuracy probe: {acc.message}")
        if cons is not None and cons.verdict == Verdict.INVALID:
            if self.update or self.invalid_policy == "fail":
                return Outcome.fail(f"INVALID consistency probes (not recorded): {cons.message}")
            return Outcome("skip", f"llmperf INVALID consistency probes: {cons.message}")
        if self.update:
            redo_acc = acc is not None and (acc.verdict != Verdict.PASS or self.rerecord)
            redo_cons = cons is not None and (cons.verdict != Verdict.PASS or self.rerecord)
            if pc.verdict != Verdict.PASS or pc.stale or self.rerecord or self._passes_moved():
                self._record(acc)
                pc.verdict, pc.messages = Verdict.RECORDED, []
            elif redo_acc or redo_cons:
                self._record_answers(acc if redo_acc else None, redo_cons)
            return Outcome()
        record = self.record_command or f"pytest '{self.nodeid}' --llmperf-update"
        if pc.verdict == Verdict.MISSING:
            return Outcome.fail(f"{pc.message()}\n  record it: {record}")
        if pc.verdict == Verdict.FAIL:
            return Outcome.fail(pc.message() + (f"\n{acc.message}" if acc is not None else ""))
        if acc is not None and acc.verdict == Verdict.MISSING:
            return Outcome.fail(f"{acc.message}\n  record it: {record}")
        if acc is not None and acc.verdict == Verdict.FAIL:
            return Outcome.fail(acc.message)
        out = Outcome()
        if acc is not None and acc.verdict == Verdict.INCONCLUSIVE:
            out.warnings.append(("inconclusive", acc.message))
        if pc.verdict == Verdict.INCONCLUSIVE:
            out.warnings.append(("inconclusive", f"{green_means(pc)}\n{pc.message()}"))
        out.warnings += [("stale", m.message) for m in pc.stale]
        return out

    def _accuracy(self) -> AccuracyComparison | None:
        """The accuracy probe against the baseline entry's answers (None when off)."""
        if not self.accuracy_items:
            return None
        entry = self.store.get(self.key, mark_used=False)
        self.accuracy = accuracy.judge(
            self.run, self.config, self.workload, self.accuracy_items,
            entry.accuracy if entry is not None else None, drop=self.accuracy_drop,
            new_label="this run", old_label="the baseline",
        )  # fmt: skip
        return self.accuracy

    def _consistency(self) -> Consistency | None:
        """The greedy probes against the baseline entry's answers (None: off, or nothing to
        judge against outside a recording)."""
        entry = self.store.get(self.key, mark_used=False)
        self.consistency = judge_point(self.run, self.config, self.workload,
                                       entry.probes if entry is not None else None,
                                       update=self.update)  # fmt: skip
        return self.consistency

    def _probes(self) -> dict[str, Any]:
        """This session's probe answers for the entry (none: the field left as it is)."""
        got = launch_probes(self.run, self.config, self.workload)
        return {"probes": got} if got else {}

    def _record_answers(self, acc: AccuracyComparison | None, probes: bool) -> None:
        """Add the probes' answers to the stored entry, whose speed numbers still hold."""
        entry = self.store.get(self.key, mark_used=False)
        if entry is not None:
            update = {"accuracy": acc.new} if acc is not None else {}
            entry = entry.model_copy(update={**update, **(self._probes() if probes else {})})
            self.store.queue_update(self.key, entry, run_provenance(self.run, self.config))

    def _record(self, acc: AccuracyComparison | None = None) -> None:
        """Queue the entry from the valid samples only (judging's policy); the verdict was
        not INVALID, so at least one is valid."""
        facts = self.run.facts(self.config)
        valid, left_out = valid_samples(self.samples, self.workload, self.policy)
        by_launch = None
        if self.adjusting:
            ok = {id(s) for s in valid}
            by_launch = {
                lid: {
                    c: [x for x in s if c != self.concurrency or id(x) in ok]
                    for c, s in got.items()
                }
                for lid, got in self.run.by_launch(self.config, self.workload).items()
            }
        entry = recorded_entry(
            valid,
            by_launch,
            self.concurrency,
            self.store.get(self.key),
            version=facts.version if facts else None,
            git_commit=git_commit(),
            invalid_left_out=len(left_out),
        )
        if acc is not None:
            entry = entry.model_copy(update={"accuracy": acc.new})
        entry = entry.model_copy(update=self._probes())
        self.store.queue_update(self.key, entry, run_provenance(self.run, self.config))


@dataclass
class GateCheck:
    """One cross-config gate at one concurrency."""

    gate: Gate
    concurrency: int
    workload: Workload
    run: PerfRun
    on_properties: Properties | None = None
    on_result: Callable[[GateResult], None] | None = None
    result: GateResult | None = None
    invalid_policy: str = "fail"
    policy: ValidityPolicy | None = None
    adjust: str = "none"
    levels: Sequence[int] = ()
    store: BaselineStore | None = None  # the configs' recorded launch noise, for the margin
    nodeid: str = ""
    on_judgement: OnJudgement | None = None
    on_busy: OnBusy | None = None
    max_reruns: int = 2  # re-measurements of a side the machine was too busy to measure

    def evaluate(self) -> GateResult:
        """Measure both sides (``PointError`` if one cannot be) and evaluate the gate;
        adjusting, each side's launch measures its whole sweep (as the point checks will)."""
        sweeps: dict[str, SweepResult] = {}
        for name in (self.gate.config, self.gate.reference):
            if self.adjust in ("launch", "auto") and can_adjust(self.levels, self.concurrency):
                self.run.ensure_launches(name, self.workload, self.levels, 1)
            self.run.ensure(name, self.workload, self.concurrency, 1)
            samples = settle(self.run, name, self.workload, self.concurrency, 1,
                             self.max_reruns, self.policy)  # fmt: skip
            sweep = self.run.sweep(name, self.workload)
            # Every sample of this C (re-runs included), judged with their noise margin.
            sweeps[name] = sweep.model_copy(
                update={"levels": [samples[0]], "repeats": {self.concurrency: samples[1:]}}
            )
        store = self.store
        self.result = evaluate_gate(
            self.gate,
            sweeps,
            policy=self.policy,
            noise=launch_noise(store, self.run, self.workload) if store else None,
            baseline=entry_lookup(store, self.run, self.workload) if store else None,
        )
        note = clock_note(
            {n: [lv.gpu for lv in sw.samples(self.concurrency)] for n, sw in sweeps.items()}
        )
        if note:
            self.result.points = [
                replace(p, message=f"{p.message}; {note}") for p in self.result.points
            ]
        return self.result

    def judge(self) -> Outcome:
        """Fail with a sentence saying where, by how much and why the gate is not met."""
        res = self.evaluate()
        if self.on_properties is not None:
            self.on_properties(junit_properties(gate=res))
        if self.on_result is not None:
            self.on_result(res)
        _judged(self, "gate", self.gate.config, res.verdict, concurrency=self.concurrency,
                adjust=self.adjust, gate=self.gate)  # fmt: skip
        if res.verdict == Verdict.INVALID:
            busy = self._busy_sides()
            if busy:
                return _busy(self.on_busy, busy)
            if self.invalid_policy == "fail":
                return Outcome.fail(res.message())
            return Outcome("skip", f"llmperf INVALID measurement: {res.message()}")
        if res.verdict == Verdict.INCONCLUSIVE:
            # Inside the noise: neither met nor missed; say so instead of deciding by chance.
            return Outcome(warnings=[("inconclusive", res.message())])
        if res.verdict != Verdict.PASS:
            return Outcome.fail(res.message())
        return Outcome()

    def _busy_sides(self) -> list[BusyPoint]:
        """The sides with no valid sample, when each is so only because the machine was busy
        (empty when any side is invalid for another reason: that one is a real INVALID)."""
        out: list[BusyPoint] = []
        for name in (self.gate.config, self.gate.reference):
            samples = self.run.samples(name, self.workload, self.concurrency)
            if valid_samples(samples, self.workload, self.policy)[0]:
                continue
            if not all_starved(samples, self.workload, self.policy):
                return []
            out.append(busy_point(name, samples))
        return out
