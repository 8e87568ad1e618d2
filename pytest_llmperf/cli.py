"""The ``llmperf`` console script.

``llmperf sweep`` measures a server (``--url``) or one it launches (``--launch [flags...]``)
and prints the table SGLang users already read in their own benchmark scripts. The
``merge`` and ``compare`` subcommands belong to
``pytest_llmperf.report.results_file`` and are wired in by ``_add_runfile_commands``;
``history`` belongs to ``pytest_llmperf.report.history_cli``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TextIO

from pydantic import ValidationError

from pytest_llmperf.base.results import Mode, SweepResult, Workload
from pytest_llmperf.base.values import (
    argparse_type,
    parse_history,
    parse_positive_float,
    parse_positive_int,
)
from pytest_llmperf.core.sweep import Progress, SweepError, run_sweep
from pytest_llmperf.report.tables import level_table
from pytest_llmperf.run.settings import SETTINGS, WORKLOAD_FIELDS

EXIT_OK = 0
EXIT_FAILED = 1  # the sweep ran but requests failed, or the server could not be reached
EXIT_USAGE = 2  # bad flags (argparse's own convention)
_MODEL_FLAGS = ("--model-path", "--model")

Handler = Callable[[argparse.Namespace], int]


# --- arguments ---------------------------------------------------------------------------------
_positive_int = argparse_type(parse_positive_int)
_positive_float = argparse_type(parse_positive_float)


# The settings that `llmperf sweep` takes, from their declarations (run/settings.py): the same
# parser, bounds, default and help as the pytest plugin's; -c is the seed scripts' short flag.
_WORKLOAD_GROUP = frozenset(
    {"workload", "prefix_len", "prefix_groups", "range_ratio", "range_convention", "dataset"}
    | {"dataset_output_len", "turns", "think_time"}
)


# ``--history off`` given: it beats LLMPERF_HISTORY, so it must differ from "not given" (None).
HISTORY_OFF = "off"


def _history_flag(text: str) -> object:
    return parse_history(text) or HISTORY_OFF


def _add_setting_flags(p: argparse.ArgumentParser) -> None:
    w = p.add_argument_group("workload (docs/workloads.md)")
    for s in SETTINGS:
        if s.sweep_flag is None:
            continue
        target = w if s.name in _WORKLOAD_GROUP else p
        flags = ["-c", s.sweep_flag] if s.name == "levels" else [s.sweep_flag]
        help_text = s.help.replace("%", "%%") + (
            f" (default {_default_text(s.default)})" if s.default not in (None, False) else ""
        )
        if s.flag:
            target.add_argument(*flags, dest=s.name, action="store_true", help=help_text)
        else:
            parse = _history_flag if s.name == "history" else s.parse
            target.add_argument(
                *flags, dest=s.name, type=argparse_type(parse), default=s.default, help=help_text
            )


def _default_text(value: object) -> str:
    return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


def _add_sweep_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "sweep",
        help="measure a server over concurrency levels and print the table",
        description="Closed-loop sweep: exactly C requests in flight at each level, fixed "
        "input/output lengths (ignore_eos), the same prompts at every level.",
    )
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="an already-running server, e.g. http://127.0.0.1:30000")
    target.add_argument(
        "--launch",
        nargs=argparse.REMAINDER,
        metavar="SERVER_FLAG",
        help="launch SGLang (or the simulator when SGLang is not installed) with these "
        "launch_server flags; must be the last option",
    )
    _add_setting_flags(p)
    p.add_argument(
        "--api-key-env", metavar="VAR", help="name of the environment variable holding the API key"
    )
    p.add_argument("--json", type=Path, metavar="FILE", help="write the SweepResult as JSON")
    p.add_argument("--config-name", default="cli", help="name recorded in the JSON result")
    p.add_argument(
        "--log-dir",
        type=Path,
        default=None,
        help="with --launch: where the server log goes (default: a temp dir)",
    )
    own = frozenset(o for a in p._actions for o in a.option_strings if o != "--launch")
    p.set_defaults(func=cmd_sweep, own_flags=own)


def _add_runfile_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``llmperf merge`` / ``llmperf compare``: results files from CI shards, judged exactly
    as an in-pytest run judges them (``pytest_llmperf.report.results_file``), or one run
    against another (``report.run_compare``); ``llmperf report`` / ``pr-comment``."""
    from pytest_llmperf.report.report_cli import add_pr_comment_parser, add_report_parser
    from pytest_llmperf.report.results_file import add_compare_parser, add_merge_parser
    from pytest_llmperf.report.run_compare import run_compare_two
    from pytest_llmperf.run.compare_settings import compare_settings  # verdicts branch

    add_merge_parser(sub)
    add_compare_parser(sub, suite_settings=compare_settings, two_runs=run_compare_two)
    add_report_parser(sub)
    add_pr_comment_parser(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llmperf", description="LLM-serving (SGLang) performance sweeps."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_sweep_command(sub)
    _add_runfile_commands(sub)
    _add_calibrate_command(sub)
    from pytest_llmperf.report.history_cli import add_history_parser

    add_history_parser(sub)  # llmperf history list/show: the history database and its trends
    return parser


def _add_calibrate_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "calibrate",
        help="run the suite N times unchanged; print its noise and tolerances that keep false "
        "alarms under a target",
        description="Runs `python -m pytest PYTEST_ARGS` N times (each in its own output dir), "
        "then prints per-point CV, the minimum detectable effect at the configured tolerances "
        "and repeats, and tolerances / repeats that keep the whole suite's false-alarm rate "
        "under --target (arithmetic: pytest_llmperf/verdicts/calibration.py).",
    )
    p.add_argument("-n", "--runs", type=_positive_int, required=True, help="suite runs (>= 2)")
    p.add_argument(
        "--target",
        type=_positive_float,
        default=0.01,
        help="false alarms per suite run to stay under (default 0.01: 1 in 100 runs)",
    )
    p.add_argument(
        "--suite",
        type=Path,
        default=None,
        help="the suite file whose [sweep] metrics, tolerance and repeat are judged "
        "(default: the one pytest uses: --llmperf-config in PYTEST_ARGS, LLMPERF_CONFIG, the "
        "nearest llmperf.toml to the first test path, or the current directory's)",
    )
    p.add_argument("--output-dir", type=Path, default=Path("llmperf-calibration"))
    p.add_argument("--timeout", type=_positive_float, default=3600.0, help="seconds per run")
    p.add_argument(
        "--interval",
        type=_positive_float,
        default=None,
        metavar="SECONDS",
        help="pause between runs, so they sample a shared box's slow and quiet stretches "
        "instead of one stretch (default: none)",
    )
    p.add_argument(
        "--record",
        metavar="BASELINE_DIR",
        type=Path,
        default=None,
        help="also write the baselines in BASELINE_DIR from all N runs, each run counted as "
        "one launch, so every entry carries its measured run-to-run noise (for an attached "
        "server, which a session cannot relaunch; entries not measured are kept)",
    )
    p.add_argument("pytest_args", nargs=argparse.REMAINDER, metavar="-- PYTEST_ARGS")
    p.set_defaults(func=cmd_calibrate)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from pytest_llmperf.base.errors import LLMPerfError
    from pytest_llmperf.run.calibrate import calibrate_suite, describe_gate, find_suite_for
    from pytest_llmperf.run.suite import load_suite
    from pytest_llmperf.verdicts.baseline import BaselineStore
    from pytest_llmperf.verdicts.calibration import render

    pytest_args = list(args.pytest_args)
    if pytest_args[:1] == ["--"]:
        pytest_args = pytest_args[1:]
    try:
        if args.suite is not None:
            path, where = args.suite, f"--suite {args.suite}"
        else:
            path, where = find_suite_for(pytest_args, Path.cwd())
        suite = load_suite(path) if path is not None else None
        print(f"llmperf calibrate: {describe_gate(suite, where)}", file=sys.stderr, flush=True)
        cal, recording = calibrate_suite(
            pytest_args,
            runs=args.runs,
            output_dir=args.output_dir,
            suite=suite,
            target=args.target,
            timeout_s=args.timeout,
            progress=lambda line: print(line, file=sys.stderr, flush=True),
            record=BaselineStore(args.record) if args.record is not None else None,
            interval_s=args.interval or 0.0,
        )
    except LLMPerfError as exc:
        print(f"llmperf calibrate: error: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, ValueError) else EXIT_FAILED
    print(render(cal))
    if recording is not None:
        print(recording.render())
    return EXIT_OK


# --- output ------------------------------------------------------------------------------------
def format_table(result: SweepResult) -> str:
    """The seed scripts' table: the same columns and notes as the pytest summary's."""
    return level_table(result, tablefmt="github")


class _ProgressLine:
    """One rewritten status line on stderr (a plain line per level when not a terminal)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream: TextIO = stream if stream is not None else sys.stderr
        # The stream it writes to decides: a terminal gets the rewritten line, a log does not.
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def __call__(self, p: Progress) -> None:
        if p.phase == "warmup":
            # The warm-up's failure is the sweep's error message; here say only that it ran.
            self.stream.write("warm-up failed\n" if p.failed else "warm-up done\n")
        elif p.phase == "level-done":
            line = f"C={p.concurrency}: {p.done}/{p.total} requests, {p.tok_per_s:.0f} tok/s"
            if p.failed:
                line += f", {p.failed} failed"
            self.stream.write(("\r\x1b[K" if self.tty else "") + line + "\n")
        elif self.tty:
            self.stream.write(
                f"\r\x1b[KC={p.concurrency}: {p.done}/{p.total} requests, "
                f"{p.tok_per_s:.0f} tok/s so far"
            )
        self.stream.flush()


def _write_json(path: Path, result: SweepResult) -> None:
    """Atomic write: a crash never leaves a half-written results file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(result.model_dump_json(indent=2))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# --- sweep -------------------------------------------------------------------------------------
def _split_model(flags: Sequence[str]) -> tuple[str, list[str]]:
    """Take ``--model-path`` out of the launch flags: the launcher sets it from the config."""
    model, rest = "simulated/model", []
    it = iter(flags)
    for arg in it:
        name, eq, value = arg.partition("=")
        if name in _MODEL_FLAGS:
            model = value if eq else next(it, model)
        else:
            rest.append(arg)
    return model, rest


@contextlib.contextmanager
def _server(args: argparse.Namespace, api_key: str | None) -> Iterator[tuple[str, Mode]]:
    """(url, mode) of the server to measure; a launched server is stopped on exit."""
    if args.url:
        yield args.url, "attached"
        return
    from pytest_llmperf.launch.launcher import launch
    from pytest_llmperf.launch.server_config import ServerConfig

    model, flags = _split_model(args.launch)
    config = ServerConfig(name=args.config_name, model=model, args=tuple(flags))
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="llmperf-logs-"))
    handle = launch(
        config, log_dir=log_dir, simulate=True if args.simulate else None, api_key=api_key
    )
    with handle:
        print(f"{handle.mode} server at {handle.url} (log: {handle.log_path})", file=sys.stderr)
        yield handle.url, handle.mode


