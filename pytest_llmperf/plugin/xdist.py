"""pytest-xdist glue: workers ship their results to the controller, which reports once.

Registered only when xdist is loaded (the "DeferPlugin" pattern syrupy and pytest-randomly
use), so the plugin works without xdist installed. The payload crosses execnet as one string:
our own comparison objects, pickled by the same installed code on both sides.
"""

from __future__ import annotations

import base64
import pickle
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_llmperf.plugin.session import LLMPerfSession
    from pytest_llmperf.plugin.timing import Selected

PAYLOAD_KEY = "llmperf"
PLAN_DIR_KEY = "llmperf_plan_dir"  # workerinput: where workers write what they collected


# The session's own result fields; each kind adds those it fills (``CheckKind.payload``).
_SESSION_FIELDS = (
    "checks",
    "hardware",
    "invalid",
    "busy",
    "unmeasured",
    "kind_results",
    "spent",
    "probes",
)


def _fields() -> list[str]:
    from pytest_llmperf.plugin.kinds import kinds

    fields = list(_SESSION_FIELDS)
    for kind in kinds():
        fields += [f for f in kind.payload if f not in fields]
    return fields


def worker_payload(state: LLMPerfSession) -> dict[str, Any]:
    """What a worker sends: sweeps, verdicts and pending baseline writes (no live objects)."""
    body: dict[str, Any] = {name: getattr(state, name) for name in _fields()}
    body["sweeps"] = [s.model_dump(mode="json") for s in state.sweeps]
    body["store"] = state.store.to_dict() if state.has_store else None
    return {"pickle": base64.b64encode(pickle.dumps(body)).decode("ascii")}


def _merge(mine: Any, theirs: Any) -> None:
    """A list gets the worker's items; a dict of lists (points by config, results by kind)
    gets them per key; any other dict (hardware, unmeasured) the worker's values."""
    if isinstance(mine, list):
        mine.extend(theirs)
        return
    for key, value in theirs.items():
        if isinstance(value, list):
            mine.setdefault(key, []).extend(value)
        else:
            mine[key] = value


def merge_payloads(state: LLMPerfSession) -> None:
    """Fold every worker's payload into the controller's state (called once, at the end)."""
    from pytest_llmperf.base.results import SweepResult
    from pytest_llmperf.verdicts.baseline import BaselineStore

    for payload in state.worker_payloads:
        body = pickle.loads(base64.b64decode(payload["pickle"]))
        state.sweeps.extend(SweepResult.model_validate(s) for s in body["sweeps"])
        for name in _fields():
            _merge(getattr(state, name), body.get(name) or {})
        if body["store"] is not None:
            if not state.has_store:
                state._store = BaselineStore.from_dict(body["store"])
            else:
                state.store.merge_dict(body["store"])
    state.sweeps.sort(key=lambda s: s.config)
    state.worker_payloads.clear()


def ship_selected(config: Any, chosen: Selected) -> None:
    """A worker's collected tests, for the controller's plan after collection: through a file
    in the folder the controller named, since xdist tells the controller only their ids until
    the worker ends. Written before the worker reports its collection, so it is there when the
    controller hears of it; absent for a worker on another machine (the header's plan stands)."""
    where = config.workerinput.get(PLAN_DIR_KEY)
    if not where:
        return
    path = Path(where) / f"{config.workerinput['workerid']}.json"
    try:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(chosen.model_dump_json())
        tmp.replace(path)
    except OSError:  # not this machine's folder: the controller finds no file
        return


class XdistHooks:
    """Controller-side hooks that exist only when xdist is installed."""

    def __init__(self) -> None:
        self._plan_dir: Path | None = None
        self._replanned = False

    def pytest_configure_node(self, node: Any) -> None:
        # Workers re-parse the command line, which does not say loadgroup; tell them, so they
        # tag each test id with its server group and the scheduler keeps a group on one worker.
        node.workerinput["llmperf_loadgroup"] = node.config.getvalue("dist") == "loadgroup"
        if self._plan_dir is None:
            self._plan_dir = Path(tempfile.mkdtemp(prefix="llmperf-plan-"))
        node.workerinput[PLAN_DIR_KEY] = str(self._plan_dir)

    def pytest_xdist_node_collection_finished(self, node: Any, ids: Any) -> None:
        """The plan for the collected tests, from the first worker that wrote what its tests
        measure (every worker collects the same tests)."""
        if self._replanned or self._plan_dir is None:
            return
        path = self._plan_dir / f"{node.workerinput['workerid']}.json"
        if not path.is_file():
            return
        from pytest_llmperf.plugin.session import SESSION
        from pytest_llmperf.plugin.timing import Selected, replan

        self._replanned = True
        lines = replan(node.config.stash[SESSION], Selected.model_validate_json(path.read_text()))
        reporter = node.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            for line in lines:
                reporter.write_line(line)

    def pytest_unconfigure(self, config: Any) -> None:
        if self._plan_dir is not None:
            shutil.rmtree(self._plan_dir, ignore_errors=True)

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        from pytest_llmperf.plugin.session import SESSION

        output = getattr(node, "workeroutput", {}) or {}
        payload = output.get(PAYLOAD_KEY)
        if payload:
            node.config.stash[SESSION].worker_payloads.append(payload)
