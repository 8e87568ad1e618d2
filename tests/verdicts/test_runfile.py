"""Results files: merge of shards, conflicts, compare exit status as in-pytest, CLI parsers."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import pytest

from pytest_llmperf.base.results import SweepResult
from pytest_llmperf.cli import main
from pytest_llmperf.report.results_file import (
    RunFile,
    RunFileError,
    add_compare_parser,
    add_merge_parser,
    judge_run,
    load_run,
    merge,
    render_verdicts,
    save_run,
)
from pytest_llmperf.run.compare_settings import compare_settings
from pytest_llmperf.verdicts.baseline import BaselineStore, entry_from_levels, summarize
from pytest_llmperf.verdicts.baseline_file import SWEEP_LEVEL, BaselineEntry, EntryKey
from pytest_llmperf.verdicts.compare import EXIT_UNDECIDED, Verdict
from pytest_llmperf.verdicts.crossover import CrossoverRule, crossover_why, judge_sweep_metric
from pytest_llmperf.verdicts.gates import Gate

from . import MTP, PLAIN, make_level, make_sweep

HW = "sim:h100"


def _shards(tmp_path: Path) -> list[Path]:
    plain, mtp = make_sweep("plain", PLAIN), make_sweep("mtp", MTP, cap=48)
    low = mtp.model_copy(update={"levels": mtp.levels[:3]})
    high = mtp.model_copy(update={"levels": mtp.levels[3:]})
    paths = []
    for i, sweeps in enumerate([[plain, low], [high]]):
        p = tmp_path / f"shard{i}.json"
        save_run(RunFile(hardware=HW, shard=str(i), sweeps=sweeps), p)
        paths.append(p)
    return paths


def _bless(directory: Path, run: RunFile) -> None:
    store = BaselineStore(directory)
    for s in run.sweeps:
        for lv in s.levels:
            key = EntryKey(HW, s.config, s.workload.key(), lv.max_concurrency)
            store.queue_update(key, entry_from_levels([lv], ["output_throughput"]))
    store.flush()


def test_merge_shards(tmp_path: Path) -> None:
    paths = _shards(tmp_path)
    run = merge(paths)
    assert [s.config for s in run.sweeps] == ["plain", "mtp"]
    assert [lv.max_concurrency for lv in run.sweep("mtp").levels] == [1, 4, 16, 32, 64, 128]  # type: ignore[union-attr]
    assert merge([*paths, paths[0]]) == run  # an identical duplicate is fine


def test_merge_conflict_names_point_and_files(tmp_path: Path) -> None:
    paths = _shards(tmp_path)
    other = make_sweep("plain", {64: 2000})
    save_run(RunFile(hardware=HW, sweeps=[other]), tmp_path / "x.json")
    with pytest.raises(
        RunFileError,
        match=r"conflicting results for plain .* C=64: .*shard0.json has 2327.0 tok/s, "
        r".*x.json has 2000.0",
    ):
        merge([*paths, tmp_path / "x.json"])
    save_run(RunFile(hardware="other", sweeps=[]), tmp_path / "y.json")
    with pytest.raises(RunFileError, match="differs"):
        merge([paths[0], tmp_path / "y.json"])


def test_invalid_results_file(tmp_path: Path) -> None:
    p = tmp_path / "bad.json"
    p.write_text('{"schema_version": 2, "hardware": "x"}')
    with pytest.raises(
        RunFileError, match=r"bad.json: results file is invalid.*\n  - schema_version"
    ):
        load_run(p)


def _compare(
    run: RunFile, baselines: Path, tolerance: float | None = None, gates: Sequence[Gate] = ()
) -> tuple[str, int]:
    """What ``llmperf compare`` prints and its exit status."""
    verdicts = judge_run(run, baselines, tolerance, gates)
    return render_verdicts(run, verdicts), verdicts.exit_status()


def test_compare_exit_status(tmp_path: Path) -> None:
    run = merge(_shards(tmp_path))
    baselines = tmp_path / "baselines"
    _bless(baselines, run)
    text, status = _compare(run, baselines)
    assert status == 0 and "fail" not in text
    gate = Gate(config="mtp", reference="plain", factor=0.98)
    text, status = _compare(run, baselines, None, [gate])
    assert status == 1 and "mtp at C=64: 1571 tok/s, 32.5 % below plain" in text
    # A 10 % regression at C=64 of plain: fails beyond tolerance + margin.
    slow = run.model_copy(deep=True)
    lv = slow.sweep("plain").levels[4]  # type: ignore[union-attr]
    lv.output_throughput *= 0.85
    text, status = _compare(slow, baselines, 0.05)
    assert status == 1 and "plain at C=64: output_throughput 1978 tok/s is 15.0 % below" in text
    _, status = _compare(run, tmp_path / "empty")
    assert status == 1  # missing baselines fail like missing snapshots


def test_cli_parsers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="llmperf")
    sub = parser.add_subparsers()
    add_merge_parser(sub)
    add_compare_parser(sub)
    out = tmp_path / "merged.json"
    args = parser.parse_args(["merge", *map(str, _shards(tmp_path)), "-o", str(out)])
    assert args.func(args) == 0
    _bless(tmp_path / "b", load_run(out))
    gates = tmp_path / "gates.toml"
    gates.write_text('[[gates]]\nconfig = "mtp"\nreference = "plain"\nfactor = 0.98\n')
    md = tmp_path / "summary.md"
    args = parser.parse_args(
        [
            "compare",
            str(out),
            "--baselines",
            str(tmp_path / "b"),
            "--gates",
            str(gates),
            "--markdown",
            str(md),
        ]
    )
    assert args.func(args) == 1
    assert "### gates" in md.read_text()
    args = parser.parse_args(
        ["compare", str(out), "--baselines", str(tmp_path / "b"), "--tolerance", "5"]
    )
    assert args.func(args) == 2
    assert "did you mean 0.05" in capsys.readouterr().err


def _with_repeats(sweep: SweepResult, factor: float) -> SweepResult:
    """A copy whose every level has two more samples, ``factor`` and ``factor**2`` times as fast."""
    repeats = {}
    for lv in sweep.levels:
        repeats[lv.max_concurrency] = [
            make_level(lv.max_concurrency, lv.output_throughput * factor**i) for i in (1, 2)
        ]
    return sweep.model_copy(update={"repeats": repeats})


def test_results_file_keeps_every_sample_through_save_and_merge(tmp_path: Path) -> None:
    sweep = _with_repeats(make_sweep("plain", PLAIN), 0.99)
    save_run(RunFile(hardware=HW, sweeps=[sweep]), tmp_path / "a.json")
    loaded = load_run(tmp_path / "a.json").sweep("plain")
    assert loaded is not None and len(loaded.samples(64)) == 3
    assert loaded.samples(64) == sweep.samples(64)
    merged = merge([tmp_path / "a.json", tmp_path / "a.json"])
    assert merged.sweeps[0].samples(64) == sweep.samples(64)
    # The same point with other repeats is a conflict, named with every sample.
    other = _with_repeats(make_sweep("plain", PLAIN), 0.9)
    save_run(RunFile(hardware=HW, sweeps=[other]), tmp_path / "b.json")
    with pytest.raises(RunFileError, match=r"C=1: .*a.json has 3 samples \(108.0, 106.9, 105.9"):
        merge([tmp_path / "a.json", tmp_path / "b.json"])


def test_compare_judges_all_samples(tmp_path: Path) -> None:
    run = RunFile(hardware=HW, sweeps=[make_sweep("plain", PLAIN)])
    _bless(tmp_path, run)
    assert judge_run(run, tmp_path, 0.05).exit_status(fail_inconclusive=True) == 0
    # The first sample as blessed, two re-runs ~20 % slower: no longer a clean pass.
    noisy = run.model_copy(update={"sweeps": [_with_repeats(run.sweeps[0], 0.9)]})
    verdicts = judge_run(noisy, tmp_path, 0.05)
    (p64,) = [p for p in verdicts.points["plain"] if p.concurrency == 64]
    assert p64.metrics[0].n_current == 3
    assert p64.metrics[0].current == pytest.approx(2327 * (1 + 0.9 + 0.81) / 3)
    assert p64.verdict == Verdict.INCONCLUSIVE
    assert verdicts.exit_status() == 0
    assert verdicts.exit_status(fail_inconclusive=True) == 1
    assert verdicts.exit_status(undecided="fail") == 1
    assert verdicts.exit_status(undecided="exit") == EXIT_UNDECIDED == 6


def test_compare_undecided_flag_and_its_older_spelling(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``llmperf compare --undecided`` exits as the pytest run's setting does; the older
    ``--fail-inconclusive`` still means "fail" and names the new flag."""
    run = RunFile(hardware=HW, sweeps=[make_sweep("plain", PLAIN)])
    _bless(tmp_path / "b", run)
    noisy = run.model_copy(update={"sweeps": [_with_repeats(run.sweeps[0], 0.9)]})
    save_run(noisy, tmp_path / "noisy.json")
    base = ["compare", str(tmp_path / "noisy.json"), "--baselines", str(tmp_path / "b")]
    assert main(base) == 0
    assert "- plain: inconclusive at C=64" in capsys.readouterr().out  # what green means
    assert main([*base, "--undecided", "fail"]) == 1
    assert main([*base, "--undecided", "exit"]) == 6
    capsys.readouterr()
    assert main([*base, "--fail-inconclusive"]) == 1
    assert "--fail-inconclusive is deprecated; use --undecided fail" in capsys.readouterr().err


