"""The differential staleness hunt of the trace cache (tests/hunt/): each scenario's cached runs must give what
plain TensorFlow gives for the same Python state, and an unchanged program must hit in its second process.

Real TensorFlow in fresh processes, no GRAPHCACHE_TRACE_VERIFY (the hunt sees what a user sees). The default run
holds the reduced set (tests/hunt/scenarios.py REDUCED) and the cheap must-hit checks (MUST_HIT_DEFAULT); the full hunt is ``slow``
(GRAPHCACHE_SLOW_TESTS=1). What today's key is known to get wrong is ``xfail(strict=True)`` from the sets in
scenarios.py, so a key that fixes a scenario fails its test until the name is taken out of the set.
"""

from __future__ import annotations

import pytest

from .hunt.runner import Result, run_must_hit, run_scenario
from .hunt.scenarios import HUNT, MISSES_TODAY, MUST_HIT, MUST_HIT_DEFAULT, REDUCED, STALE_TODAY

STALE_REASON = "stale with today's key: [sound]"
MISS_REASON = "no trace hit with today's key: [sound]"


class Stale(AssertionError):
    """A cached run's outcome differs from plain TensorFlow's for the same variant (or the run crashed)."""


class NoHit(AssertionError):
    """An unchanged program did not hit in its second process."""


def describe(result: Result) -> str:
    lines = [f"{result.scenario.name} ({result.scenario.klass}): {result.label}. {result.scenario.why}",
             result.detail.strip()]
    for run in [*result.plain.values(), *result.cached]:
        lines.append(f"  {run.label:9} {run.show():28} hits={run.hits} misses={run.misses} "
                     f"uncacheable={run.uncacheable} {run.reasons} {run.seconds:.1f}s")
    crashed = [run for run in [*result.plain.values(), *result.cached] if run.crashed]
    if crashed:
        lines.append(f"stderr of {crashed[0].label}:\n{crashed[0].stderr[-2000:]}")
    return "\n".join(lines)


def check_hunt(name: str, tmp_path) -> None:
    result = run_scenario(HUNT[name], base=tmp_path)
    if result.verdict == "invalid":  # not Stale: an xfail for staleness must not hide a scenario that tests nothing
        raise AssertionError(describe(result))
    if result.verdict != "ok":
        raise Stale(describe(result))


def check_must_hit(name: str, tmp_path) -> None:
    result = run_must_hit(MUST_HIT[name], base=tmp_path)
    if result.verdict == "invalid":
        raise AssertionError(describe(result))
    if result.verdict != "ok":
        raise Stale(describe(result))
    if not result.hit_later:
        raise NoHit(describe(result))


def hunt_params(names: list[str], *, slow: bool) -> list:
    params = []
    for name in names:
        marks = [pytest.mark.slow] if slow else []
        if name in STALE_TODAY:
            marks.append(pytest.mark.xfail(strict=True, raises=Stale, reason=STALE_REASON))
        params.append(pytest.param(name, marks=marks, id=name))
    return params


def must_hit_params() -> list:
    params = []
    for name in MUST_HIT:
        marks = [] if name in MUST_HIT_DEFAULT else [pytest.mark.slow]
        if name in MISSES_TODAY:
            marks.append(pytest.mark.xfail(strict=True, raises=NoHit, reason=MISS_REASON))
        params.append(pytest.param(name, marks=marks, id=name))
    return params


@pytest.mark.parametrize("name", hunt_params(list(REDUCED), slow=False))
def test_reduced_hunt(name, tmp_path):
    check_hunt(name, tmp_path)


@pytest.mark.parametrize("name", hunt_params([name for name in HUNT if name not in REDUCED], slow=True))
def test_full_hunt(name, tmp_path):
    check_hunt(name, tmp_path)


@pytest.mark.parametrize("name", must_hit_params())
def test_unchanged_program_hits(name, tmp_path):
    check_must_hit(name, tmp_path)


def test_scenario_sets_name_real_scenarios():
    """The known-failing sets and the reduced set can only name scenarios that exist (a typo would silently
    drop an xfail or a default-run scenario), and the hunt covers every class with several scenarios."""
    from .hunt.model import CLASSES

    assert set(REDUCED).issubset(HUNT) and STALE_TODAY.issubset(HUNT) and MISSES_TODAY.issubset(MUST_HIT)
    assert set(MUST_HIT_DEFAULT).issubset(MUST_HIT)
    assert len(HUNT) >= 40
    for klass in CLASSES:
        assert sum(s.klass == klass for s in HUNT.values()) >= 3, klass
        assert any(HUNT[name].klass == klass for name in REDUCED), f"the reduced set has no {klass} scenario"
