"""Noise like a shared GPU box, so the simulator is as hard to please as a real server.

Four terms multiply or extend the model's step time (``perf_model`` gives the quiet value):

* **launch speed** (``--sim-launch-speed-sd SD``): one factor per launch, ``exp(SD * z)`` with
  ``z ~ N(0, 1)`` clipped to +-3 (median 1, >1 = slower), drawn from ``random.Random`` seeded by
  ``--sim-seed`` and the launch nonce. The nonce defaults to ``<pid>-<time_ns>-<n>``, so two
  launches differ; it is logged at start ("Simulated noise: ... nonce N") and served on
  ``/_sim/ground_truth``; pass ``--sim-launch-nonce N`` with the same ``--sim-seed`` to reproduce
  a launch (its factor, drift and stalls), or ``--sim-launch-sequence FILE`` to number a series
  of launches through a counter in ``FILE`` (nonces ``seq-0``, ``seq-1``, ...) and draw the whole
  series again. It multiplies every step cost, like ``--sim-jitter``
  (which is seeded by ``--sim-seed`` alone, so equal seeds give equal factors).
* **drift** (``--sim-drift-sd SD``, ``--sim-drift-period P``): a slow random walk within a run.
  ``x`` is an Ornstein-Uhlenbeck process in engine time, stationary sd ``SD``, autocorrelation
  ``exp(-dt / P)``, started from its stationary law; each step takes ``exp(x - SD**2 / 2)`` times
  longer (mean 1). Updated exactly at every step start, so idle gaps decorrelate it too.
* **per-step jitter** (``--sim-step-jitter J``): each step x uniform ``[1 - J, 1 + J]``
  (the profile's ``step_jitter``; drawn by the engine's seed-only RNG).
* **stalls** (``--sim-stall-rate R``, ``--sim-stall-ms M``): a Poisson process of rate ``R`` per
  second of busy engine time (stall time included); each stall that lands inside a step adds
  ``M`` ms to it. A stall during idle time is not felt: nothing was running.

Drift period and stalls are in model time: with ``--sim-time-scale S`` the period and the stall
length stretch by ``S`` and the rate shrinks by ``S``, like every step cost. All terms apply in
real time (the server) and in virtual time (``sim/virtual.py``): the engine calls
``StepNoise.apply`` from its one step planner.
"""

from __future__ import annotations

import itertools
import math
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from pytest_llmperf.base.atomic import atomic_write_text
from pytest_llmperf.base.errors import InputError
from pytest_llmperf.sim.knobs import ServerKnobs
from pytest_llmperf.sim.profile import NoiseSpec, Profile

# --sim-noise presets. quiet is the calibrated default; gpu-shared is a busy shared box.
NOISE_PRESETS: dict[str, NoiseSpec] = {
    "quiet": NoiseSpec(),
    "gpu-shared": NoiseSpec(
        launch_speed_sd=0.15,
        drift_sd=0.10,
        drift_period_s=30.0,
        step_jitter=0.02,
        stall_rate_per_s=0.02,
        stall_ms=250.0,
    ),
}
LAUNCH_Z_CLIP = 3.0
MAX_STALLS_PER_STEP = 1000  # bounds the stall loop whatever the rate


@dataclass(frozen=True)
class NoiseSettings:
    """The noise one launch runs with: the spec after presets and flags, plus its draws."""

    spec: NoiseSpec
    nonce: str
    launch_speed_factor: float  # >1 = slower; 1.0 when launch_speed_sd is 0

    @property
    def stepwise(self) -> bool:
        """Whether the engine needs a ``StepNoise`` (drift or stalls)."""
        return self.spec.drift_sd > 0 or (self.spec.stall_rate_per_s > 0 and self.spec.stall_ms > 0)

    @property
    def quiet(self) -> bool:
        s = self.spec
        return not (self.stepwise or s.launch_speed_sd > 0 or s.step_jitter > 0)

    def describe(self) -> str:
        s = self.spec
        return (
            f"launch speed sd {s.launch_speed_sd:g} (factor {self.launch_speed_factor:.3f}, "
            f"nonce {self.nonce}), drift sd {s.drift_sd:g} period {s.drift_period_s:g} s, "
            f"step jitter {s.step_jitter:g}, stalls {s.stall_rate_per_s:g}/s x {s.stall_ms:g} ms"
        )


def noise_spec(profile: Profile, knobs: ServerKnobs) -> NoiseSpec:
    """Profile noise, replaced by ``--sim-noise PRESET``, then each explicit flag on top."""
    spec = profile.noise
    if spec.step_jitter == 0 and profile.step_jitter > 0:  # the older top-level field
        spec = spec.model_copy(update={"step_jitter": profile.step_jitter})
    if knobs.sim_noise is not None:
        if knobs.sim_noise not in NOISE_PRESETS:
            raise InputError(
                f"--sim-noise {knobs.sim_noise!r} is not a noise preset; "
                f"choose one of {', '.join(NOISE_PRESETS)}"
            )
        spec = NOISE_PRESETS[knobs.sim_noise]
    flags = {
        "launch_speed_sd": knobs.sim_launch_speed_sd,
        "drift_sd": knobs.sim_drift_sd,
        "drift_period_s": knobs.sim_drift_period,
        "step_jitter": knobs.sim_step_jitter,
        "stall_rate_per_s": knobs.sim_stall_rate,
        "stall_ms": knobs.sim_stall_ms,
    }
    update = {k: v for k, v in flags.items() if v is not None}
    return NoiseSpec.model_validate({**spec.model_dump(), **update}) if update else spec


