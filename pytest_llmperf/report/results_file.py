"""Results files of one run or shard, ``llmperf merge`` and ``llmperf compare``.

A CI matrix measures configs on different runners (or xdist shards); each writes a ``RunFile``.
``merge`` folds them into one, refusing two different measurements of the same point, and
``compare`` judges a run against a baselines directory with exactly the code path the pytest
plugin uses (``compare_sweep``, ``evaluate_gates``, ``render_run``, ``exit_status``), so the
table and the exit status are the same as in-pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pytest_llmperf.base.atomic import atomic_write_text
from pytest_llmperf.base.results import SweepResult
from pytest_llmperf.report.tables import markdown_summary, render_run
from pytest_llmperf.verdicts.baseline import BaselineStore
from pytest_llmperf.verdicts.baseline_file import Provenance, check_name
from pytest_llmperf.verdicts.compare import (
    PointComparison,
    compare_sweep,
    exit_status,
    validate_tolerance,
)
from pytest_llmperf.verdicts.gates import Gate, GateResult, evaluate_gates, load_gates
from pytest_llmperf.verdicts.stats import NoiseRule
from pytest_llmperf.verdicts.validity import ValidityPolicy

__all__ = [
    "RunFile",
    "RunFileError",
    "add_compare_parser",
    "add_merge_parser",
    "compare",
    "load_run",
    "merge",
    "save_run",
]


class RunFileError(Exception):
    """A results file is unreadable, invalid or conflicts with another; message for people."""


class RunFile(BaseModel):
    """``--llmperf-json`` output: the sweeps of one run or shard on one hardware key."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    hardware: str
    provenance: Provenance = Field(default_factory=Provenance)
    shard: str | None = None
    sweeps: list[SweepResult] = Field(default_factory=list)

    def sweep(self, config: str, workload_key: str | None = None) -> SweepResult | None:
        return next(
            (
                s
                for s in self.sweeps
                if s.config == config and (workload_key is None or s.workload.key() == workload_key)
            ),
            None,
        )


def load_run(path: str | os.PathLike[str]) -> RunFile:
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise RunFileError(f"{p}: cannot read results file: {exc.strerror}") from None
    try:
        return RunFile.model_validate_json(raw)
    except ValidationError as exc:
        lines = [
            f"{p}: results file is invalid ({exc.error_count()} error(s)); re-run to recreate:"
        ]
        for e in exc.errors(include_url=False, include_input=False):
            loc = ".".join(str(x) for x in e["loc"]) or "<root>"
            lines.append(f"  - {loc}: {e['msg']} [{e['type']}]")
        raise RunFileError("\n".join(lines)) from None


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
                pk = (sweep.config, key, lv.max_concurrency)
                existing = target.level(lv.max_concurrency)
                if existing is not None:
                    if existing == lv:
                        continue
                    raise RunFileError(
                        f"conflicting results for {sweep.config} {key} C={lv.max_concurrency}: "
                        f"{origin[pk]} has {existing.output_throughput:.1f} tok/s, {path} has "
                        f"{lv.output_throughput:.1f} tok/s; merge only disjoint shards"
                    )
                origin[pk] = path
                target.levels.append(lv)
            target.levels.sort(key=lambda lv: lv.max_concurrency)
    return merged


def compare(
    run: RunFile,
    baseline_dir: str | os.PathLike[str],
    tolerances: Mapping[str, float] | float | None = None,
    gates: Sequence[Gate] = (),
    *,
    metrics: Sequence[str] | None = None,
    rule: NoiseRule | None = None,
    policy: ValidityPolicy | None = None,
    fail_inconclusive: bool = False,
    markdown: bool = False,
) -> tuple[str, int]:
    """(table text, exit status) exactly as the pytest plugin would report this run."""
    check_name(run.hardware, "hardware key")
    store = BaselineStore(baseline_dir)
    points: dict[str, list[PointComparison]] = {}
    for sweep in run.sweeps:
        points.setdefault(sweep.config, []).extend(
            compare_sweep(
                sweep,
                store,
                run.hardware,
                metrics=metrics,
                tolerances=tolerances,
                rule=rule,
                policy=policy,
            )
        )
    gate_results: list[GateResult] = evaluate_gates(gates, run.sweeps, policy=policy)
    if markdown:
        text = markdown_summary(run.sweeps, points, gate_results)
    else:
        text = render_run(run.sweeps, points, gate_results)
    verdicts = [p.verdict for ps in points.values() for p in ps]
    verdicts += [g.verdict for g in gate_results]
    return text, exit_status(verdicts, fail_inconclusive=fail_inconclusive)


# -- CLI ------------------------------------------------------------------------------------
def _load_structured(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".toml":
        import tomllib

        return tomllib.loads(text)
    if path.suffix in (".yaml", ".yml"):
        import yaml

        return yaml.safe_load(text)
    return json.loads(text)


def _gates_from_file(path: Path) -> list[Gate]:
    data = _load_structured(path)
    # A bare list, a "gates" list, or a suite file's [[gate]] tables (perf_tests/llmperf.toml).
    items = data.get("gates", data.get("gate", [])) if isinstance(data, Mapping) else data
    if not isinstance(items, list):
        raise RunFileError(f"{path}: expected a list of gates (or a 'gates' table/list)")
    return load_gates(items, source=str(path))


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


def _run_compare(args: argparse.Namespace) -> int:
    run = load_run(args.run)
    gates = _gates_from_file(Path(args.gates)) if args.gates else []
    text, status = compare(
        run,
        args.baselines,
        _tolerances(args),
        gates,
        fail_inconclusive=args.fail_inconclusive,
        policy=ValidityPolicy(max_failed=args.max_failed),
    )
    sys.stdout.write(text)
    if args.markdown:
        md, _ = compare(
            run,
            args.baselines,
            _tolerances(args),
            gates,
            fail_inconclusive=args.fail_inconclusive,
            policy=ValidityPolicy(max_failed=args.max_failed),
            markdown=True,
        )
        with open(args.markdown, "a", encoding="utf-8") as f:  # GITHUB_STEP_SUMMARY appends
            f.write(md)
    return status


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
        description="Merge --llmperf-json results files; the same point measured twice "
        "with different numbers is an error.",
    )
    p.add_argument("inputs", nargs="+", metavar="RESULTS.json")
    p.add_argument("-o", "--output", required=True, metavar="MERGED.json")
    p.set_defaults(func=_guarded(_run_merge))
    return p


def add_compare_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``llmperf compare RUN --baselines DIR``; exit status as in-pytest."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "compare",
        help="judge a results file against stored baselines and gates",
        description="Compare a results file with a baselines directory (and cross-config "
        "gates) and exit 1 on a failed, invalid or missing point, as the pytest run would.",
    )
    p.add_argument("run", metavar="RESULTS.json")
    p.add_argument("--baselines", required=True, metavar="DIR")
    p.add_argument("--tolerance", type=float, default=None, help="fraction for every metric")
    p.add_argument(
        "--metric-tolerance",
        action="append",
        metavar="METRIC=FRACTION",
        help="per-metric tolerance, repeatable (e.g. median_ttft_ms=0.15)",
    )
    p.add_argument("--gates", metavar="FILE", help="TOML/YAML/JSON list of gates")
    p.add_argument("--max-failed", type=int, default=0, help="failed requests allowed per level")
    p.add_argument("--fail-inconclusive", action="store_true")
    p.add_argument(
        "--markdown",
        metavar="PATH",
        default=None,
        help="append a Markdown summary here (e.g. $GITHUB_STEP_SUMMARY)",
    )
    p.set_defaults(func=_guarded(_run_compare))
    return p
