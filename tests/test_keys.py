"""Keys: stable across processes and histories; every semantic change changes them."""

from __future__ import annotations

import re

import pytest
import tensorflow as tf
from tensorflow.core.framework import graph_pb2

import graphcache
from graphcache import keys
from graphcache.graphs import GraphView, Signature

from .helpers import CONTROL_FLOW_MODEL, NOISY_HISTORY, run_python

KEY_OF_CONTROL_FLOW_MODEL = CONTROL_FLOW_MODEL + '''
gd, feeds, fetches = build_control_flow_graph()
import json, graphcache
names = sorted(f.signature.name for f in gd.library.function)
print(json.dumps({"key": graphcache.fingerprint(gd, fetches, feeds), "functions": names}))
'''


def test_key_is_32_lowercase_hex(mlp):
    key = graphcache.fingerprint(mlp.graph_def, mlp.fetches, mlp.feeds)
    assert re.fullmatch(r"[0-9a-f]{32}", key)


def test_key_equals_compile_key(mlp, cache):
    assert cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds).key == graphcache.fingerprint(
        mlp.graph_def, mlp.fetches, mlp.feeds)


def test_key_stable_across_processes_with_different_history():
    fresh = run_python(KEY_OF_CONTROL_FLOW_MODEL)
    noisy = run_python(NOISY_HISTORY + KEY_OF_CONTROL_FLOW_MODEL)
    # the premise: tracing history really changed the GraphDef (function names carry counters)...
    assert fresh["functions"] != noisy["functions"]
    # ...and the key did not change
    assert fresh["key"] == noisy["key"]


def test_key_ignores_node_order_leftovers_and_debug_info(mlp):
    base = graphcache.fingerprint(mlp.graph_def, mlp.fetches, mlp.feeds)
    shuffled = graph_pb2.GraphDef()
    shuffled.CopyFrom(mlp.graph_def)
    nodes = list(shuffled.node)
    del shuffled.node[:]
    shuffled.node.extend(reversed(nodes))
    leftover = shuffled.node.add(name="unused_leftover", op="Const")
    leftover.attr["dtype"].type = 1
    leftover.attr["value"].tensor.dtype = 1
    leftover.attr["value"].tensor.float_val.append(3.0)
    shuffled.node[0].experimental_debug_info.original_node_names.append("somewhere/else")
    shuffled.node[1].attr["_output_shapes"].list.shape.add()
    assert graphcache.fingerprint(shuffled, mlp.fetches, mlp.feeds) == base


def _mutated(graph_def, mutate):
    copy = graph_pb2.GraphDef()
    copy.CopyFrom(graph_def)
    mutate(copy)
    return copy


def _first(graph_def, op):
    return next(n for n in graph_def.node if n.op == op)


def _change_weight(gd):
    node = max((n for n in gd.node if n.op == "Const"), key=lambda n: len(n.attr["value"].tensor.tensor_content))
    content = bytearray(node.attr["value"].tensor.tensor_content)
    content[-1] ^= 1
    node.attr["value"].tensor.tensor_content = bytes(content)


def _change_attr(gd):
    _first(gd, "MatMul").attr["transpose_a"].b = False
    _first(gd, "MatMul").attr["transpose_b"].b = True


def _add_node(gd):
    relu = _first(gd, "Relu")
    extra = gd.node.add(name="extra_identity", op="Identity", input=list(relu.input))
    extra.attr["T"].CopyFrom(relu.attr["T"])
    relu.input[0] = "extra_identity"


def _add_kept_internal_attr(gd):
    _first(gd, "MatMul").attr["_XlaMustCompile"].b = True


def _change_device(gd):
    _first(gd, "MatMul").device = "/device:CPU:0"


@pytest.mark.parametrize("mutate", [_change_weight, _change_attr, _add_node, _add_kept_internal_attr,
                                    _change_device])
def test_semantic_graph_changes_change_the_key(mlp, mutate):
    base = graphcache.fingerprint(mlp.graph_def, mlp.fetches, mlp.feeds)
    assert graphcache.fingerprint(_mutated(mlp.graph_def, mutate), mlp.fetches, mlp.feeds) != base


def test_signature_options_and_identity_change_the_key(mlp):
    gd, fetches, feeds = mlp.graph_def, mlp.fetches, mlp.feeds
    base = graphcache.fingerprint(gd, fetches, feeds)
    hidden = next(n.name for n in gd.node if n.op == "Relu") + ":0"
    config = tf.compat.v1.ConfigProto()
    config.graph_options.rewrite_options.constant_folding = 2  # OFF
    variants = {
        "fetches": graphcache.fingerprint(gd, [*fetches, hidden], feeds),
        "feeds": graphcache.fingerprint(gd, fetches, [*feeds, hidden]),
        "targets": graphcache.fingerprint(gd, fetches, feeds, targets=[hidden.split(":")[0]]),
        "options": graphcache.fingerprint(gd, fetches, feeds, options=config),
        "identity": graphcache.fingerprint(gd, fetches, feeds, identity_salt="other"),
    }
    assert base not in variants.values()
    assert len(set(variants.values())) == len(variants)


def test_fetch_order_and_spelling_do_not_change_the_key(mlp):
    name = mlp.fetches[0]
    assert graphcache.fingerprint(mlp.graph_def, [name], mlp.feeds) == graphcache.fingerprint(
        mlp.graph_def, name.split(":")[0], [mlp.feeds[0].split(":")[0]])


def test_key_parts_are_logged_at_debug(mlp, caplog):
    caplog.set_level("DEBUG", logger="graphcache")
    key = graphcache.fingerprint(mlp.graph_def, mlp.fetches, mlp.feeds)
    line = next(r.getMessage() for r in caplog.records if key in r.getMessage())
    for part in keys.PART_ORDER:
        assert f"{part}=" in line


def test_canonical_function_names_are_content_derived():
    namespace: dict = {}
    exec(CONTROL_FLOW_MODEL, namespace)
    gd, feeds, fetches = namespace["build_control_flow_graph"]()
    before = GraphView(gd, Signature.create(fetches, feeds))
    key_before = keys.graph_hash(before)
    keys.canonical_function_names(gd)
    names = [f.signature.name for f in gd.library.function]
    assert names and all(name.startswith("gc_") for name in names)
    # renaming by content does not change the graph's meaning, so not its canonical hash either
    assert keys.graph_hash(GraphView(gd, Signature.create(fetches, feeds))) == key_before
