"""Every scenario, by name, and what today's key gets wrong: the one place to edit when the key is fixed.

``STALE_TODAY`` lists the hunt scenarios that are stale (or error) with today's key; tests/test_trace_hunt.py marks
them ``xfail(strict=True)``, so a key that fixes one makes its test fail until the name is removed here.
``MISSES_TODAY`` lists the must-hit checks that do not hit today. Both sets come from running the hunt
(``python -m tests.hunt --all``), never from reading the scenarios.
"""

from __future__ import annotations

from . import sc_config, sc_files, sc_library_state, sc_must_hit, sc_paths, sc_process, sc_user_library
from .model import Scenario

HUNT: dict[str, Scenario] = {s.name: s for module in (sc_user_library, sc_library_state, sc_files, sc_config,
                                                      sc_paths, sc_process) for s in module.SCENARIOS}
MUST_HIT: dict[str, Scenario] = {s.name: s for s in sc_must_hit.SCENARIOS}
ALL: dict[str, Scenario] = {**HUNT, **MUST_HIT}

# The default run's share of the hunt: one or two cheap scenarios a class (no Keras: ~3 s a process), and one
# control (global_seed: a value the key holds) so that the default run also shows an ok verdict.
REDUCED = ("ns_pkg_constant", "installed_same_version", "lib_module_attribute", "np_load", "check_numerics",
           "global_seed", "function_attribute", "hashseed_set_iteration")

# The must-hit checks of the default run: the cheap ones (the installed package's and Keras' are slow-only).
MUST_HIT_DEFAULT = ("hit_global_and_closure", "hit_module_method", "hit_namespace_package_helper")

# Stale with the key at fc11e37 (python -m tests.hunt --all, 2026-12-05): 47 of the 67 hunt scenarios. Each
# returned variant A's result in a process of variant B (or A's exception), from a trace hit.
STALE_TODAY: frozenset[str] = frozenset({
    # user code taken for library code
    "ns_pkg_constant", "ns_pkg_function_code", "ns_pkg_nested_global", "ns_pkg_class_attr",
    "installed_same_version", "installed_bumped_no_version_attr", "installed_submodule_constant",
    "ns_pkg_keras_layer_predict",
    # state an installed library reads
    "lib_module_attribute", "lib_factory_closure", "lib_configure_call", "lib_env_var",
    "lib_edited_in_keras_layer_predict", "lib_attribute_in_keras_layer_predict", "lib_closure_on_module_attr",
    "lib_loss_closure_fit",
    # files read through library calls
    "np_load", "gfile_json", "np_loadtxt", "pickle_load_in_library",
    # TensorFlow/Keras/NumPy configuration read in library code
    "keras_epsilon_in_loss", "keras_floatx_in_ops", "keras_mixed_precision_custom_loop", "tnp_prefer_float32",
    "tnp_dtype_conversion_mode", "check_numerics", "op_determinism", "keras_image_data_format",
    "tf_deterministic_ops_env", "np_seterr",
    # paths the walk does not follow
    "absl_flag", "function_attribute", "enum_member_value", "enum_member_method",
    "keras_lambda_library_closure_predict", "class_dunder_attribute", "metaclass_attribute", "builtin_patched",
    "masked_array_mask", "variable_name_branch",
    # per-process state (read inside a library, or a set built in the trace)
    "hashseed_set_iteration", "hash_str_library", "argv_library", "time_library", "random_library",
    "np_random_library", "warnings_filter_library",
})
# Must-hit checks that do not hit today: none (the namespace and installed helpers hit, as "library" code).
MISSES_TODAY: frozenset[str] = frozenset()

assert len(ALL) == len(HUNT) + len(MUST_HIT), "scenario names must be unique"
