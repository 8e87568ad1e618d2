"""A ``RunRecord`` from a session's sweeps and verdicts (``record_from_results``).

Each point keeps the judged value of every metric of every valid sample (the first sample and
its repeats, ``SweepResult.samples``); an invalid sample's numbers describe the client or a
broken level, not the server, so a trend must not see them. The point's value is the one its
comparison judged where there was one, else the median of its samples. A point nothing judged
is ``invalid`` when none of its samples is valid (its row and reasons are kept, its numbers
not), else has no verdict.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import uuid as uuidlib
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pytest_llmperf.base.metric_defs import METRICS
from pytest_llmperf.base.redaction import redact, redact_args
from pytest_llmperf.base.results import SweepResult
from pytest_llmperf.base.version import __version__
from pytest_llmperf.history.records import CheckRecord, PointRecord, RunRecord, Source
from pytest_llmperf.verdicts.compare import PointComparison
from pytest_llmperf.verdicts.gates import GateResult
from pytest_llmperf.verdicts.validity import ValidityPolicy, check_level
from pytest_llmperf.verdicts.verdict import Verdict

__all__ = ["git_commit", "record_from_results"]

_GIT_TIMEOUT_S = 5.0


def git_commit(cwd: Path | None = None, env: Mapping[str, str] | None = None) -> str | None:
    """The commit measured: ``LLMPERF_GIT_COMMIT`` or CI's ``GITHUB_SHA``, else ``git rev-parse
    HEAD`` in ``cwd``; None outside a repository or without git."""
    env = os.environ if env is None else env
    for name in ("LLMPERF_GIT_COMMIT", "GITHUB_SHA"):
        if env.get(name):
            return env[name].strip()[:64]
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = done.stdout.strip()
    return out[:64] if done.returncode == 0 and out else None


def record_from_results(
    sweeps: Sequence[SweepResult],
    *,
    source: Source,
    hardware: Mapping[str, str] | Callable[[str], str],
    points: Mapping[str, Sequence[PointComparison]] | None = None,
    gates: Sequence[GateResult] = (),
    checks: Sequence[CheckRecord] = (),
    started_at: datetime | None = None,
    finished_at: datetime | None = None,
    commit: str | None = None,
    run_uuid: str | None = None,
    policy: ValidityPolicy | None = None,
    extra: Mapping[str, Any] | None = None,
) -> RunRecord:
    """One session as the history store keeps it.

    ``hardware``: each config's hardware key; ``points``: the session's comparisons by config
    (their verdicts and judged values); ``gates`` and ``checks`` (A/B points, whole-sweep
    checks) become check rows; ``extra`` goes into the provenance (redacted).
    """
    hw = _hardware(hardware)
    judged = {
        (p.config, p.workload, p.concurrency): p for ps in (points or {}).values() for p in ps
    }
    rows: list[PointRecord] = []
    for sweep in sweeps:
        for level in sweep.levels:
            c = level.max_concurrency
            rows.append(
                _point(
                    sweep,
                    c,
                    hw(sweep.config),
                    judged.get((sweep.config, sweep.workload.key(), c)),
                    policy,
                )
            )
    check_rows = [
        CheckRecord("gate", g.gate.describe(), g.verdict.value, redact(g.message())) for g in gates
    ]
    check_rows += list(checks)
    now = datetime.now(UTC)
    started = started_at or min((s.started_at for s in sweeps), default=now)
    keys = sorted({hw(s.config) for s in sweeps})
    versions = sorted({s.server.version for s in sweeps if s.server.version})
    provenance: dict[str, Any] = {
        "servers": {
            s.config: {
                "mode": s.server.mode,
                "version": s.server.version,
                "model_path": s.server.model_path,
                "sim_profile": s.server.sim_profile,
                "server_args": redact_args(dict(s.server.server_args)),
                "workload": s.workload.key(),
                "hardware_key": hw(s.config),
            }
            for s in sweeps
        },
    }
    if extra:
        provenance.update(redact_args(dict(extra)))
    return RunRecord(
        uuid=run_uuid or str(uuidlib.uuid4()),
        started_at=started,
        finished_at=finished_at or now,
        source=source,
        hardware_key=",".join(keys) if keys else "unknown",
        git_commit=commit,
        plugin_version=__version__,
        sglang_version=",".join(versions) or None,
        points=tuple(rows),
        checks=tuple(check_rows),
        provenance=provenance,
    )


def _hardware(hardware: Mapping[str, str] | Callable[[str], str]) -> Callable[[str], str]:
    if callable(hardware):
        return hardware
    keys = dict(hardware)
    return lambda config: keys.get(config, "unknown")


def _point(
    sweep: SweepResult,
    c: int,
    hardware_key: str,
    judged: PointComparison | None,
    policy: ValidityPolicy | None,
) -> PointRecord:
    samples: dict[str, list[float]] = {}
    reasons: list[str] = []
    for level in sweep.samples(c):
        why = check_level(level, sweep.workload, policy)
        if why:
            reasons += why
            continue
        for name in METRICS:
            value = level.judged_value(name)
            if value is not None:
                samples.setdefault(name, []).append(value)
    metrics = {name: statistics.median(xs) for name, xs in samples.items()}
    if judged is not None:
        metrics.update({m.metric: m.current for m in judged.metrics})
        reasons = list(judged.invalid_reasons) or reasons
        valid = judged.verdict != Verdict.INVALID
    else:
        valid = bool(samples)
    return PointRecord(
        config=sweep.config,
        workload_key=sweep.workload.key(),
        concurrency=c,
        hardware_key=hardware_key,
        verdict=judged.verdict.value if judged else (None if valid else Verdict.INVALID.value),
        valid=valid,
        metrics=metrics,
        samples={name: tuple(xs) for name, xs in samples.items()},
        invalid_reasons=tuple(redact(r) for r in dict.fromkeys(reasons)),
    )
