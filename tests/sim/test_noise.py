"""Shared-GPU noise: launch speed, drift, per-step jitter and stalls (sim/noise.py)."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_llmperf.base.errors import InputError
from pytest_llmperf.sim.args import parse_args
from pytest_llmperf.sim.engine import SimEngine
from pytest_llmperf.sim.knobs import ServerKnobs
from pytest_llmperf.sim.noise import (
    NOISE_PRESETS,
    NoiseSettings,
    StepNoise,
    launch_speed_factor,
    noise_spec,
)
from pytest_llmperf.sim.perf_model import resolve, step_time
from pytest_llmperf.sim.profile import NoiseSpec, ProfileError, load_profile, profile_path
from pytest_llmperf.sim.virtual import VirtualLevel, run_virtual_level, run_virtual_sweep

LEVELS = (1, 16)


def _windows(knobs: ServerKnobs, n: int = 20) -> list[VirtualLevel]:
    """``n`` back-to-back closed-loop windows at C=16 on one virtual engine (one launch)."""
    model, _ = resolve(None, knobs)
    engine = SimEngine(model, virtual=True)
    return [run_virtual_level(engine, 16, 32, 100, 200) for _ in range(n)]


def test_quiet_default_is_unchanged() -> None:
    base, logs = resolve(None, ServerKnobs())
    assert base.noise is None and base.step_jitter == 0.0
    assert not any("noise" in line.lower() for line in logs)
    quiet, _ = resolve(None, ServerKnobs(sim_noise="quiet"))
    assert quiet.noise is None and quiet.speed_factor == 1.0
    assert step_time(quiet, 16, 5000) == step_time(base, 16, 5000)
    rates = {round(w.output_throughput, 6) for w in _windows(ServerKnobs(), n=5)}
    assert len(rates) == 1  # quiet windows are identical


def test_launch_speed_differs_per_launch_and_reproduces_with_nonce() -> None:
    knobs = ServerKnobs(sim_launch_speed_sd=0.15, sim_seed=3)
    a, _ = resolve(None, knobs)
    b, _ = resolve(None, knobs)
    assert a.noise is not None and b.noise is not None
    assert a.noise.nonce != b.noise.nonce
    assert a.speed_factor != b.speed_factor
    fixed = replace(knobs, sim_launch_nonce="run-7")
    c1, logs = resolve(None, fixed)
    c2, _ = resolve(None, fixed)
    assert c1.speed_factor == c2.speed_factor
    assert any("nonce run-7" in line for line in logs)
    other, _ = resolve(None, replace(fixed, sim_seed=4))
    assert other.speed_factor != c1.speed_factor
    # The factor multiplies every step cost.
    quiet, _ = resolve(None, ServerKnobs())
    assert step_time(c1, 16, 5000) == pytest.approx(c1.speed_factor * step_time(quiet, 16, 5000))


def test_launch_sequence_numbers_launches_and_draws_the_series_again(tmp_path: Path) -> None:
    """``--sim-launch-sequence FILE``: launch n takes nonce ``seq-n``, so a fresh file with the
    same seed gives the same series of speeds, launch by launch."""

    def series(path: Path) -> list[float]:
        knobs = parse_args(["--sim-launch-speed-sd", "0.3", "--sim-launch-sequence", str(path)])
        got = []
        for n in range(4):
            model, logs = resolve(None, knobs.knobs)
            assert model.noise is not None and model.noise.nonce == f"seq-{n}"
            assert any(f"nonce seq-{n}" in line for line in logs)
            got.append(model.noise.launch_speed_factor)
        return got

    first = series(tmp_path / "a")
    assert len(set(first)) == 4  # distinct launches
    assert series(tmp_path / "b") == first
    assert first == [launch_speed_factor(0, f"seq-{n}", 0.3) for n in range(4)]
    (tmp_path / "a").write_text("many\n")
    with pytest.raises(InputError, match="--sim-launch-sequence .*'many' is not a launch count"):
        series(tmp_path / "a")


def test_launch_speed_factor_law() -> None:
    logs = [math.log(launch_speed_factor(0, str(i), 0.15)) for i in range(2000)]
    assert statistics.fmean(logs) == pytest.approx(0.0, abs=0.02)
    assert statistics.stdev(logs) == pytest.approx(0.15, rel=0.1)
    assert max(abs(x) for x in logs) <= 0.15 * 3 + 1e-12  # z is clipped to +-3
    assert launch_speed_factor(0, "x", 0.0) == 1.0


def test_two_launches_measure_different_throughput_in_virtual_time() -> None:
    kw = {"profile": None, "concurrencies": LEVELS, "input_len": 100, "output_len": 100}
    noisy = ServerKnobs(sim_launch_speed_sd=0.15)
    one = run_virtual_sweep(noisy, **kw).throughput()  # type: ignore[arg-type]
    two = run_virtual_sweep(noisy, **kw).throughput()  # type: ignore[arg-type]
    assert one != two
    same = replace(noisy, sim_launch_nonce="n1")
    assert (
        run_virtual_sweep(same, **kw).throughput() == run_virtual_sweep(same, **kw).throughput()  # type: ignore[arg-type]
    )


def test_drift_changes_throughput_over_a_run() -> None:
    quiet = [w.output_throughput for w in _windows(ServerKnobs())]
    knobs = ServerKnobs(sim_drift_sd=0.10, sim_drift_period=3.0, sim_launch_nonce="d")
    drifting = [w.output_throughput for w in _windows(knobs)]
    assert max(quiet) == pytest.approx(min(quiet))
    assert max(drifting) / min(drifting) > 1.1, drifting
    # Slow, not white: neighbouring windows (0.7 s apart, period 3 s) move together.
    diffs = [abs(b - a) for a, b in zip(drifting, drifting[1:], strict=False)]
    assert statistics.fmean(diffs) < max(drifting) - min(drifting)
    # Mean-1 drift: the run's average stays near the quiet speed.
    assert statistics.fmean(drifting) == pytest.approx(quiet[0], rel=0.2)
    # The same seed and nonce replay the same drift.
    assert [w.output_throughput for w in _windows(knobs)] == drifting


def test_drift_noise_is_ornstein_uhlenbeck() -> None:
    spec = NoiseSpec(drift_sd=0.1, drift_period_s=10.0)
    noise = StepNoise(NoiseSettings(spec, "n", 1.0), seed=1)
    xs = []
    for k in range(20000):
        noise.apply(k * 0.5, 0.01)
        xs.append(math.log(noise.drift_factor) + 0.1**2 / 2)
    assert statistics.stdev(xs) == pytest.approx(0.1, rel=0.25)
    lag = 20  # 10 s = one period: autocorrelation about exp(-1)
    m = statistics.fmean(xs)
    cov = statistics.fmean((a - m) * (b - m) for a, b in zip(xs, xs[lag:], strict=False))
    assert cov / statistics.pvariance(xs) == pytest.approx(math.exp(-1), abs=0.15)


def test_stalls_poisson_in_busy_time_only() -> None:
    spec = NoiseSpec(stall_rate_per_s=2.0, stall_ms=100.0)
    noise = StepNoise(NoiseSettings(spec, "s", 1.0), seed=0)
    t = 0.0
    added = 0.0
    while t < 200.0:  # 200 s of back-to-back 10 ms steps
        d = noise.apply(t, 0.01)
        added += d - 0.01
        t += d
    # The rate is per second of busy engine time, stalls included (a stall is busy time too).
    assert noise.stalls == pytest.approx(2.0 * t, rel=0.2)
    assert added == pytest.approx(noise.stalls * 0.1)
    before = noise.stalls
    noise.apply(t + 10_000.0, 0.01)  # a long idle gap carries no stalls over
    assert noise.stalls - before <= 3
    # --sim-time-scale stretches stalls like every step cost.
    slow = StepNoise(NoiseSettings(spec, "s", 1.0), seed=0, time_scale=2.0)
    extra = slow.apply(0.0, 100.0) - 100.0
    assert slow.stalls > 0 and extra == pytest.approx(slow.stalls * 0.2)
    # ... and the rate is per model second: 2/s at scale 2 is 1 per engine second.
    assert slow.stalls == pytest.approx(100.0 + extra, rel=0.35)


def test_stalls_reach_the_engine_and_ground_truth() -> None:
    knobs = ServerKnobs(sim_stall_rate=5.0, sim_stall_ms=50.0, sim_launch_nonce="s")
    model, _ = resolve(None, knobs)
    engine = SimEngine(model, virtual=True)
    stalled = run_virtual_level(engine, 16, 64, 100, 200)
    quiet, _ = resolve(None, ServerKnobs())
    plain = run_virtual_level(SimEngine(quiet, virtual=True), 16, 64, 100, 200)
    stalls = engine.ground_truth()["stalls"]
    assert stalls > 0
    assert stalled.duration_s == pytest.approx(plain.duration_s + stalls * 0.05, rel=1e-6)


def test_gpu_shared_preset_and_flag_overrides() -> None:
    args = parse_args(["--sim-noise", "gpu-shared", "--sim-drift-sd", "0", "--sim-stall-ms", "9"])
    profile = load_profile(None)
    spec = noise_spec(profile, args.knobs)
    preset = NOISE_PRESETS["gpu-shared"]
    assert preset.launch_speed_sd == 0.15 and preset.drift_sd == 0.10
    assert 0 < preset.step_jitter <= 0.05 and preset.stall_rate_per_s > 0
    assert spec.launch_speed_sd == 0.15 and spec.drift_sd == 0.0 and spec.stall_ms == 9.0
    model, _ = resolve(profile, replace(args.knobs, sim_launch_nonce="p"))
    assert model.step_jitter == preset.step_jitter
    assert parse_args(["--sim-step-jitter", "0.04"]).knobs.sim_step_jitter == 0.04
    assert noise_spec(profile, ServerKnobs(sim_noise="quiet")) == NoiseSpec()
    with pytest.raises(InputError, match="--sim-noise 'loud'"):
        resolve(profile, ServerKnobs(sim_noise="loud"))


@pytest.mark.parametrize(
    "argv",
    [
        ["--sim-noise", "loud"],
        ["--sim-launch-speed-sd", "-0.1"],
        ["--sim-drift-sd", "1.5"],
        ["--sim-drift-period", "0"],
        ["--sim-step-jitter", "0.5"],
        ["--sim-stall-rate", "nan"],
        ["--sim-stall-ms", "-5"],
    ],
)
def test_bad_noise_flags_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2
    assert argv[0] in capsys.readouterr().err


def test_profile_noise_field(tmp_path: Path) -> None:
    raw = json.loads(profile_path(None).read_text())
    raw["noise"] = {"launch_speed_sd": 0.2, "step_jitter": 0.01}
    good = tmp_path / "noisy.json"
    good.write_text(json.dumps(raw))
    model, logs = resolve(None, ServerKnobs(sim_profile=str(good), sim_launch_nonce="f"))
    assert model.noise is not None and model.noise.spec.launch_speed_sd == 0.2
    assert model.step_jitter == 0.01 and any("Simulated noise" in line for line in logs)
    raw["noise"] = {"drift_sdd": 0.1}
    bad = tmp_path / "typo.json"
    bad.write_text(json.dumps(raw))
    with pytest.raises(ProfileError, match=r"typo\.json.*noise\.drift_sdd"):
        load_profile(str(bad))
