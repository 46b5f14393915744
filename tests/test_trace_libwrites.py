"""How writes to the trusted libraries' modules are seen (graphcache/traces/libwrites.py, dicttags.py).

The key's part for them is tested in test_trace_trust.py (a patched ``tf.nn.relu`` is keyed by its code) and by the
hunt (``library_module_attribute_patched``, ``library_module_dict_patched``). Here: that watching leaves the modules
plain (their attribute reads stay as fast as without graphcache), that writes made through ``__dict__`` are seen too,
that the library's assignments to its own globals are not taken for the program's, and the fallback where a dict's
version tag cannot be read.
"""

from __future__ import annotations

import sys
import textwrap
import types

from tests.helpers import run_python


def _keyed_digest():
    from graphcache.traces import libwrites
    from graphcache.traces.walk import Walk

    walk = Walk()
    libwrites.key(walk)
    return walk.digest()


def test_a_dicts_version_tag_moves_on_writes_only():
    from graphcache.traces.dicttags import tag_reader

    cell = tag_reader()
    assert cell is not None, "CPython 3.11-3.13: the tag is where dicttags.py reads it"
    entries = {"a": 1}
    tag = cell(entries)
    before = tag.value
    assert entries["a"] == 1 and "a" in entries and tag.value == before
    entries["a"] = 2
    after = tag.value
    assert after != before
    entries["b"] = 3
    assert tag.value not in (before, after)


def test_watching_leaves_the_modules_plain_and_sees_writes_through_their_dict(monkeypatch):
    import tensorflow as tf

    from graphcache import runtime
    from graphcache.traces import libwrites

    libwrites.install()
    assert type(tf.nn) is types.ModuleType  # CPython specializes attribute loads on plain modules only
    monkeypatch.setattr(runtime.state, "library_writes", set())
    untouched = _keyed_digest()
    original = tf.nn.relu
    monkeypatch.setitem(vars(tf.nn), "relu", lambda features, name=None: original(features, name) * 2.0)
    assert _keyed_digest() != untouched
    assert (tf.nn.__name__, "relu") in runtime.state.library_writes
    monkeypatch.undo()  # the library's own function again: nothing keyed
    monkeypatch.setattr(runtime.state, "library_writes", set())
    assert _keyed_digest() == untouched


def test_the_librarys_assignments_to_its_own_globals_are_not_the_programs(monkeypatch):
    """``tf.config.run_functions_eagerly`` assigns a global of its module (``global RUN_FUNCTIONS_EAGERLY``): library
    state, keyed by the settings snapshot (ambient.py), not a program's patch."""
    import tensorflow as tf
    from tensorflow.python.eager.polymorphic_function import eager_function_run

    from graphcache import runtime
    from graphcache.traces import libwrites

    libwrites.install()
    assert "RUN_FUNCTIONS_EAGERLY" in libwrites.own_globals(eager_function_run.__name__)
    monkeypatch.setattr(runtime.state, "library_writes", set())
    untouched = _keyed_digest()
    tf.config.run_functions_eagerly(True)
    try:
        assert _keyed_digest() == untouched
        assert not {write for write in runtime.state.library_writes if write[1] == "RUN_FUNCTIONS_EAGERLY"}
    finally:
        tf.config.run_functions_eagerly(False)


def test_own_globals_reads_every_global_assignment_beyond_the_first_256_names(tmp_path, monkeypatch):
    """A module with more than 256 names: its ``global`` assignment's name index takes an EXTENDED_ARG prefix."""
    from graphcache.traces import libwrites

    filler = "\n".join(f"name{number} = {number}" for number in range(300))
    total = " + ".join(f"name{number}" for number in range(299))  # the function's first 299 names
    (tmp_path / "manynames.py").write_text(filler + textwrap.dedent(f"""
        def set_last(value):
            global last_set, name299
            last_set = value + {total}
            del name299
        class Holder:
            def reset(self):
                global holder_state
                holder_state = None
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import manynames  # noqa: F401

    try:
        assert libwrites.own_globals("manynames") == {"last_set", "name299", "holder_state"}
    finally:
        sys.modules.pop("manynames", None)


def test_where_tags_cannot_be_read_the_modules_note_their_writes_themselves():
    code = textwrap.dedent("""
        import types
        import tensorflow as tf
        from graphcache import runtime
        from graphcache.traces import dicttags, libwrites
        from graphcache.traces.walk import Walk
        libwrites.tag_reader = lambda: None  # an interpreter whose dict layout dicttags.py does not know
        libwrites.install()
        assert type(tf.nn) is not types.ModuleType and runtime.state.library_watch is None
        tf.nn.relu = lambda features, name=None: features
        assert (tf.nn.__name__, "relu") in runtime.state.library_writes
        walk = Walk()
        libwrites.key(walk)
        print('{"keyed": %d}' % len(walk.guards))
    """)
    assert run_python(code)["keyed"] >= 1


def test_a_module_loaded_after_watching_began_is_watched_from_the_next_key(monkeypatch):
    from graphcache import runtime
    from graphcache.traces import libwrites

    libwrites.install()
    name = "tensorflow.graphcache_test_late_module"
    late = types.ModuleType(name)
    late.SCALE = 1.0
    monkeypatch.setitem(sys.modules, name, late)
    monkeypatch.setattr(runtime.state, "library_writes", set())
    untouched = _keyed_digest()  # (this key starts watching it)
    late.SCALE = 2.0
    assert _keyed_digest() != untouched
    assert (name, "SCALE") in runtime.state.library_writes
