"""The trace key's trust model (graphcache/traces/trust.py, ambient.py, recording.py, walk.py's chains).

Each test attacks one assumption a key could make: that code is library code because of where it lives,
that a version attribute identifies code, that a value the walk did not follow was not read, that library
code reads nothing the key misses. In this process (fast); the hunt (test_trace_hunt.py) runs whole
programs in fresh processes.
"""

from __future__ import annotations

import enum
import importlib
import json
import os
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

from tests.helpers import ROOT, run_python


def _walk(fn):
    from graphcache.traces.walk import Walk

    walk = Walk()
    walk.function(fn, "")
    return walk


def _digest(fn) -> str:
    return _walk(fn).digest()


def _reason(fn) -> str:
    from graphcache.traces.walk import Uncacheable

    with pytest.raises(Uncacheable) as caught:
        _walk(fn)
    return caught.value.reason


# -- trust: an allowlist, not a location ------------------------------------------------------------------------
def _fresh_trust():
    from graphcache.traces import trust

    trust.trust_of.cache_clear()
    trust.identity.cache_clear()
    trust._dist_info.cache_clear()
    trust.defines.cache_clear()
    return trust


def test_tensorflow_keras_numpy_and_the_standard_library_are_trusted_by_identity():
    import keras
    import tensorflow as tf

    trust = _fresh_trust()
    assert trust.trust_of(tf.nn.relu.__module__).identity == "tensorflow"
    assert trust.trust_of(keras.layers.Dense.__module__).identity == "keras"
    assert trust.trust_of("numpy").identity == "numpy"
    assert trust.trust_of("json").identity == trust.STDLIB and trust.trust_of("builtins").identity == trust.STDLIB
    assert trust.trust_of("__main__") is None
    tf_identity = trust.identity("tensorflow")
    assert tf_identity.startswith(f"tensorflow-{tf.version.VERSION}|") and len(tf_identity.split("|")[1]) == 32


def _install_fake_distribution(site, name: str, version: str, source: str) -> None:
    """A package as ``pip install .`` leaves it: the package folder and a dist-info with METADATA and RECORD."""
    package = site / name
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(source)
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text(f"{name}/__init__.py,sha256={abs(hash(source))},{len(source)}\n")