SUITE = """
[[server]]
name = "plain"
model = "m"

[[server]]
name = "mtp"
model = "m"

[sweep]
metrics = ["output_throughput"]
tolerance = { output_throughput = "20%" }

[[crossover]]
config = "mtp"
reference = "plain"
"""


def test_compare_reads_tolerance_metrics_and_crossover_from_the_suite_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = merge(_shards(tmp_path))
    _bless(tmp_path / "b", run)
    for lv in run.sweep("mtp").levels[2:]:  # type: ignore[union-attr]
        lv.output_throughput *= 0.85  # 15 % slower: within the suite's 20 %, not the default 5 %
    save_run(run, tmp_path / "slow.json")
    suite = tmp_path / "llmperf.toml"
    suite.write_text(SUITE)
    # unset in the suite: pytest's default, not another one of this command's own
    assert compare_settings(suite).adjust == "auto"
    base = ["compare", str(tmp_path / "slow.json"), "--baselines", str(tmp_path / "b")]
    assert main(base) == 1
    capsys.readouterr()
    # The crossover has no baseline yet: MISSING, exactly as the pytest check.
    assert main([*base, "--gates", str(suite)]) == 1
    out = capsys.readouterr().out
    assert "crossover mtp-vs-plain: C=16 (no baseline) missing" in out
    settings = compare_settings(suite)
    assert settings.metrics == ("output_throughput",)
    assert settings.tolerances == {"output_throughput": 0.2}
    store = BaselineStore(tmp_path / "b")
    summary = summarize("crossover_concurrency", [16.0], reference="plain")
    key = EntryKey(HW, "mtp", run.sweeps[0].workload.key(), SWEEP_LEVEL)
    store.queue_update(key, BaselineEntry(metrics={"crossover_concurrency": summary}))
    store.flush()
    assert main([*base, "--gates", str(suite)]) == 0
    assert "crossover mtp-vs-plain: C=16 (baseline 16) pass" in capsys.readouterr().out
    # Tolerances on the command line replace the suite's table, as in pytest.
    assert main([*base, "--gates", str(suite), "--tolerance", "0.05"]) == 1
    # A suite file without a loader (report/ alone cannot read it) is an error, not a guess.
    parser = argparse.ArgumentParser(prog="llmperf")
    add_compare_parser(parser.add_subparsers())
    args = parser.parse_args([*base, "--gates", str(suite)])
    assert args.func(args) == 2
    assert "is a suite file" in capsys.readouterr().err