_RESOLVES = itertools.count()


def launch_nonce() -> str:
    """A nonce that differs between launches (and between resolves in one process, even on a
    coarse clock: the counter)."""
    return f"{os.getpid()}-{time.time_ns()}-{next(_RESOLVES)}"


SEQUENCE_LOCK_S = 10.0


def sequence_nonce(path: str) -> str:
    """The next nonce of the series counted in ``path`` ("seq-0" first), under a lock: launches
    started together still take distinct numbers."""
    counter = Path(path)
    try:
        with FileLock(f"{counter}.lock", timeout=SEQUENCE_LOCK_S):
            text = counter.read_text().strip() if counter.exists() else "0"
            if not text.isdigit():
                raise InputError(f"--sim-launch-sequence {path}: {text!r} is not a launch count")
            atomic_write_text(counter, f"{int(text) + 1}\n")
    except (OSError, Timeout) as exc:
        raise InputError(f"--sim-launch-sequence {path}: {exc}") from exc
    return f"seq-{text}"


def launch_speed_factor(seed: int, nonce: str, sd: float) -> float:
    """``exp(sd * z)``, ``z ~ N(0, 1)`` clipped to +-3, from ``(seed, nonce)``; 1.0 at sd 0."""
    if sd <= 0:
        return 1.0
    z = random.Random(f"sim-launch-{seed}-{nonce}").gauss(0.0, 1.0)
    z = max(-LAUNCH_Z_CLIP, min(LAUNCH_Z_CLIP, z))
    return math.exp(sd * z)


def resolve_noise(profile: Profile, knobs: ServerKnobs) -> NoiseSettings:
    """The launch's noise: spec, nonce (``--sim-launch-nonce``, the next of
    ``--sim-launch-sequence``, or a fresh one) and its factor."""
    spec = noise_spec(profile, knobs)
    if knobs.sim_launch_nonce is not None:
        nonce = knobs.sim_launch_nonce
    elif knobs.sim_launch_sequence is not None:
        nonce = sequence_nonce(knobs.sim_launch_sequence)
    else:
        nonce = launch_nonce()
    factor = launch_speed_factor(knobs.sim_seed, nonce, spec.launch_speed_sd)
    return NoiseSettings(spec=spec, nonce=nonce, launch_speed_factor=factor)


class StepNoise:
    """Drift and stalls over engine time; one per engine, seeded by ``(seed, nonce)``."""

    __slots__ = (
        "_rng",
        "_sd",
        "_tau",
        "_x",
        "_t_last",
        "_rate",
        "_stall_s",
        "_next_stall",
        "stalls",
    )

    def __init__(self, settings: NoiseSettings, seed: int, time_scale: float = 1.0) -> None:
        s = settings.spec
        self._rng = random.Random(f"sim-noise-{seed}-{settings.nonce}")
        self._sd = s.drift_sd
        self._tau = s.drift_period_s * time_scale
        self._x = self._rng.gauss(0.0, self._sd) if self._sd > 0 else 0.0
        self._t_last: float | None = None
        active = s.stall_rate_per_s > 0 and s.stall_ms > 0
        self._rate = s.stall_rate_per_s / time_scale if active else 0.0
        self._stall_s = s.stall_ms / 1e3 * time_scale
        self._next_stall: float | None = None
        self.stalls = 0

    @property
    def drift_factor(self) -> float:
        """The current drift multiplier on step time (mean 1 over the stationary law)."""
        return math.exp(self._x - self._sd * self._sd / 2) if self._sd > 0 else 1.0

    def apply(self, start: float, t: float) -> float:
        """Step time ``t`` of a step starting at engine time ``start``, with drift and stalls."""
        if self._sd > 0:
            last = self._t_last
            if last is None:
                self._t_last = start
            elif start > last:
                a = math.exp(-(start - last) / self._tau)
                self._x = self._x * a + self._sd * math.sqrt(1 - a * a) * self._rng.gauss(0, 1)
                self._t_last = start
            t *= self.drift_factor
        if self._rate > 0:
            rng, nxt = self._rng, self._next_stall
            if nxt is None or nxt < start:  # memoryless: idle time carries no stalls over
                nxt = start + rng.expovariate(self._rate)
            end = start + t
            n = 0
            while nxt < end and n < MAX_STALLS_PER_STEP:
                t += self._stall_s
                end += self._stall_s
                nxt += rng.expovariate(self._rate)
                n += 1
            self._next_stall = nxt
            self.stalls += n
        return t
