"""Every scenario, by name, and what today's key gets wrong: the one place to edit when the key is fixed.

``STALE_TODAY`` lists the hunt scenarios that are stale (or error) with today's key; tests/test_trace_hunt.py marks
them ``xfail(strict=True)``, so a key that fixes one makes its test fail until the name is removed here.
``MISSES_TODAY`` lists the must-hit checks that do not hit today. Both sets come from running the hunt
(``python -m tests.hunt --all``), never from reading the scenarios.
"""

from __future__ import annotations

from . import (
    sc_arguments,
    sc_config,
    sc_files,
    sc_keras,
    sc_keras_methods,
    sc_keras_models,
    sc_keras_objects,
    sc_library_state,
    sc_loops,
    sc_must_hit,
    sc_paths,
    sc_process,
    sc_saved,
    sc_structure,
    sc_user_library,
)
from .model import Scenario

HUNT: dict[str, Scenario] = {s.name: s for module in (sc_user_library, sc_library_state, sc_files, sc_config,
                                                      sc_paths, sc_process, sc_structure, sc_loops, sc_keras,
                                                      sc_keras_models, sc_arguments, sc_keras_methods, sc_saved,
                                                      sc_keras_objects)
                            for s in module.SCENARIOS}
MUST_HIT: dict[str, Scenario] = {s.name: s for s in [*sc_must_hit.SCENARIOS, *sc_structure.MUST_HIT_SCENARIOS,
                                                     *sc_loops.MUST_HIT_LOOPS, *sc_keras.MUST_HIT_KERAS,
                                                     *sc_keras_models.MUST_HIT_MODELS, *sc_arguments.MUST_HIT_ARGUMENTS,
                                                     *sc_keras_methods.MUST_HIT_KERAS_METHODS, *sc_saved.MUST_HIT_SAVED,
                                                     *sc_keras_objects.MUST_HIT_KERAS_OBJECTS]}
ALL: dict[str, Scenario] = {**HUNT, **MUST_HIT}

# The default run's share of the hunt: one or two cheap scenarios a class (no Keras: ~3 s a process), one
# control (global_seed: a value the key holds) so that the default run also shows an ok verdict, and one custom
# training loop (Keras objects read from globals, the optimizer built in the first trace: sc_loops.py).
REDUCED = ("ns_pkg_constant", "installed_same_version", "lib_module_attribute", "np_load", "check_numerics",
           "global_seed", "function_attribute", "hashseed_set_iteration", "namedtuple_method",
           "loop_optimizer_learning_rate")

# The must-hit checks of the default run: the cheap ones (the installed package's and Keras' are slow-only).
MUST_HIT_DEFAULT = ("hit_global_and_closure", "hit_module_method", "hit_namespace_package_helper",
                    "hit_dataset_dict_iterator")

# Stale with today's key (found 2026-12-05, open in issue [sound]): a method of a TensorFlow class the program
# replaced (libwrites.py watches the trusted libraries' module dicts, not their classes' dicts), and a library
# function's defaults the program replaced (library functions are named by identity; their mutable attributes are
# not keyed). At fc11e37 (the key
# before [sound]'s allowlist, settings snapshot and recording), 47 of the 67 were (the class lists are in git's
# history of this file); `python -m tests.hunt --all` against the rebuilt key gives ok for every other scenario
# (ok-hit, or ok-no-hit where the key refuses what it cannot cover).
STALE_TODAY: frozenset[str] = frozenset({"library_class_method_patched", "library_function_defaults_patched"})
# Must-hit checks that do not hit today: none (the namespace and installed helpers hit, as "library" code).
MISSES_TODAY: frozenset[str] = frozenset()

assert len(ALL) == len(HUNT) + len(MUST_HIT), "scenario names must be unique"
