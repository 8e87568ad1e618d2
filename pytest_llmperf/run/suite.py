"""A perf suite's own file (``llmperf.toml``): its servers, its sweep, its gates.

The file lives with the suite, not in the plugin, so a team edits model, flags and levels for
its GPU runner without touching Python. Every section is validated and errors name the file
and the field.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    model_validator,
)

from pytest_llmperf.base.datafile import DataFileError, load_data_file
from pytest_llmperf.base.errors import InputError
from pytest_llmperf.base.values import LevelsField, MetricName, optional
from pytest_llmperf.core.slo import Slo, SloError, load_slo
from pytest_llmperf.launch.server_config import ConfigError, ServerConfig, server_configs_from_data
from pytest_llmperf.run.settings import SETTINGS_BY_NAME, SUITE_KEYS
from pytest_llmperf.verdicts.gates import Gate, GateError, load_gates

SUITE_FILE_NAME = "llmperf.toml"
_TOP_LEVEL = {"server", "sweep", "gate", "crossover", "slo", "ab", "compare"}
_DEPRECATED = {"compare"}  # read with a warning, not advertised


class SuiteError(InputError):
    """The suite file is invalid; the message names the file and field."""


class SweepTable(BaseModel):
    """``[sweep]``: the suite's values of the settings that say what it measures; the command
    line, environment and ini file override the few they may also give, a marker any of its
    own. Its fields are derived from ``run/settings.py`` (``SweepSection``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def as_settings(self) -> dict[str, Any]:
        """Only the keys the file sets, named like the plugin's settings."""
        return {k: v for k, v in self.model_dump().items() if v is not None}

    def get(self, name: str) -> Any:
        """The file's value of setting ``name`` (None when it does not set it)."""
        return self.as_settings().get(name)


# One optional field per setting declared with suite=True, checked by the setting's own
# parser, so ``levels = [0]`` here and ``--llmperf-levels=0`` fail with the same words.
SweepSection: type[SweepTable] = create_model(  # type: ignore[call-overload]
    "SweepSection",
    __base__=SweepTable,
    __module__=__name__,
    **{
        name: (Annotated[Any, BeforeValidator(optional(SETTINGS_BY_NAME[name].parse))], None)
        for name in SUITE_KEYS
    },
)


class CrossoverSpec(BaseModel):
    """``[[crossover]]``: track the largest C where ``config`` still beats ``reference``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    config: str
    reference: str
    metric: MetricName = "output_throughput"
    name: str | None = None

    @property
    def label(self) -> str:
        return self.name or f"{self.config}-vs-{self.reference}"


class SuiteDeprecationWarning(FutureWarning):
    """A suite file uses an older spelling that still works; the message names the new one.

    A ``FutureWarning`` so that it shows outside pytest too (``llmperf compare --suite``)."""


class ABSpec(BaseModel):
    """``[[ab]]``: a same-job A/B of two servers (``verdicts/paired.py``, ``run/ab.py``).

    Rounds each launch reference and candidate afresh (order alternating per round unless
    ``order = "fixed"``) and measure every level of the sweep on each. With the ``sequential``
    setting (default) ``rounds`` is the budget (default: ``launch_budget``) and rounds are
    added until every level is decided; else ``rounds`` rounds (default 4) and a point fails
    when the paired CI of ``metric`` lies wholly beyond ``tolerance``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    candidate: str
    reference: str
    rounds: int | None = Field(default=None, ge=2, le=100)
    metric: MetricName = "output_throughput"
    tolerance: float = Field(default=0.05, ge=0, lt=1)
    confidence: float = Field(default=0.95, gt=0.5, lt=1)
    order: Literal["alternate", "fixed"] = "alternate"
    # "launch": cancel each launch's common speed factor (see verdicts/paired.py), which hides
    # regressions that hit every level alike; "auto": launch-adjusted where the rounds show
    # the common factor is the larger noise, the plain comparison a fail-only backstop
    # (verdicts/paired_sequential.py); "none": plain.
    adjust: Literal["none", "launch", "auto"] = "auto"
    # Passes of the sweep each launch of a round measures, interleaved (1, 4, 16, 1, 4, 16):
    # a round's value is its passes' median, and their spread lends the rounds' noise degrees
    # of freedom (run/ab.py ``ABRun.noise``); the rounds' price in launches is unchanged.
    # "auto": chosen from the first launch as baseline_passes = "auto" (run/passes.py).
    passes: Annotated[int, Field(ge=1, le=32)] | Literal["auto"] = "auto"
    levels: LevelsField = None
    name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

    @model_validator(mode="after")
    def _two_servers(self) -> ABSpec:
        if self.candidate == self.reference:
            raise ValueError("candidate and reference must be two different servers")
        return self

    @property
    def label(self) -> str:
        return self.name or f"{self.candidate}-vs-{self.reference}"


CompareSpec = ABSpec  # the older name, from when the section was [[compare]]


@dataclass
class Suite:
    """Everything a suite file declares."""

    path: Path | None
    servers: list[ServerConfig]
    sweep: SweepTable = field(default_factory=SweepSection)
    gates: list[Gate] = field(default_factory=list)
    crossovers: list[CrossoverSpec] = field(default_factory=list)
    slo: Slo | None = None
    ab: list[ABSpec] = field(default_factory=list)

    @property
    def compares(self) -> list[ABSpec]:
        """The older name of ``ab``."""
        return self.ab

    def server(self, name: str) -> ServerConfig:
        for s in self.servers:
            if s.name == name:
                return s
        known = ", ".join(s.name for s in self.servers) or "none"
        raise SuiteError(f"{self.path or 'suite'}: no server named {name!r} (servers: {known})")

    def linked_groups(self) -> dict[str, str]:
        """config name → group name, joining configs that a gate or crossover compares.

        Under pytest-xdist each group runs on one worker, so a gate always finds both of its
        sweeps in the worker's own results, and independent configs still run in parallel.
        """
        parent = {s.name: s.name for s in self.servers}

        def find(x: str) -> str:
            for _ in range(len(parent) + 1):
                if parent[x] == x:
                    return x
                x = parent[x]
            return x

        for pair in (
            [(g.config, g.reference) for g in self.gates]
            + [(c.config, c.reference) for c in self.crossovers]
            + [(c.candidate, c.reference) for c in self.ab]
        ):
            a, b = pair
            if a in parent and b in parent:
                parent[find(a)] = find(b)
        groups: dict[str, list[str]] = {}
        for name in parent:
            groups.setdefault(find(name), []).append(name)
        return {
            name: "llmperf-" + "+".join(members) for members in groups.values() for name in members
        }


def _tables(model: type[M], items: list[Any], where: str, problems: list[str]) -> list[M]:
    """Each ``[[table]]`` of one kind validated; every bad one adds its problems, named."""
    out: list[M] = []
    for i, item in enumerate(items):
        try:
            out.append(model.model_validate(item))
        except ValidationError as exc:
            problems.extend(_errors(exc, f"{where}[{i}]"))
    return out


M = TypeVar("M", bound=BaseModel)


def _errors(exc: ValidationError, where: str) -> list[str]:
    out = []
    for err in exc.errors(include_url=False, include_input=False):
        loc = ".".join(str(p) for p in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        out.append(f"{where}.{loc}: {msg}" if loc else f"{where}: {msg}")
    return out


def suite_from_data(
    data: Mapping[str, Any], *, source: str = "<data>", path: Path | None = None
) -> Suite:
    """Validate a parsed suite file; all problems are reported at once."""
    problems: list[str] = []
    unknown = sorted(str(k) for k in data if k not in _TOP_LEVEL)
    if unknown:
        problems.append(
            f"{source}: unknown top-level key(s) {', '.join(unknown)}; "
            f"expected {', '.join(sorted(_TOP_LEVEL - _DEPRECATED))}"
        )
    servers: list[ServerConfig] = []
    try:
        servers = server_configs_from_data({"server": data.get("server", [])}, source=source)
    except ConfigError as exc:
        problems.extend(exc.errors)
    if not data.get("server"):
        problems.append(
            f"{source}: declares no [[server]]; a suite needs at least one "
            '(e.g. [[server]] name = "plain" model = "Qwen/Qwen3-8B" args = [])'
        )
    sweep = SweepSection()
    try:
        sweep = SweepSection.model_validate(data.get("sweep", {}))
    except ValidationError as exc:
        problems.extend(_errors(exc, f"{source}: sweep"))
    gates: list[Gate] = []
    try:
        gates = load_gates(list(data.get("gate", [])), source=f"{source}: gate")
    except GateError as exc:
        problems.append(str(exc))
    crossovers = _tables(CrossoverSpec, data.get("crossover", []), f"{source}: crossover", problems)
    section = "ab"
    if "compare" in data:
        if "ab" in data:
            problems.append(
                f"{source}: both [[ab]] and [[compare]]; [[compare]] is the older name of "
                "[[ab]]: move its entries into [[ab]]"
            )
        else:
            section = "compare"
            warnings.warn(
                SuiteDeprecationWarning(
                    f"{source}: [[compare]] is now spelled [[ab]] (same keys); "
                    "[[compare]] still works for now"
                ),
                stacklevel=2,
            )
    abs_ = _tables(ABSpec, data.get(section, []), f"{source}: {section}", problems)
    slo: Slo | None = None
    if data.get("slo") is not None:
        try:
            slo = load_slo(data["slo"], source=f"{source} [slo]")
        except SloError as exc:
            problems.append(str(exc))
    names = {s.name for s in servers}
    for i, g in enumerate(gates):
        for role, name in (("config", g.config), ("reference", g.reference)):
            if servers and name not in names:
                problems.append(f"{source}: gate[{i}].{role}: no server named {name!r}")
    for i, c in enumerate(crossovers):
        for role, name in (("config", c.config), ("reference", c.reference)):
            if servers and name not in names:
                problems.append(f"{source}: crossover[{i}].{role}: no server named {name!r}")
    for i, spec in enumerate(abs_):
        for role, name in (("candidate", spec.candidate), ("reference", spec.reference)):
            if servers and name not in names:
                problems.append(f"{source}: {section}[{i}].{role}: no server named {name!r}")
    labels = [c.label for c in abs_]
    for label in sorted({x for x in labels if labels.count(x) > 1}):
        problems.append(f"{source}: {section}: two entries named {label!r}; give each a 'name'")
    if problems:
        raise SuiteError("invalid llmperf suite file:\n  " + "\n  ".join(problems))
    return Suite(
        path=path,
        servers=servers,
        sweep=sweep,
        gates=gates,
        crossovers=crossovers,
        slo=slo,
        ab=abs_,
    )


def load_suite(path: str | Path) -> Suite:
    """Read ``llmperf.toml`` (or ``.yaml``)."""
    p = Path(path)
    try:
        data = load_data_file(p, "llmperf suite file")
    except DataFileError as exc:
        raise SuiteError(str(exc)) from None
    if not isinstance(data, Mapping):
        raise SuiteError(f"{p}: expected a table of server/sweep/gate sections")
    return suite_from_data(data, source=str(p), path=p)


def find_suite_file(start: Path, stop: Path) -> Path | None:
    """The nearest ``llmperf.toml`` from ``start`` up to ``stop`` (inclusive), if any."""
    here = start if start.is_dir() else start.parent
    stop = stop.resolve()
    for _ in range(64):
        candidate = here / SUITE_FILE_NAME
        if candidate.is_file():
            return candidate
        if here.resolve() == stop or here.parent == here:
            return None
        here = here.parent
    return None
