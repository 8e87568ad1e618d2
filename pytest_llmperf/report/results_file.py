"""Results files of one run or shard, ``llmperf merge`` and ``llmperf compare``.

A CI matrix measures configs on different runners (or xdist shards); each writes a ``RunFile``.
``merge`` folds them into one, refusing two different measurements of the same point, and
``compare`` judges a run against a baselines directory with exactly the code path the pytest
plugin uses (``compare_point`` on every sample of a point, ``evaluate_gates``,
``compare_crossover``, ``render_run``, ``exit_status``) and the suite file's tolerances, metrics,
gates and crossovers, so the table and the exit status are the same as in-pytest. Reading the
suite file belongs to ``run/`` (above this layer): the CLI hands a loader down
(``add_compare_parser(..., suite_settings=...)``), which returns plain ``CompareSettings``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pytest_llmperf.base.atomic import atomic_write_text
from pytest_llmperf.base.datafile import load_model_file
from pytest_llmperf.base.errors import InputError
from pytest_llmperf.base.probes import LaunchProbes
from pytest_llmperf.base.results import SweepResult
from pytest_llmperf.report.file_kinds import not_a_results_file
from pytest_llmperf.report.judgement import Judgement, Took
from pytest_llmperf.report.tables import markdown_summary, render_run
from pytest_llmperf.report.undecided_flag import add_undecided_argument, undecided_from_args
from pytest_llmperf.verdicts.baseline import BaselineStore
from pytest_llmperf.verdicts.baseline_file import BaselineEntry, EntryKey, Provenance, check_name
from pytest_llmperf.verdicts.compare import (
    PointComparison,
    compare_sweep,
    exit_status,
    validate_tolerance,
)
from pytest_llmperf.verdicts.crossover import CrossoverRule, SweepMetricResult, compare_crossover
from pytest_llmperf.verdicts.gates import (
    Gate,
    GateResult,
    evaluate_gate,
    evaluate_gates,
    load_gates,
)
from pytest_llmperf.verdicts.stats import LaunchNoise, NoiseRule
from pytest_llmperf.verdicts.validity import ValidityPolicy
from pytest_llmperf.verdicts.verdict import Verdict

__all__ = [
    "CompareSettings",
    "Judgement",
    "RunFile",
    "RunVerdicts",
    "RunFileError",
    "add_compare_parser",
    "add_merge_parser",
    "judge_recorded",
    "judge_run",
    "load_run",
    "merge",
    "render_verdicts",
    "save_run",
]


class RunFileError(InputError):
    """A results file is unreadable, invalid or conflicts with another; message for people."""


class RunFile(BaseModel):
    """``results.json`` of a run: the sweeps of one run or shard on one hardware key, and what
    each test judged (``checks``; empty in files written without the plugin)."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    hardware: str
    provenance: Provenance = Field(default_factory=Provenance)
    shard: str | None = None
    sweeps: list[SweepResult] = Field(default_factory=list)
    checks: list[Judgement] = Field(default_factory=list)
    took: dict[str, Took] = Field(default_factory=dict)  # config -> its launches and time
    # each launch's greedy probe answers (``llmperf calibrate --record`` stores them)
    probes: list[LaunchProbes] = Field(default_factory=list)

    def sweep(self, config: str, workload_key: str | None = None) -> SweepResult | None:
        mine = (s for s in self.sweeps if s.config == config)
        return next((s for s in mine if workload_key in (None, s.workload.key())), None)


def load_run(path: str | os.PathLike[str]) -> RunFile:
    if (other := not_a_results_file(path)) is not None:
        raise RunFileError(other)
    return load_model_file(path, RunFile, "results file", "re-run to recreate", RunFileError)


