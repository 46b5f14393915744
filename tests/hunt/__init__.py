"""The differential staleness hunt of the trace cache (graphcache/traces/).

A trace hit returns a stored graph without running the function's Python, so it is right only if the key
covers every value that Python read. Each scenario here is one program and two variants of it, A and B, that
differ only in Python-level state (a helper module's constant, an environment variable, a data file, a
Keras/TF/NumPy setting, the hash seed, ...). The runner (runner.py) runs each variant plain (no graphcache:
the reference), then A, B, A, B on one cache dir with traces on, each a fresh process, and calls a scenario
*stale* when a cached run's result differs from its variant's plain result.

``python -m tests.hunt [--all|NAMES...] [--jobs N]`` prints the table; tests/test_trace_hunt.py runs it.
"""