def _own_flags_after_launch(args: argparse.Namespace) -> list[str]:
    """``llmperf sweep`` options written after ``--launch``, which would go to the server (no
    SGLang ``launch_server`` flag shares a name with them) instead of this command."""
    if not args.launch:
        return []
    return [a for a in args.launch if a.partition("=")[0] in args.own_flags]


def _telemetry_header() -> str:
    """The GPUs, driver and clocks (NVML), or why not; levels of ``llmperf sweep`` are not
    sampled (the plugin's are, ``PerfRun.measure``)."""
    from pytest_llmperf.launch.telemetry import open_telemetry

    module = os.environ.get("LLMPERF_NVML_MODULE", "pynvml")
    return open_telemetry("nvml", module, 0.2).header


def cmd_sweep(args: argparse.Namespace) -> int:
    misplaced = _own_flags_after_launch(args)
    if misplaced:
        print(
            f"llmperf sweep: error: {' '.join(misplaced)} after --launch would be passed to the "
            "server, not to llmperf; put llmperf's own options before --launch",
            file=sys.stderr,
        )
        return EXIT_USAGE
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            print(
                f"llmperf sweep: error: --api-key-env: environment variable "
                f"{args.api_key_env} is not set or empty",
                file=sys.stderr,
            )
            return EXIT_USAGE
    try:
        workload = Workload(
            **{
                field: getattr(args, name)
                for name, field in WORKLOAD_FIELDS.items()
                if hasattr(args, name)
            }
        )
    except ValidationError as e:
        why = "; ".join(err["msg"].removeprefix("Value error, ") for err in e.errors())
        print(f"llmperf sweep: error: the workload settings do not fit: {why}", file=sys.stderr)
        return EXIT_USAGE
    from pytest_llmperf.core.client import ServerError
    from pytest_llmperf.launch.launcher import LaunchError

    try:
        with _server(args, api_key) as (url, mode):
            result = run_sweep(
                url,
                list(args.levels),
                workload,
                api_key=api_key,
                config_name=args.config_name,
                progress=_ProgressLine(),
                details=args.details,
                scrape_metrics=args.scrape_metrics,
                server_mode=mode,
                client_processes=args.client_processes,
            )
    except (SweepError, LaunchError, ServerError) as e:
        # One line for a server that is down or refuses the key, not the client's traceback.
        print(f"llmperf sweep: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    server = result.server
    print(
        f"server: {server.mode} {server.url}  version={server.version}  "
        f"model={server.model_path}  spec={server.speculative_algorithm}  "
        f"max_running_requests={server.max_running_requests}"
    )
    print(f"workload: {workload.key()}  seed={workload.seed}")
    print(_telemetry_header())
    print(format_table(result))
    if args.json:
        _write_json(args.json, result)
        print(f"wrote {args.json}", file=sys.stderr)
    failed = sum(lv.failed for lv in result.levels)
    if not _append_history(args, result):
        return EXIT_FAILED
    return EXIT_FAILED if failed else EXIT_OK


def _append_history(args: argparse.Namespace, result: SweepResult) -> bool:
    """``--history`` (or LLMPERF_HISTORY): the sweep appended as one run; False when the
    database could not be written (the message names the setting, never the password)."""
    from pytest_llmperf.base.errors import LLMPerfError
    from pytest_llmperf.history.append import append_sweep

    if args.history == HISTORY_OFF:
        return True
    # Not given: LLMPERF_HISTORY decides, as for the plugin.
    setting = args.history or parse_history(os.environ.get("LLMPERF_HISTORY", ""))
    if setting is None:
        return True
    try:
        print(append_sweep(setting, result, Path.cwd()))
    except LLMPerfError as e:
        print(f"llmperf sweep: error: {e}", file=sys.stderr)
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.func
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