def test_user_code_in_site_packages_or_a_namespace_package_is_walked_not_named(tmp_path, monkeypatch):
    site = tmp_path / "site-packages"
    _install_fake_distribution(site, "gc_userpkg", "1.0", "SCALE = 2.0\ndef scale(x):\n    return x * SCALE\n")
    project = tmp_path / "project" / "helpers"  # no __init__.py: an implicit namespace package
    project.mkdir(parents=True)
    (project / "consts.py").write_text("OFFSET = 1.0\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(tmp_path / "project"))
    trust = _fresh_trust()
    userpkg = importlib.import_module("gc_userpkg")
    consts = importlib.import_module("helpers.consts")
    try:
        assert trust.trust_of("gc_userpkg") is None and trust.trust_of("helpers.consts") is None
        assert sys.modules["helpers"].__file__ is None  # what made the old key call it a library

        def traced(x):
            return userpkg.scale(x) + consts.OFFSET

        before = _digest(traced)
        userpkg.SCALE = 3.0  # read by the installed package's function: walked, so keyed
        assert _digest(traced) != before
        userpkg.SCALE = 2.0
        assert _digest(traced) == before
        consts.OFFSET = 5.0  # a constant of a namespace package's module
        assert _digest(traced) != before
    finally:
        for name in ("gc_userpkg", "helpers", "helpers.consts"):
            sys.modules.pop(name, None)
        _fresh_trust()


def test_the_versions_part_holds_the_interpreters_optimize_level(monkeypatch):
    """-O compiles the trusted libraries' asserts and ``if __debug__:`` blocks out, whatever their files say."""
    from graphcache.traces import keying
    from graphcache.traces.walk import Walk

    walk = Walk()
    walk.packages.add("tensorflow")
    plain = keying.versions_part(walk)
    assert keying.versions_part(walk) == plain
    optimized = types.SimpleNamespace(version=sys.version, implementation=sys.implementation,
                                      flags=types.SimpleNamespace(optimize=sys.flags.optimize + 1))
    monkeypatch.setattr(keying, "sys", optimized)
    assert keying.versions_part(walk) != plain


def test_an_attribute_the_program_sets_on_a_trusted_module_is_keyed_by_its_value(monkeypatch):
    """tf.nn.relu replaced: library code that calls it traces another graph (libwrites.py)."""
    import tensorflow as tf

    from graphcache import runtime
    from graphcache.traces import libwrites
    from graphcache.traces.walk import Uncacheable, Walk

    libwrites.install()
    api = tf.nn  # the module Keras' TensorFlow backend reads relu from when it traces a relu layer
    monkeypatch.setattr(runtime.state, "library_writes", set())

    def digest() -> str:
        walk = Walk()
        libwrites.key(walk)
        return walk.digest()

    untouched = digest()
    original = api.relu
    monkeypatch.setattr(api, "relu", lambda features, name=None: original(features, name) * 2.0)
    doubled = digest()
    assert (api.__name__, "relu") in runtime.state.library_writes  # noted by the key that saw the write
    assert doubled != untouched
    monkeypatch.setattr(api, "relu", lambda features, name=None: original(features, name) * 3.0)
    assert digest() not in (doubled, untouched)  # keyed by its code
    monkeypatch.setattr(api, "relu", original)  # the library's own again: nothing keyed
    assert digest() == untouched
    monkeypatch.setattr(api, "relu", object())  # a value the walk cannot key: the trace is refused
    with pytest.raises(Uncacheable):
        digest()


def test_a_trusted_name_loaded_from_elsewhere_is_not_trusted(monkeypatch):
    importlib.import_module("gast")  # the real one first: trust is judged for what this process loaded
    trust = _fresh_trust()
    fake = types.ModuleType("gast")
    fake.__file__ = "/somewhere/else/gast/__init__.py"  # a project folder that shadows a trusted package
    monkeypatch.setitem(sys.modules, "gast", fake)
    assert trust.trust_of("gast") is None
    monkeypatch.undo()
    assert _fresh_trust().trust_of("gast") is not None


def test_a_trusted_distributions_identity_is_its_record_not_its_version(tmp_path, monkeypatch):
    site = tmp_path / "site-packages"
    _install_fake_distribution(site, "gc_rebuilt", "1.0", "X = 1\n")
    monkeypatch.syspath_prepend(str(site))
    trust = _fresh_trust()
    first = trust.identity("gc_rebuilt")
    (site / "gc_rebuilt-1.0.dist-info" / "RECORD").write_text("gc_rebuilt/__init__.py,sha256=other,6\n")
    trust.identity.cache_clear()
    assert trust.identity("gc_rebuilt") != first  # a same-version rebuild is another identity
    assert first.startswith("gc_rebuilt-1.0|")


# -- the walk follows what code reads -----------------------------------------------------------------------------
class _Mode(enum.Enum):
    DOUBLE = 2.0
    TRIPLE = 3.0

    def factor(self):
        return self.value


def test_attribute_chains_function_attributes_and_enum_values_are_keyed():
    def helper(x):
        return x * helper.scale

    helper.scale = 2.0

    def traced(x):
        return helper(x) * _Mode.DOUBLE.factor()

    before = _digest(traced)
    helper.scale = 3.0
    assert _digest(traced) != before
    helper.scale = 2.0
    assert _digest(traced) == before

    member = _Mode.DOUBLE
    by_member = _digest(lambda x: x * member.value)
    assert _digest(lambda x: x * _Mode.TRIPLE.value) != _digest(lambda x: x * _Mode.DOUBLE.value)
    assert by_member == _digest(lambda x: x * member.value)


def test_an_object_read_through_attributes_is_keyed_by_them_and_refused_when_handed_on():
    from absl import flags

    values = flags.FlagValues()
    flags.DEFINE_float("gc_scale", 1.0, "a scale", flag_values=values)
    values(["prog", "--gc_scale=2.5"])

    def traced(x):
        return x * values.gc_scale

    before = _digest(traced)
    values.gc_scale = 4.0
    assert _digest(traced) != before
    assert _reason(lambda x: x * values.get_flag_value("gc_scale", 1.0)) == "value"  # a method of library state
    assert _reason(lambda x: (values, x)[1]) == "value"


def test_writing_an_attribute_of_what_the_code_reads_is_refused():
    module = types.ModuleType("gc_settings_module")
    module.count = 0

    def assigns(x):
        module.count = 1
        return x

    def increments(x):
        module.count += 1
        return x

    assert _reason(assigns) == "writes_state"
    assert _reason(increments) == "writes_state"


def test_trusted_functions_that_read_files_are_refused():
    import tensorflow as tf

    assert _reason(lambda x: x + np.load("/nonexistent.npy")) == "value"
    assert _reason(lambda x: x + np.loadtxt("/nonexistent.txt")) == "value"
    assert _reason(lambda x: tf.io.gfile.GFile("/nonexistent").read()) == "value"
    assert _reason(lambda x: x + np.random.rand()) == "value"
    assert _digest(lambda x: tf.nn.relu(x) + np.float32(1.0))  # the rest of NumPy and TensorFlow: named


def test_building_a_set_is_keyed_by_a_fixed_hash_seed_and_refused_under_a_random_one(monkeypatch):
    import tensorflow as tf

    from graphcache.traces import keying
    from graphcache.traces.walk import Uncacheable

    def traced(x):
        return tf.concat([x * len(name) for name in set(["a", "bb", "ccc"])], 0)

    walk = _walk(traced)
    assert walk.hash_order == "the function"
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    with pytest.raises(Uncacheable) as caught:
        keying.settings_values(walk)
    assert caught.value.reason == "hash_order" and "PYTHONHASHSEED" in caught.value.detail
    monkeypatch.setenv("PYTHONHASHSEED", "1")
    one = keying.settings_values(walk)
    monkeypatch.setenv("PYTHONHASHSEED", "2")
    two = keying.settings_values(walk)
    assert (one["python.hash_seed"], two["python.hash_seed"]) == (1, 2) and one != two
    assert _walk(lambda x: x if "a" in {"a", "b"} else -x).hash_order is None  # membership only: order unread
    assert _walk(lambda x: sum(x for _ in [1])).hash_order is None


# -- one snapshot of the trusted libraries' settings -------------------------------------------------------------
def _settings_changes():
    """Per ambient.SETTINGS name: a function that changes the setting and returns one that restores it."""
    import keras
    import tensorflow as tf
    from tensorflow.python.eager import context
    from tensorflow.python.framework import config, ops
    from tensorflow.python.ops.numpy_ops import np_dtypes

    def keras_setting(setter, getter, value):
        def change():
            old = getter()
            setter(value)
            return lambda: setter(old)
        return change

    def flash_attention():  # None (Keras decides per call) by default, which no public setter restores
        from keras.src.backend.common import global_state

        old = keras.config.is_flash_attention_enabled()
        keras.config.disable_flash_attention()
        return lambda: global_state.set_global_attribute("flash_attention", old)

    def numpy_behavior():
        old = (ops.is_numpy_style_type_promotion(), np_dtypes.is_prefer_float32(), ops.get_dtype_conversion_mode())
        ops.set_dtype_conversion_mode("safe")
        return lambda: (ops.set_dtype_conversion_mode(ops.promo_mode_enum_to_string(old[2])),
                        np_dtypes.set_prefer_float32(old[1]))

    def determinism():
        config.enable_op_determinism()
        return config.disable_op_determinism

    def callbacks():
        tf.debugging.enable_check_numerics()
        return tf.debugging.disable_check_numerics

    def seed():
        old = context.global_seed()
        tf.random.set_seed((old or 0) + 1234)  # another seed than the one an earlier test may have set
        return lambda: context.set_global_seed(old)

    def eagerly():
        tf.config.run_functions_eagerly(True)
        return lambda: tf.config.run_functions_eagerly(False)

    def jit():
        old = config.get_optimizer_jit()
        config.set_optimizer_jit("autoclustering")
        return lambda: config.set_optimizer_jit(old or False)

    def optimizer_options():
        old = config.get_optimizer_experimental_options()
        config.set_optimizer_experimental_options({"constant_folding": False})
        return lambda: (config.set_optimizer_experimental_options({"constant_folding": True}),
                        context.context().__setattr__("_optimizer_experimental_options", dict(old)))

    def device_policy():
        old = config.get_device_policy()
        config.set_device_policy("warn")
        return lambda: config.set_device_policy(old)

    def soft_placement():
        config.set_soft_device_placement(False)
        return lambda: config.set_soft_device_placement(True)

    def tf32():
        config.enable_tensor_float_32_execution(False)
        return lambda: config.enable_tensor_float_32_execution(True)

    def numpy_state():
        old = np.seterr(divide="raise")
        return lambda: np.seterr(**old)

    def compat_v1():
        tf.compat.v1.disable_tensor_equality()  # `x == y` of tensors compares identities while traced
        return tf.compat.v1.enable_tensor_equality

    return {
        "keras.floatx": keras_setting(keras.config.set_floatx, keras.config.floatx, "float16"),
        "keras.epsilon": keras_setting(keras.config.set_epsilon, keras.config.epsilon, 1e-3),
        "keras.image_data_format": keras_setting(keras.config.set_image_data_format, keras.config.image_data_format,
                                                 "channels_first"),
        "keras.dtype_policy": keras_setting(keras.config.set_dtype_policy, keras.config.dtype_policy,
                                            "mixed_float16"),
        "keras.flash_attention": flash_attention,
        "tf.numpy_behavior": numpy_behavior,
        "tf.op_determinism": determinism,
        "tf.op_callbacks": callbacks,
        "tf.global_seed": seed,
        "tf.run_functions_eagerly": eagerly,
        "tf.optimizer_jit": jit,
        "tf.optimizer_options": optimizer_options,
        "tf.device_policy": device_policy,
        "tf.soft_device_placement": soft_placement,
        "tf.tensor_float_32": tf32,
        "tf.compat_v1": compat_v1,
        "numpy.state": numpy_state,
    }


# Settings a test cannot change in a process that has started TensorFlow: why each is covered another way.
UNCHANGEABLE_HERE = {
    "keras.backend": "fixed when Keras is imported (KERAS_BACKEND); a change is a new process with another backend",
    "keras.nnx": "a JAX-backend switch, fixed at import",
    "tf.logical_devices": "fixed once TensorFlow's context is initialized (tf.config.set_logical_device_configuration)",
}


def test_every_setting_of_the_snapshot_is_tested():
    from graphcache.traces import ambient

    names = {setting.name for setting in ambient.SETTINGS}
    assert set(CHANGEABLE) == set(_settings_changes())
    assert names == set(CHANGEABLE) | set(UNCHANGEABLE_HERE)


CHANGEABLE = ("keras.floatx", "keras.epsilon", "keras.image_data_format", "keras.dtype_policy", "keras.flash_attention",
              "tf.numpy_behavior", "tf.op_determinism", "tf.op_callbacks", "tf.global_seed", "tf.run_functions_eagerly",
              "tf.optimizer_jit", "tf.optimizer_options", "tf.device_policy", "tf.soft_device_placement",
              "tf.tensor_float_32", "tf.compat_v1", "numpy.state")


@pytest.mark.parametrize("name", CHANGEABLE)
def test_each_setting_changes_the_settings_part(name):
    from graphcache.traces import ambient

    before = ambient.snapshot()
    restore = _settings_changes()[name]()
    try:
        after = ambient.snapshot()
    finally:
        restore()
    assert after[name] != before[name]
    assert {key: value for key, value in after.items() if key != name} == \
        {key: value for key, value in before.items() if key != name}
    assert ambient.snapshot() == before


def test_an_op_callback_of_user_code_refuses_the_trace():
    from tensorflow.python.eager import context

    from graphcache.traces import ambient
    from graphcache.traces.walk import Uncacheable

    def callback(op_type, inputs, attrs, outputs, op_name=None, graph=None):
        return outputs

    context.context().add_op_callback(callback)
    try:
        with pytest.raises(Uncacheable) as caught:
            ambient.snapshot()
        assert caught.value.reason == "context" and "callback" in caught.value.detail
    finally:
        context.context().remove_op_callback(callback)


# -- what a trace did, recorded -----------------------------------------------------------------------------------
def test_the_recording_sees_files_environment_and_imports_the_walk_cannot(tmp_path, monkeypatch):
    from graphcache.traces import recording

    data = tmp_path / "scale.npy"
    np.save(data, np.float32(2.0))
    monkeypatch.setenv("GC_SECRET_SCALE", "3")
    loader = getattr(np, "lo" + "ad")  # reached by a path no static walk follows
    with recording.record() as record:
        loader(data)
        os.environ.get("GC_SECRET_SCALE")
        os.environ.get("AUTOGRAPH_VERBOSITY")  # TensorFlow's own, changes no graph
    problems = record.problems()
    assert any(str(data) in problem for problem in problems), problems
    assert any("GC_SECRET_SCALE" in problem for problem in problems)
    assert not any("AUTOGRAPH_VERBOSITY" in problem for problem in problems)
    with recording.record() as quiet:
        json.dumps({"a": 1})
    assert quiet.problems() == []
    os.environ.get("GC_SECRET_SCALE")  # outside a record: nobody notes it
    assert quiet.problems() == [] and isinstance(os.environ, os._Environ)
    for read in (lambda: os.environb[b"GC_SECRET_SCALE"], lambda: len(os.environ), lambda: repr(os.environb)):
        with recording.record() as other:
            read()
        assert any("environment" in problem for problem in other.problems()), other.problems()


HIDDEN_READ_CHILD = '''
import json, os
import numpy as np
import tensorflow as tf
import graphcache
cache = graphcache.GraphCache({cache_dir!r}, traces=True)
np.save({data!r}, np.float32({scale}))

@tf.function
def f(x):
    return x * getattr(np, "lo" + "ad")({data!r})  # a name computed while tracing: no static walk follows it

value = float(f(tf.constant(1.0)).numpy())
cache.wait_for_writes()
stats = cache.stats()
print(json.dumps({{"value": value, "hits": stats.traces["trace_hits"], "reasons": dict(stats.trace_reasons)}}))
'''


def test_a_trace_that_read_a_file_by_a_hidden_path_is_not_stored(cache_dir, tmp_path):
    data = str(tmp_path / "scale.npy")
    first = run_python(HIDDEN_READ_CHILD.format(cache_dir=str(cache_dir), data=data, scale=2.0))
    second = run_python(HIDDEN_READ_CHILD.format(cache_dir=str(cache_dir), data=data, scale=3.0))
    assert (first["value"], second["value"]) == (2.0, 3.0)  # plain TensorFlow's, not the first process's
    assert second["hits"] == 0 and second["reasons"].get("recorded", 0) >= 2


PLAIN_HIT_CHILD = '''
import json
import tensorflow as tf
import graphcache
cache = graphcache.GraphCache({cache_dir!r}, traces=True)
w = tf.Variable([1.0, 2.0])

def make(scale):
    def inner(x):
        return tf.nn.relu(x * w) * scale
    return inner

inner = make({scale})

@tf.function
def f(x):
    return tf.reduce_sum(inner(x)) + len(str(tf.float32))

value = float(f(tf.constant([1.0, -1.0])).numpy())
cache.wait_for_writes()
stats = cache.stats()
print(json.dumps({{"value": value, "hits": stats.traces["trace_hits"], "reasons": dict(stats.trace_reasons)}}))
'''


def test_an_unchanged_function_over_globals_and_closures_still_hits_and_a_changed_one_does_not(cache_dir):
    cold = run_python(PLAIN_HIT_CHILD.format(cache_dir=str(cache_dir), scale=2.0))
    warm = run_python(PLAIN_HIT_CHILD.format(cache_dir=str(cache_dir), scale=2.0))
    changed = run_python(PLAIN_HIT_CHILD.format(cache_dir=str(cache_dir), scale=3.0))
    assert cold["hits"] == 0 and warm["hits"] == 1 and warm["value"] == cold["value"], (cold, warm)
    assert changed["hits"] == 1 and changed["value"] != cold["value"]  # the counters are the dir's: no new hit
    assert not warm["reasons"], warm
    listed = subprocess.run([sys.executable, "-m", "graphcache", "--cache-dir", str(cache_dir), "misses", "--json"],
                            capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    [miss] = [miss for miss in json.loads(listed.stdout) if miss["nearest"]]
    assert miss["differs"] == ["code"] and "g:inner/c:scale 2.0 -> 3.0" in miss["detail"], miss  # the read, named


def test_the_modules_state_every_assumption_they_trust():
    from graphcache.traces import ambient, recording, trust

    for prefix, (distribution, why) in trust.TRUSTED.items():
        assert distribution and why, prefix
    assert all(setting.why for setting in ambient.SETTINGS)
    assert all(recording.ALLOWED_ENV.values())
    assert "never by location" in textwrap.dedent(trust.__doc__)


def test_library_layers_keep_their_config_while_traced():
    """trust.LIBRARY_STEPS_KEEP_CONFIGS: Keras' own layers' configs are the same after predict, fit and evaluate
    traced their steps (the walk after a miss's trace reuses them)."""
    import keras

    inputs = keras.Input((8, 8, 3))
    norm = keras.layers.Normalization()
    norm.adapt(np.random.RandomState(0).rand(4, 8, 8, 3).astype("float32"))
    x = keras.layers.Conv2D(4, 3, activation="relu")(norm(inputs))
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.Dropout(0.5)(keras.layers.GlobalAveragePooling2D()(x))
    inner = keras.Sequential([keras.layers.Dense(4, activation="gelu"), keras.layers.LayerNormalization()])
    model = keras.Model(inputs, keras.layers.Dense(2)(inner(x)))
    layers = model._flatten_layers(include_self=True, recursive=True)

    def configs() -> list[str]:
        return [repr((layer.get_config(), layer.get_build_config())) for layer in layers]

    before = configs()
    data = np.random.RandomState(1).rand(4, 8, 8, 3).astype("float32")
    model.predict(data, verbose=0)
    model.compile(optimizer="adam", loss="mse", metrics=["mae"])
    model.fit(data, np.zeros((4, 2), "float32"), epochs=1, verbose=0)
    model.evaluate(data, np.zeros((4, 2), "float32"), verbose=0)
    assert configs() == before


def test_the_walk_after_a_trace_reuses_library_layer_configs_only():
    import keras

    from graphcache.traces import kerasstep
    from graphcache.traces.walk import Walk

    class Scaled(keras.layers.Layer):
        def __init__(self, scale=2.0, **kwargs):
            super().__init__(**kwargs)
            self.scale = scale

        def get_config(self):
            return {**super().get_config(), "scale": self.scale}

        def call(self, x):
            return x * self.scale

    inputs = keras.Input((3,))
    model = keras.Sequential([inputs, keras.layers.Dense(2), Scaled()])

    def digest(reuse=None) -> tuple[str, dict]:
        walk = Walk(reuse_configs=reuse)
        kerasstep.walk_model(walk, model, kerasstep.model_objects(model))
        return walk.digest(), walk.configs

    fresh, configs = digest()
    paths = {type(layer).__name__: f"layer{index}"
             for index, layer in enumerate(model._flatten_layers(include_self=True, recursive=True))}
    assert digest({**configs, paths["Scaled"]: "not the config"})[0] == fresh  # a user layer's: taken again
    assert digest({**configs, paths["Sequential"]: "not the config"})[0] != fresh  # a library model's: reused


def test_a_keras_layer_reading_an_attribute_of_its_sublayer_keys_that_attribute():
    import keras

    from graphcache.traces import kerasstep

    class Inner(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.k = 2.0  # not in its config: only the outer layer's read can key it

        def call(self, x):
            return x

    class Outer(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.inner = Inner()

        def call(self, x):
            return self.inner(x) * self.inner.k

    inputs = keras.Input((3,))
    model = keras.Model(inputs, Outer()(inputs))

    def digest() -> str:
        from graphcache.traces.walk import Walk

        walk = Walk()
        kerasstep.walk_model(walk, model, kerasstep.model_objects(model))
        return walk.digest()

    before = digest()
    model.layers[1].inner.k = 3.0
    assert digest() != before
    model.layers[1].inner.k = 2.0
    assert digest() == before


class _Factory:
    SCALE = 2.0

    @classmethod
    def scaled(cls, x):
        return x * cls.SCALE


def test_a_class_method_read_off_its_class_is_walked_with_the_class():
    import tensorflow as tf

    before = _digest(lambda x: _Factory.scaled(x) + tf.TensorSpec.from_tensor(x).shape.rank)
    _Factory.SCALE = 3.0
    try:
        assert _digest(lambda x: _Factory.scaled(x) + tf.TensorSpec.from_tensor(x).shape.rank) != before
    finally:
        _Factory.SCALE = 2.0


def test_a_replaced_builtin_a_numpy_subclass_and_a_variables_name_are_keyed():
    import builtins

    import tensorflow as tf

    original = builtins.abs
    plain = _digest(lambda x: abs(x))
    builtins.abs = lambda value: original(value) * 2.0
    try:
        assert _digest(lambda x: abs(x)) != plain  # the replacement is walked as the code it is
    finally:
        builtins.abs = original
    masked = np.ma.array([2.0, 3.0], mask=[0, 1])
    assert _reason(lambda x: x * float(masked.sum())) == "value"  # its bytes are not all it holds
    first, second = tf.Variable(1.0, name="first"), tf.Variable(1.0, name="second")
    assert _digest(lambda x: x * first) != _digest(lambda x: x * second)  # code may branch on a variable's name


def test_code_named_after_a_trusted_module_but_made_elsewhere_is_walked():
    """A ``__module__`` is a name: a class made by calling ``abc.ABCMeta(...)`` here is named ``abc``'s, and
    ``exec`` with a borrowed ``__name__`` names a library; neither is the library's code (trust.defines)."""
    import abc

    import keras

    from graphcache.traces import trust
    from graphcache.traces.walk import Walk

    def scale(self, x):
        return x * 2.0

    made_here = abc.ABCMeta("MadeHere", (), {"scale": scale})
    assert made_here.__module__ == "abc" and not trust.class_defines(made_here)
    namespace = {"__name__": "keras"}
    exec("def triple(x):\n    return x * 3\n", namespace)
    assert not trust.defines("keras", namespace["triple"].__code__.co_filename)
    assert trust.class_defines(keras.layers.Dense) and trust.class_defines(abc.ABC)
    # The standard library's frozen modules (code named "<frozen _collections_abc>", "<frozen posixpath>") are its own
    import collections.abc
    import os

    assert trust.class_defines(collections.abc.Mapping) and trust.defines("posixpath", os.path.join.__code__.co_filename)

    def digest(value) -> str:
        walk = Walk()
        walk.value(value, "v")
        return walk.digest()

    from graphcache.traces.walk import Uncacheable

    with pytest.raises(Uncacheable):  # walked as user code (its ABC bookkeeping is no plain value), not named
        digest(made_here)
    exec("def triple(x):\n    return x * 4\n", namespace_other := {"__name__": "keras"})
    assert digest(namespace["triple"]) != digest(namespace_other["triple"])