def save_run(run: RunFile, path: str | os.PathLike[str]) -> None:
    """Deterministic, atomic (readers never see half a file)."""
    text = json.dumps(run.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"
    atomic_write_text(Path(path), text)


def merge(paths: Sequence[str | os.PathLike[str]]) -> RunFile:
    """One ``RunFile`` from shards; the same point measured twice differently is an error."""
    if not paths:
        raise RunFileError("llmperf merge: no results files given")
    runs = [(Path(p), load_run(p)) for p in paths]
    first_path, first = runs[0]
    merged = RunFile(hardware=first.hardware, provenance=first.provenance)
    origin: dict[tuple[str, str, int], Path] = {}
    for path, run in runs:
        if run.hardware != first.hardware:
            raise RunFileError(
                f"{path}: hardware {run.hardware!r} differs from {first_path}'s "
                f"{first.hardware!r}; merge results of one hardware key at a time"
            )
        for sweep in run.sweeps:
            key = sweep.workload.key()
            target = merged.sweep(sweep.config, key)
            if target is None:
                target = sweep.model_copy(update={"levels": []}, deep=True)
                merged.sweeps.append(target)
            for lv in sweep.levels:
                c = lv.max_concurrency
                pk = (sweep.config, key, c)
                existing = target.samples(c)
                if existing:
                    if existing == sweep.samples(c):
                        continue
                    raise RunFileError(
                        f"conflicting results for {sweep.config} {key} C={c}: "
                        f"{origin[pk]} has {_describe(existing)}, {path} has "
                        f"{_describe(sweep.samples(c))}; merge only disjoint shards"
                    )
                origin[pk] = path
                target.levels.append(lv)
                if sweep.repeats.get(c):
                    target.repeats[c] = list(sweep.repeats[c])
            target.levels.sort(key=lambda lv: lv.max_concurrency)
            target.repeats = dict(sorted(target.repeats.items()))
        seen = {(j.kind, j.nodeid) for j in merged.checks}
        merged.checks.extend(j for j in run.checks if (j.kind, j.nodeid) not in seen)
        merged.took.update(run.took)
        merged.probes.extend(p for p in run.probes if p not in merged.probes)
    return merged


def _describe(samples: Sequence[Any]) -> str:
    tput = ", ".join(f"{lv.output_throughput:.1f}" for lv in samples)
    return f"{tput} tok/s" if len(samples) == 1 else f"{len(samples)} samples ({tput} tok/s)"


@dataclass(frozen=True)
class CompareSettings:
    """What the verdicts depend on besides the numbers: the suite file's ``[sweep]`` tolerance
    and metrics, its gates and crossovers (plain values, so this layer never reads a suite)."""

    tolerances: Mapping[str, float] | float | None = None
    metrics: Sequence[str] | None = None
    gates: Sequence[Gate] = ()
    crossovers: Sequence[CrossoverRule] = ()
    adjust: str = "none"  # the suite's [sweep] adjust (launch-adjusted point verdicts)


@dataclass
class RunVerdicts:
    """Every verdict of a results file: points per config, gates, crossovers."""

    points: dict[str, list[PointComparison]] = field(default_factory=dict)
    gates: list[GateResult] = field(default_factory=list)
    crossovers: list[SweepMetricResult] = field(default_factory=list)
    # test id -> its verdict here, for a results file that records what each test judged
    by_test: dict[str, Verdict] = field(default_factory=dict)

    def exit_status(self, *, undecided: str = "warn", fail_inconclusive: bool = False) -> int:
        verdicts = [p.verdict for ps in self.points.values() for p in ps]
        verdicts += [g.verdict for g in self.gates]
        verdicts += [x.verdict for x in self.crossovers]
        return exit_status(verdicts, undecided=undecided, fail_inconclusive=fail_inconclusive)


def judge_run(
    run: RunFile,
    baseline_dir: str | os.PathLike[str],
    tolerances: Mapping[str, float] | float | None = None,
    gates: Sequence[Gate] = (),
    *,
    metrics: Sequence[str] | None = None,
    crossovers: Sequence[CrossoverRule] = (),
    rule: NoiseRule | None = None,
    policy: ValidityPolicy | None = None,
    adjust: str = "none",
) -> RunVerdicts:
    """Every point (on all of its samples), gate and crossover of ``run``, as pytest judges."""
    check_name(run.hardware, "hardware key")
    store = BaselineStore(baseline_dir)
    out = RunVerdicts()
    for sweep in run.sweeps:
        out.points.setdefault(sweep.config, []).extend(
            compare_sweep(
                sweep,
                store,
                run.hardware,
                metrics=metrics,
                tolerances=tolerances,
                rule=rule,
                policy=policy,
                adjust=adjust,
            )
        )

    def noise(cfg: str, c: int, metric: str) -> LaunchNoise | None:
        sweep = next((s for s in run.sweeps if s.config == cfg), None)
        if sweep is None:
            return None
        return store.launch_noise(EntryKey(run.hardware, cfg, sweep.workload.key(), c), metric)

    out.gates = evaluate_gates(gates, run.sweeps, policy=policy, noise=noise)
    for spec in crossovers:
        out.crossovers.extend(
            compare_crossover(spec, run.sweeps, store, run.hardware, policy=policy)
        )
    return out


def judge_recorded(
    run: RunFile,
    baseline_dir: str | os.PathLike[str],
    *,
    tolerances: Mapping[str, float] | float | None = None,
    metrics: Sequence[str] | None = None,
    max_failed: int | None = None,
) -> RunVerdicts:
    """Every check the pytest run made (``run.checks``), each on the sweep of its own workload
    with the settings its test resolved, through the functions the plugin's checks call.
    ``tolerances``, ``metrics`` and ``max_failed`` (command-line flags) replace the recorded
    ones where given, as a command-line flag would have in pytest."""
    check_name(run.hardware, "hardware key")
    store = BaselineStore(baseline_dir)
    hw = run.hardware
    out = RunVerdicts()
    for j in run.checks:
        policy = j.policy
        if max_failed is not None:
            policy = policy.model_copy(update={"max_failed": max_failed})
        verdict: Verdict
        if j.kind == "point":
            point = _judge_point(run, store, j, policy, tolerances, metrics)
            out.points.setdefault(j.config, []).append(point)
            verdict = point.verdict
        elif j.kind == "gate" and j.gate is not None and j.concurrency is not None:
            gate = _judge_gate(run, store, j, j.gate, j.concurrency, policy)
            out.gates.append(gate)
            verdict = gate.verdict
        elif j.kind == "crossover" and j.reference is not None:
            rule = CrossoverRule(j.config, j.reference, j.metric or "output_throughput", j.name)
            found = compare_crossover(
                rule, run.sweeps, store, hw, policy=policy, workload=j.workload
            ) or [_unmeasured_crossover(rule, j)]
            out.crossovers.extend(found)
            verdict = found[0].verdict
        else:
            raise RunFileError(f"{j.label}: a {j.kind} check without its settings")
        out.by_test[j.nodeid] = verdict
    return out


def _judge_point(
    run: RunFile,
    store: BaselineStore,
    j: Judgement,
    policy: ValidityPolicy,
    tolerances: Mapping[str, float] | float | None,
    metrics: Sequence[str] | None,
) -> PointComparison:
    sweep = run.sweep(j.config, j.workload)
    c = j.concurrency or 0
    found = (
        compare_sweep(
            sweep,
            store,
            run.hardware,
            metrics=metrics if metrics is not None else j.metrics,
            tolerances=tolerances if tolerances is not None else (j.tolerances or None),
            policy=policy,
            adjust=j.adjust,
            concurrencies=[c],
            looks=j.looks,
        )
        if sweep is not None
        else []
    )
    if found:
        return found[0]
    why = f"{j.label}: the results file has no measurement of {j.config} {j.workload} C={c}"
    return PointComparison(j.config, c, j.workload, Verdict.INVALID, invalid_reasons=[why])


def _judge_gate(
    run: RunFile, store: BaselineStore, j: Judgement, gate: Gate, c: int, policy: ValidityPolicy
) -> GateResult:
    """As the plugin's gate check: both sides' samples at this C, of the gate's workload."""
    sweeps: dict[str, SweepResult] = {}
    for name in (gate.config, gate.reference):
        sweep = run.sweep(name, j.workload)
        samples = sweep.samples(c) if sweep is not None else []
        if sweep is not None and samples:
            sweeps[name] = sweep.model_copy(
                update={"levels": [samples[0]], "repeats": {c: list(samples[1:])}}
            )

    def noise(cfg: str, level: int, metric: str) -> LaunchNoise | None:
        return store.launch_noise(EntryKey(run.hardware, cfg, j.workload, level), metric)

    def baseline(cfg: str, level: int) -> BaselineEntry | None:
        return store.get(EntryKey(run.hardware, cfg, j.workload, level), mark_used=False)

    return evaluate_gate(gate, sweeps, policy=policy, noise=noise, baseline=baseline)


def _unmeasured_crossover(rule: CrossoverRule, j: Judgement) -> SweepMetricResult:
    why = f"{j.label}: the results file has no sweep of {rule.label} for {j.workload}"
    return SweepMetricResult(f"crossover {rule.label}", None, None, Verdict.INVALID, why)


def render_verdicts(run: RunFile, v: RunVerdicts, *, markdown: bool = False) -> str:
    """The tables pytest's terminal summary prints, then one line per crossover as there."""
    if markdown:
        text = markdown_summary(run.sweeps, v.points, v.gates)
    else:
        text = render_run(run.sweeps, v.points, v.gates)
    if v.crossovers:
        lines = [x.line() for x in v.crossovers] + [x.message for x in v.crossovers if x.message]
        text += "\n".join(f"- {line}" if markdown else line for line in lines) + "\n"
    return text


# -- CLI ------------------------------------------------------------------------------------
def _load_structured(path: Path) -> Any:
    """The ``--gates`` file's data; an unreadable or unparsable file is named, never a trace."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RunFileError(f"--gates {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RunFileError(f"--gates {path}: cannot be read ({exc})") from None
    if path.suffix in (".yaml", ".yml"):
        import yaml

        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise RunFileError(f"--gates {path}: not valid YAML: {exc}") from None
    try:
        if path.suffix == ".toml":
            import tomllib

            return tomllib.loads(text)
        return json.loads(text)
    except ValueError as exc:  # TOMLDecodeError and JSONDecodeError are ValueErrors
        kind = "TOML" if path.suffix == ".toml" else "JSON"
        raise RunFileError(f"--gates {path}: not valid {kind}: {exc}") from None


# Top-level tables that only a suite file (llmperf.toml) has; a gates file has none of them.
_SUITE_KEYS = frozenset({"server", "sweep", "crossover", "slo"})
SuiteSettingsLoader = Callable[[Path], CompareSettings]


def _gates_from_data(data: Any, path: Path) -> list[Gate]:
    # A bare list, a "gates" list, or a suite file's [[gate]] tables (perf_tests/llmperf.toml).
    items = data.get("gates", data.get("gate", [])) if isinstance(data, Mapping) else data
    if not isinstance(items, list):
        raise RunFileError(f"{path}: expected a list of gates (or a 'gates' table/list)")
    return load_gates(items, source=str(path))


def _settings_from_file(path: Path, suite_settings: SuiteSettingsLoader | None) -> CompareSettings:
    """A suite file gives tolerances, metrics, gates and crossovers; a gates file only gates."""
    data = _load_structured(path)
    if isinstance(data, Mapping) and _SUITE_KEYS & set(data):
        if suite_settings is None:
            raise RunFileError(
                f"--gates {path}: this is a suite file, but this program cannot read suite "
                "files; run `llmperf compare` from the pytest-llmperf package"
            )
        return suite_settings(path)
    return CompareSettings(gates=_gates_from_data(data, path))


def _tolerances(args: argparse.Namespace) -> dict[str, float] | float | None:
    per = {}
    for item in args.metric_tolerance or []:
        name, sep, value = item.partition("=")
        if not sep:
            raise RunFileError(f"--metric-tolerance {item!r}: expected METRIC=FRACTION")
        per[name] = validate_tolerance(value, f"--metric-tolerance {name}")
    if args.tolerance is not None:
        tol = validate_tolerance(args.tolerance, "--tolerance")
        if not per:
            return tol
        from pytest_llmperf.base.metric_defs import METRICS

        return {**dict.fromkeys(METRICS, tol), **per}
    return per or None


def _run_merge(args: argparse.Namespace) -> int:
    run = merge(args.inputs)
    save_run(run, args.output)
    n = sum(len(s.levels) for s in run.sweeps)
    print(
        f"merged {len(args.inputs)} file(s): {len(run.sweeps)} sweep(s), {n} level(s) "
        f"-> {args.output}"
    )
    return 0


def _run_compare(
    args: argparse.Namespace, suite_settings: SuiteSettingsLoader | None = None
) -> int:
    if args.baselines is None or args.other is not None:
        raise RunFileError("llmperf compare: give --baselines DIR, or a second results file")
    run, baselines = load_run(args.run), Path(args.baselines)
    if not baselines.is_dir():
        what = "is not a directory" if baselines.exists() else "does not exist"
        raise RunFileError(
            f"--baselines {baselines}: {what}; give the baselines directory the pytest run "
            "used (its --llmperf-baseline-dir, default baselines/)"
        )
    settings = (
        _settings_from_file(Path(args.gates), suite_settings) if args.gates else CompareSettings()
    )
    # As in pytest, tolerances given on the command line replace the suite file's table.
    flags = _tolerances(args)
    flag_metrics = _metrics(args.metrics) if args.metrics else None
    if run.checks:
        # The run says what each test judged and with which settings (its markers included):
        # judge exactly that, so this command and the pytest run cannot disagree.
        verdicts = judge_recorded(
            run, baselines, tolerances=flags, metrics=flag_metrics, max_failed=args.max_failed
        )
        _note_unjudged(run, settings)
    else:
        verdicts = judge_run(
            run,
            baselines,
            flags if flags is not None else settings.tolerances,
            settings.gates,
            metrics=flag_metrics or settings.metrics,
            crossovers=settings.crossovers,
            policy=ValidityPolicy(max_failed=args.max_failed or 0),
            adjust=settings.adjust,
        )
    sys.stdout.write(render_verdicts(run, verdicts))
    if args.markdown:
        with open(args.markdown, "a", encoding="utf-8") as f:  # GITHUB_STEP_SUMMARY appends
            f.write(render_verdicts(run, verdicts, markdown=True))
    return verdicts.exit_status(undecided=undecided_from_args(args))


def _note_unjudged(run: RunFile, settings: CompareSettings) -> None:
    """Gates and crossovers of ``--gates`` no test of the run judged: said, never dropped."""
    gates = {j.gate for j in run.checks if j.gate is not None}
    crossovers = {(j.config, j.reference, j.metric) for j in run.checks if j.kind == "crossover"}
    names = [g.name or f"{g.config} vs {g.reference}" for g in settings.gates if g not in gates]
    names += [
        f"crossover {x.label}"
        for x in settings.crossovers
        if (x.config, x.reference, x.metric) not in crossovers
    ]
    if names:
        print(
            f"llmperf compare: not judged (no test of the run judged them): {', '.join(names)}",
            file=sys.stderr,
        )


def _metrics(text: str) -> list[str]:
    from pytest_llmperf.base.metric_defs import metric

    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise RunFileError("--metrics: the list of metrics is empty")
    for name in names:
        try:
            metric(name)
        except (KeyError, ValueError) as exc:
            raise RunFileError(f"--metrics: {exc.args[0]}") from None
    return names


def _guarded(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Known errors become one readable message and exit status 2 (usage), not a traceback."""

    def run(args: argparse.Namespace) -> int:
        from pytest_llmperf.verdicts.baseline_file import BaselineFileError
        from pytest_llmperf.verdicts.gates import GateError

        try:
            return fn(args)
        except (RunFileError, BaselineFileError, GateError, ValueError, OSError) as exc:
            print(f"llmperf: error: {exc}", file=sys.stderr)
            return 2

    return run


def add_merge_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``llmperf merge -o OUT IN...``; sets ``func(args) -> exit status``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "merge",
        help="merge results files of shards/runners into one",
        description="Merge the results.json files of shards or runners (each pytest run's "
        "--llmperf-output-dir); the same point measured twice differently is an error.",
    )
    p.add_argument("inputs", nargs="+", metavar="RESULTS.json")
    p.add_argument("-o", "--output", required=True, metavar="MERGED.json")
    p.set_defaults(func=_guarded(_run_merge))
    return p


