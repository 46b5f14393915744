"""The tutorial corpus (benchmarks/corpus/) under ``graphcache run`` with traces on (benchmarks/corpus_run.py).

Each program runs plain, then cold, warm and a third time under ``graphcache run`` on a fresh cache dir, every
run a fresh process. The default run takes two of the fastest programs, one Keras ``fit`` (quickstart for
beginners: fit, evaluate, predict) and one custom training loop (mixed precision: a ``@tf.function`` step under
a mixed_float16 policy whose LossScaleOptimizer is built in its first trace); the whole corpus is slow
(minutes).

What is asserted, per program: the warm run's traces hit and none is looked up and missed, its results are
plain TensorFlow's (bitwise: the programs print exact floats), and a third run adds no entry (a key that
changes between identical processes would). The default run's programs are also refused nothing but
TensorFlow's own library functions.
"""

from __future__ import annotations

import pytest

from benchmarks import corpus_run

DEFAULT_PROGRAMS = ("quickstart_beginner", "mixed_precision")


def check(result: dict) -> None:
    warm = result["runs"]["warm"]
    assert result["equal"], f"{result['program']}: a run under graphcache printed other results than plain"
    assert warm["trace_hits"] > 0 and warm["trace_misses"] == 0, (result["program"], warm)
    assert result["entry_growth"] == 0, (result["program"], result["runs"]["third"])
    assert result["runs"]["cold"]["trace_misses"] > 0  # the cold run traced and stored: the hits are its entries


@pytest.mark.parametrize("program", DEFAULT_PROGRAMS)
def test_corpus_program_hits_warm(program: str) -> None:
    result = corpus_run.run_program(program, log=lambda _: None)
    check(result)
    warm = result["runs"]["warm"]
    assert set(warm["trace_reasons"]) <= {"library"}, warm["misses"]
    assert warm["function_compiles"] == 0 and warm["function_hits"] > 0, warm


def test_corpus_lists_every_program_with_a_shape_and_pattern() -> None:
    names = corpus_run.programs()
    assert len(names) >= 14 and set(DEFAULT_PROGRAMS) <= set(names)
    for name in names:
        described = corpus_run.describe(name)
        assert described["shape"] and described["pattern"], name


@pytest.mark.slow
@pytest.mark.parametrize("program", [p for p in corpus_run.programs() if p not in DEFAULT_PROGRAMS])
def test_corpus_program_hits_warm_full(program: str) -> None:
    check(corpus_run.run_program(program, log=lambda _: None))