@pytest.mark.parametrize("adjust", ["none", "launch", "auto"])
def test_compare_reads_the_suite_files_adjust(tmp_path: Path, adjust: str) -> None:
    """A suite that sets ``[sweep] adjust`` (bench_sequential's, real SGLang's) gave
    ``llmperf compare --gates llmperf.toml`` a TypeError traceback."""
    suite = tmp_path / "llmperf.toml"
    suite.write_text(SUITE.replace("[sweep]\n", f'[sweep]\nadjust = "{adjust}"\n'))
    assert compare_settings(suite).adjust == adjust


def test_crossover_verdicts() -> None:
    entry = BaselineEntry(
        metrics={"crossover_concurrency": summarize("crossover_concurrency", [32.0])}
    )
    assert judge_sweep_metric(16, entry) == (Verdict.FAIL, 32)
    assert judge_sweep_metric(32, entry) == (Verdict.PASS, 32)
    assert judge_sweep_metric(64, entry) == (Verdict.PASS, 32)
    assert judge_sweep_metric(64, None) == (Verdict.MISSING, None)
    rule = CrossoverRule("mtp", "plain")
    plain, mtp = make_sweep("plain", PLAIN), make_sweep("mtp", MTP, cap=48)
    why = crossover_why(rule, 32, 128, [1, 4, 16, 32, 64, 128], mtp, plain)
    assert why == (
        "mtp-vs-plain: crossover concurrency fell from C=128 to C=32: mtp no longer beats "
        "plain on output_throughput at C=64 (1571.1 vs 2327.0, -32.5 %); mtp's server caps "
        "running requests at 48 (C=64 queues)"
    )
    with pytest.raises(KeyError, match="unknown metric"):
        CrossoverRule("mtp", "plain", metric="tok_s")


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("gates.toml", "[[gate]\nconfig = ", "not valid TOML"),
        ("gates.json", "{not json", "not valid JSON"),
        ("gates.yaml", "a: [1, 2", "not valid YAML"),
        ("missing.toml", None, "no such file"),
    ],
)
def test_compare_names_a_broken_gates_file(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    text: str | None,
    expected: str,
) -> None:
    results = tmp_path / "results.json"
    save_run(RunFile(hardware="hw"), results)
    (tmp_path / "baselines").mkdir()
    gates = tmp_path / name
    if text is not None:
        gates.write_text(text)
    code = main(["compare", str(results), "--baselines", str(tmp_path / "baselines"),
                 "--gates", str(gates)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert f"--gates {gates}: {expected}" in err and "Traceback" not in err


def test_compare_names_a_missing_baselines_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results.json"
    save_run(RunFile(hardware="hw"), results)
    code = main(["compare", str(results), "--baselines", str(tmp_path / "nope")])
    assert code == 2
    assert f"--baselines {tmp_path / 'nope'}: does not exist" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    code = main(["compare", str(results), "--baselines", str(tmp_path / "file")])
    assert code == 2
    assert "is not a directory" in capsys.readouterr().err


def test_merge_and_compare_name_a_sweep_or_ab_file_instead_of_listing_schema_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`llmperf sweep --json` and ab.json are the package's other JSON files; handed one, the
    commands say what it is and which file they read, not 'hardware: Field required'."""
    from pytest_llmperf.cli import _write_json
    from pytest_llmperf.report.ab_table import save_ab

    sweep, ab = tmp_path / "sweep.json", tmp_path / "ab.json"
    _write_json(sweep, make_sweep("plain", PLAIN))  # exactly what `llmperf sweep --json` writes
    save_ab([], ab)
    (tmp_path / "b").mkdir()
    for path, what in [(sweep, "one sweep (written by `llmperf sweep --json`)"), (ab, "an A/B")]:
        for argv in (["merge", str(path), "-o", str(tmp_path / "m.json")], ["compare", str(path)]):
            if argv[0] == "compare":
                argv += ["--baselines", str(tmp_path / "b")]
            assert main(argv) == 2
            err = capsys.readouterr().err
            assert f"{path}: this is {what}" in err and "not a results file" in err
            assert "--llmperf-output-dir (default llmperf-results/)" in err
            assert "Field required" not in err
    assert not (tmp_path / "m.json").exists()


def test_compare_judges_a_point_at_the_launch_budget_pytest_judged_it_at(tmp_path: Path) -> None:
    """A point pytest judged by the sequential rule (``looks`` in its Judgement) is judged by
    the same rule in ``llmperf compare``: the plain rule says otherwise for some of these."""
    from pytest_llmperf.report.judgement import Judgement
    from pytest_llmperf.report.results_file import judge_recorded
    from pytest_llmperf.verdicts.compare import compare_sweep

    def launched(c: int, tput: float, launch: str) -> object:
        lv = make_level(c, tput)
        lv.launch = launch
        return lv

    base_levels = {
        c: [launched(c, v * f, f"b{i}") for i, f in enumerate((0.97, 1.0, 1.03))]
        for c, v in PLAIN.items()
    }
    store = BaselineStore(tmp_path)
    sweep = make_sweep("plain", PLAIN)
    for c, lvs in base_levels.items():
        key = EntryKey(HW, "plain", sweep.workload.key(), c)
        store.queue_update(key, entry_from_levels(lvs, ["output_throughput"]))
    store.flush()
    differ = 0
    for factor in (1.0, 0.97, 0.94, 0.9, 0.85, 0.7):
        cur = {c: v * factor for c, v in PLAIN.items()}
        first = make_sweep("plain", cur)
        for lv in first.levels:
            lv.launch = "c0"
        repeats = {c: [launched(c, v * g, f"c{i + 1}") for i, g in enumerate((0.98, 1.02))]
                   for c, v in cur.items()}  # fmt: skip
        run = RunFile(hardware=HW, sweeps=[first.model_copy(update={"repeats": repeats})])
        store = BaselineStore(tmp_path)
        seq = compare_sweep(run.sweeps[0], store, HW, metrics=["output_throughput"], looks=6)
        plain = compare_sweep(run.sweeps[0], store, HW, metrics=["output_throughput"])
        differ += sum(a.verdict != b.verdict for a, b in zip(seq, plain, strict=True))
        checks = [
            Judgement(kind="point", nodeid=f"t[{p.concurrency}]", config="plain",
                      workload=sweep.workload.key(), concurrency=p.concurrency,
                      verdict=p.verdict, metrics=["output_throughput"], looks=6)
            for p in seq
        ]  # fmt: skip
        got = judge_recorded(run.model_copy(update={"checks": checks}), tmp_path)
        assert {k: v for k, v in got.by_test.items()} == {j.nodeid: j.verdict for j in checks}
    assert differ, "the two rules agreed everywhere: the test would not catch a lost budget"