def add_compare_parser(
    subparsers: Any,
    suite_settings: SuiteSettingsLoader | None = None,
    two_runs: Callable[[argparse.Namespace], int] | None = None,
) -> argparse.ArgumentParser:
    """``llmperf compare RUN --baselines DIR`` (exit status as in-pytest); ``suite_settings``
    reads a ``--gates`` suite file, ``two_runs`` handles ``llmperf compare A.json B.json``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "compare",
        help="judge a results file against stored baselines and gates, or against another run",
        description="Compare a results file with a baselines directory (and cross-config "
        "gates) and exit 1 on a failed, invalid or missing point, as the pytest run would; "
        "or, given two results files A B, judge B's points against A's samples.",
    )
    p.add_argument("run", metavar="RESULTS.json")
    p.add_argument("other", nargs="?", default=None, metavar="B.json")
    p.add_argument("--baselines", default=None, metavar="DIR")
    p.add_argument("--tolerance", type=float, default=None, help="fraction for every metric")
    p.add_argument(
        "--metric-tolerance",
        action="append",
        metavar="METRIC=FRACTION",
        help="per-metric tolerance, repeatable (e.g. median_ttft_ms=0.15)",
    )
    p.add_argument(
        "--gates",
        metavar="FILE",
        help="TOML/YAML/JSON list of gates, or the suite file (llmperf.toml): then its [sweep] "
        "tolerance and metrics and its [[crossover]]s apply too, as in pytest",
    )
    p.add_argument(
        "--metrics",
        metavar="A,B",
        default=None,
        help="metrics compared with the baseline (default: the suite file's, else pytest's)",
    )
    p.add_argument(
        "--max-failed",
        type=int,
        default=None,
        help="failed requests allowed per level (default: what each test of the run allowed, "
        "else 0)",
    )
    add_undecided_argument(p)
    p.add_argument(
        "--markdown",
        metavar="PATH",
        default=None,
        help="append a Markdown summary here (e.g. $GITHUB_STEP_SUMMARY)",
    )
    one = _guarded(lambda args: _run_compare(args, suite_settings))
    two = _guarded(two_runs or (lambda a: _run_compare(a, suite_settings)))
    p.set_defaults(func=lambda args: (two if args.other is not None else one)(args))
    return p
