"""Keys: stable across processes and histories; every semantic change changes them."""

from __future__ import annotations

import contextlib
import re

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import graph_pb2

import graphcache
from graphcache.compile import keys
from graphcache.compile.graphs import GraphView, Signature

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


# -- canonical form: structure, not names ----------------------------------------------------------------------
v1 = tf.compat.v1
SMALL_FEEDS, SMALL_FETCHES = ["x:0", "y:0"], ["out:0", "aux:0"]


def _small_graph() -> graph_pb2.GraphDef:
    """x - y -> matmul (small constant) -> relu -> matmul (large constant) = out; relu * 2 = aux.

    Only the contract is named (x, y, out, aux); every other name is TensorFlow's own.
    """
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [2, 3], name="x")
        y = v1.placeholder(tf.float32, [2, 3], name="y")
        small = tf.constant(np.arange(12, dtype=np.float32).reshape(3, 4))
        large = tf.constant(np.random.RandomState(0).rand(4, 300).astype(np.float32))  # > keys.LARGE_TENSOR
        hidden = tf.nn.relu(tf.matmul(tf.subtract(x, y), small))
        tf.identity(tf.matmul(hidden, large), name="out")
        tf.identity(hidden * 2.0, name="aux")
    return graph.as_graph_def()


def _renamed(graph_def: graph_pb2.GraphDef, mapping: dict[str, str]) -> graph_pb2.GraphDef:
    """The graph with nodes renamed everywhere they are referenced (inputs, colocation)."""
    copy = graph_pb2.GraphDef()
    copy.CopyFrom(graph_def)
    for node in copy.node:
        node.name = mapping.get(node.name, node.name)
        for i, text in enumerate(node.input):
            control = text.startswith("^")
            name, sep, port = text.lstrip("^").partition(":")
            node.input[i] = ("^" if control else "") + mapping.get(name, name) + sep + port
        if "_class" in node.attr:
            values = [s.decode() for s in node.attr["_class"].list.s]
            del node.attr["_class"].list.s[:]
            node.attr["_class"].list.s.extend(
                ("loc:@" + mapping.get(v[5:], v[5:])).encode() if v.startswith("loc:@") else v.encode()
                for v in values)
    return copy


def _internal_names(graph_def, keep=("x", "y", "out", "aux")) -> dict[str, str]:
    return {n.name: f"scope_{i}_7/renamed" for i, n in enumerate(graph_def.node) if n.name not in keep}


def _node(gd, op, index=0):
    return [n for n in gd.node if n.op == op][index]


def _small_key(gd, feeds=SMALL_FEEDS, fetches=SMALL_FETCHES):
    return graphcache.fingerprint(gd, fetches, feeds)


def test_internal_renames_do_not_change_the_key():
    gd = _small_graph()
    renamed = _renamed(gd, _internal_names(gd))
    assert {n.name for n in renamed.node} & {n.name for n in gd.node} == {"x", "y", "out", "aux"}
    assert _small_key(renamed) == _small_key(gd)


def _swap_sub_inputs(gd):
    sub = _node(gd, "Sub")
    sub.input[0], sub.input[1] = sub.input[1], sub.input[0]


def _move_edge(gd):
    _node(gd, "Sub").input[0] = "y"  # x - y  ->  y - y


def _change_attr(gd):
    _node(gd, "MatMul").attr["transpose_a"].b = True


def _change_small_constant(gd):
    const = next(n for n in gd.node if n.op == "Const" and n.attr["value"].tensor.tensor_shape.dim
                 and n.attr["value"].tensor.tensor_shape.dim[0].size == 3)
    content = bytearray(const.attr["value"].tensor.tensor_content)
    content[0] ^= 1
    const.attr["value"].tensor.tensor_content = bytes(content)


def _change_large_constant(gd):
    const = max((n for n in gd.node if n.op == "Const"), key=lambda n: len(n.attr["value"].tensor.tensor_content))
    assert len(const.attr["value"].tensor.tensor_content) > keys.LARGE_TENSOR
    content = bytearray(const.attr["value"].tensor.tensor_content)
    content[-1] ^= 1
    const.attr["value"].tensor.tensor_content = bytes(content)


def _add_control_dependency(gd):
    _node(gd, "Relu").input.append("^y")


def _change_device(gd):
    _node(gd, "Relu").device = "/device:CPU:0"


@pytest.mark.parametrize("mutate", [_swap_sub_inputs, _move_edge, _change_attr, _change_small_constant,
                                    _change_large_constant, _add_control_dependency, _change_device])
def test_structural_changes_change_the_key(mutate):
    gd = _small_graph()
    assert _small_key(_mutated(gd, mutate)) != _small_key(gd)
    # ...and the same change made to an internally renamed twin gives that twin's key, not the original
    twin = _renamed(gd, _internal_names(gd))
    assert _small_key(_mutated(twin, mutate)) == _small_key(_mutated(gd, mutate))


def test_swapping_roles_changes_the_key():
    gd = _small_graph()
    base = _small_key(gd)
    feeds_swapped = _renamed(gd, {"x": "y", "y": "x"})  # y - x: the feed lists are the same
    fetches_swapped = _renamed(gd, {"out": "aux", "aux": "out"})
    assert _small_key(feeds_swapped) != base
    assert _small_key(fetches_swapped) != base


def test_a_shared_node_and_two_identical_copies_differ():
    def build(copies: bool):
        graph = tf.Graph()
        with graph.as_default():
            x = v1.placeholder(tf.float32, [3], name="x")
            first = tf.nn.relu(x)
            second = tf.nn.relu(x) if copies else first
            tf.identity(first, name="out")
            tf.identity(second, name="aux")
        return graph.as_graph_def()

    assert _small_key(build(False), ["x:0"]) != _small_key(build(True), ["x:0"])


def test_identical_stateful_copies_wired_differently_differ():
    """Two unseeded RandomUniform nodes are identical upward; which consumers share a sample is not."""
    def build(b_shares_with_a: bool):
        graph = tf.Graph()
        with graph.as_default():
            r1 = tf.random.uniform([3])
            r2 = tf.random.uniform([3])
            tf.identity(r1 + 1.0, name="a")
            tf.identity((r1 if b_shares_with_a else r2) * 2.0, name="b")
            tf.identity(r2 - 3.0, name="c")
        return graph.as_graph_def()

    fetches = ["a:0", "b:0", "c:0"]
    one, other = build(True), build(False)
    up = [sorted(graphcache_nodes(g, fetches).values()) for g in (one, other)]
    assert up[0] == up[1]  # the premise: the same multiset of upward ids...
    assert graphcache.fingerprint(one, fetches) != graphcache.fingerprint(other, fetches)  # ...different keys


def graphcache_nodes(gd, fetches, feeds=()):
    return keys.compute(GraphView(gd, Signature.create(fetches, feeds)), None, {}).nodes


def test_dropped_gradient_op_type_and_kept_xla_attributes():
    gd = _small_graph()
    base = _small_key(gd)
    counter = _mutated(gd, lambda g: _node(g, "Relu").attr["_gradient_op_type"].__setattr__("s", b"CustomGradient-42"))
    assert _small_key(counter) == base
    for attr in ("_XlaMustCompile", "_noinline", "_lower_using_switch_merge"):
        kept = _mutated(gd, lambda g, attr=attr: _node(g, "Relu").attr[attr].__setattr__("b", True))
        assert _small_key(kept) != base, attr


def _variable_graph(*, resource: bool, name: str = "w", strip_shared_name: bool = False):
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, 2], name="x")
        w = v1.get_variable(name, initializer=np.ones((2, 2), np.float32), use_resource=resource)
        tf.identity(tf.matmul(x, w), name="out")
    gd = graph.as_graph_def()
    if strip_shared_name:  # as a SavedModel writes it: default attributes stripped
        for node in gd.node:
            if node.op == "VarHandleOp":
                del node.attr["shared_name"]
    return gd


@pytest.mark.parametrize("resource,strip", [(False, False), (True, False), (True, True)])
def test_renaming_a_variable_changes_the_key(resource, strip):
    base = _variable_graph(resource=resource, strip_shared_name=strip)
    renamed = _variable_graph(resource=resource, name="w_other", strip_shared_name=strip)
    assert graphcache.fingerprint(renamed, ["out:0"], ["x:0"]) != graphcache.fingerprint(base, ["out:0"], ["x:0"])


def test_a_resource_variable_is_its_shared_name_not_its_node_name():
    """VarHandleOp with a shared_name finds its state by that name: renaming only the node is internal."""
    gd = _variable_graph(resource=True)
    handle = _node(gd, "VarHandleOp")
    assert handle.attr["shared_name"].s == b"w"
    renamed = _renamed(gd, {"w": "w_node_only"})
    assert graphcache.fingerprint(renamed, ["out:0"], ["x:0"]) == graphcache.fingerprint(gd, ["out:0"], ["x:0"])
    other_state = _mutated(gd, lambda g: _node(g, "VarHandleOp").attr["shared_name"].__setattr__("s", b"w2"))
    assert graphcache.fingerprint(other_state, ["out:0"], ["x:0"]) != graphcache.fingerprint(gd, ["out:0"], ["x:0"])


def test_fingerprint_nodes_map_a_renamed_twin_back_to_the_original():
    gd = _small_graph()
    mapping = _internal_names(gd)
    original = keys.compute(GraphView(gd, Signature.create(SMALL_FETCHES, SMALL_FEEDS)), None, {})
    twin = keys.compute(GraphView(_renamed(gd, mapping), Signature.create(SMALL_FETCHES, SMALL_FEEDS)), None, {})
    assert set(original.nodes) == {n.name for n in gd.node}  # the whole fan-in, by the graph's own names
    for name, node_id in original.nodes.items():
        assert twin.nodes[mapping.get(name, name)] == node_id
    assert len(set(original.nodes.values())) == len(original.nodes)
    relu = next(n.name for n in gd.node if n.op == "Relu")
    detail = original.details[relu]
    assert detail.id == original.nodes[relu] and detail.op == "Relu" and set(detail.attrs) == {"T"}
    assert len(detail.inputs) == 1 and detail.inputs[0].startswith("MatMul")
    # a changed constant changes its own id and those downstream of it, nothing upstream or beside it
    changed = keys.compute(GraphView(_mutated(gd, _change_large_constant),
                                     Signature.create(SMALL_FETCHES, SMALL_FEEDS)), None, {})
    differ = {name for name in original.nodes if changed.nodes[name] != original.nodes[name]}
    assert differ == {max((n for n in gd.node if n.op == "Const"),
                          key=lambda n: len(n.attr["value"].tensor.tensor_content)).name, "MatMul_1", "out"}


# -- TF1 while loops (cycles) ----------------------------------------------------------------------------------
@contextlib.contextmanager
def _control_flow_v1():
    was_v2 = v1.control_flow_v2_enabled()
    v1.disable_control_flow_v2()
    try:
        yield
    finally:
        if was_v2:
            v1.enable_control_flow_v2()


def _loop_graph(*, loops_before: int = 0, factor: float = 2.0, swap_back_edges: bool = False):
    """A TF1 while loop carrying two floats (s1 * factor, s2 + 1), built after ``loops_before`` others."""
    graph = tf.Graph()
    with graph.as_default(), _control_flow_v1():
        for i in range(loops_before):
            v1.while_loop(lambda k: k < 2, lambda k: k + 1, [tf.constant(i)])
        x = v1.placeholder(tf.float32, [], name="x")
        _, s1, s2 = v1.while_loop(lambda i, a, b: i < 3, lambda i, a, b: (i + 1, a * factor, b + 1.0),
                                  [tf.constant(0), x, x])
        tf.identity(s1 - s2, name="out")
    gd = graph.as_graph_def()
    if swap_back_edges:  # the body's two results go back into the other loop variable
        merges = [n for n in gd.node if n.op == "Merge" and n.input[0].endswith(("Enter_1", "Enter_2"))]
        merges[0].input[1], merges[1].input[1] = merges[1].input[1], merges[0].input[1]
    return gd


def test_while_loops_keyed_by_structure_not_frame_names():
    fresh, later = _loop_graph(), _loop_graph(loops_before=3)
    frames = [{n.attr["frame_name"].s for n in g.node if n.op == "Enter"} for g in (fresh, later)]
    assert frames[0] != frames[1]  # the premise: frame names and node names carry the graph's counters
    assert graphcache.fingerprint(later, ["out:0"], ["x:0"]) == graphcache.fingerprint(fresh, ["out:0"], ["x:0"])
    base = graphcache.fingerprint(fresh, ["out:0"], ["x:0"])
    assert graphcache.fingerprint(_loop_graph(factor=3.0), ["out:0"], ["x:0"]) != base
    assert graphcache.fingerprint(_loop_graph(swap_back_edges=True), ["out:0"], ["x:0"]) != base


def test_a_cycle_that_is_not_a_while_loop_is_an_invalid_graph():
    gd = _small_graph()
    relu = _node(gd, "Relu")
    _node(gd, "Sub").input[0] = relu.name  # Sub -> MatMul -> Relu -> Sub
    with pytest.raises(graphcache.InvalidGraphError, match="cycle"):
        _small_key(gd)


# -- TF1 graphs built after other graphs ----------------------------------------------------------------------
def _regression(graph, *, names=("x", "y", "w1", "w2", "loss", "train"), resource=True, optimizer="sgd"):
    """A small TF1 regression model in ``graph`` (which may hold other models already)."""
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, 4], name=names[0])
        y = v1.placeholder(tf.float32, [None, 1], name=names[1])
        w1 = v1.get_variable(names[2], initializer=np.full((4, 8), 0.1, np.float32), use_resource=resource)
        w2 = v1.get_variable(names[3], initializer=np.full((8, 1), 0.2, np.float32), use_resource=resource)
        loss = tf.reduce_mean(tf.square(tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2) - y), name=names[4])
        opt = v1.train.GradientDescentOptimizer(0.1) if optimizer == "sgd" else v1.train.AdamOptimizer(0.1)
        opt.minimize(loss, name=names[5])
    return graph


def _regression_key(graph):
    return graphcache.fingerprint(graph, ["loss:0"], ["x:0", "y:0"], targets=["train"])


OTHER_MODEL = ("p", "q", "other_w1", "other_w2", "other_loss", "other_train")


@pytest.mark.parametrize("resource", [True, False])
def test_tf1_graph_built_after_another_model_gets_the_same_key(resource):
    alone = _regression(tf.Graph(), resource=resource)
    after = _regression(_regression(tf.Graph(), names=OTHER_MODEL, resource=resource), resource=resource)
    fan_in = [set(GraphView(g.as_graph_def(), Signature.create(["loss:0"], targets=["train"])).reachable)
              for g in (alone, after)]
    assert fan_in[0] != fan_in[1] and any(n.startswith("gradients_1/") for n in fan_in[1])  # the premise
    assert _regression_key(after) == _regression_key(alone)
    # variables are state: the same model over differently named variables is another key
    renamed = _regression(tf.Graph(), names=("x", "y", "w1", "w2_renamed", "loss", "train"), resource=resource)
    assert _regression_key(renamed) != _regression_key(alone)


def test_tf1_optimizer_state_named_by_a_counter_is_another_key():
    """Adam's non-slot variables take the graph's counter (beta1_power_1): different state, by design a miss."""
    alone = _regression(tf.Graph(), optimizer="adam")
    after = _regression(_regression(tf.Graph(), names=OTHER_MODEL, optimizer="adam"), optimizer="adam")
    assert "beta1_power_1" in {n.name for n in after.as_graph_def().node}
    assert _regression_key(after) != _regression_key(alone)


def test_entries_of_the_old_key_scheme_are_a_stale_version_and_purged(cache_dir, mlp, monkeypatch):
    """The key scheme is part of the compiler version: entries keyed the old way can never hit again."""
    from graphcache import GraphCache
    from graphcache.compile import identity

    assert identity.compiler_version()["keys"] == identity.KEY_SCHEME == 3
    monkeypatch.setattr(identity, "KEY_SCHEME", 2)
    old = GraphCache(cache_dir)
    old.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
    monkeypatch.setattr(identity, "KEY_SCHEME", 3)
    new = GraphCache(cache_dir, stale_after=0)
    assert new.version != old.version
    assert new.last_purge.entries == 1 and new.stats().entries == 0


def _control_flow_graph():
    namespace: dict = {}
    exec(CONTROL_FLOW_MODEL, namespace)
    return namespace["build_control_flow_graph"]()


def _rename_function_bodies(graph_def: graph_pb2.GraphDef) -> graph_pb2.GraphDef:
    """Every library function's body nodes renamed (inputs, outputs, control outputs and colocation
    follow)."""
    copy = graph_pb2.GraphDef()
    copy.CopyFrom(graph_def)
    for fdef in copy.library.function:
        mapping = {node.name: f"body_{i}_99" for i, node in enumerate(fdef.node_def)}

        def rename(text: str, mapping=mapping) -> str:
            control = text.startswith("^")
            node, sep, rest = text.lstrip("^").partition(":")
            return ("^" if control else "") + mapping.get(node, node) + sep + rest

        for node in fdef.node_def:
            node.name = mapping[node.name]
            node.input[:] = [rename(text) for text in node.input]
            if "_class" in node.attr:  # b"loc:@<body node>"
                node.attr["_class"].list.s[:] = [b"loc:@" + mapping[s[5:].decode()].encode()
                                                 for s in node.attr["_class"].list.s]
        for key in list(fdef.ret):
            fdef.ret[key] = rename(fdef.ret[key])
        for key in list(fdef.control_ret):
            fdef.control_ret[key] = mapping.get(fdef.control_ret[key], fdef.control_ret[key])
    return copy


def test_function_bodies_are_keyed_by_structure_not_node_names():
    gd, feeds, fetches = _control_flow_graph()
    assert any(f.node_def for f in gd.library.function)
    base = graphcache.fingerprint(gd, fetches, feeds)
    renamed = _rename_function_bodies(gd)
    assert {n.name for f in renamed.library.function for n in f.node_def}.isdisjoint(
        n.name for f in gd.library.function for n in f.node_def)
    assert graphcache.fingerprint(renamed, fetches, feeds) == base

    def change_body_constant(g):
        const = next(n for f in g.library.function for n in f.node_def
                     if n.op == "Const" and n.attr["value"].tensor.float_val)
        const.attr["value"].tensor.float_val[0] += 1.0

    assert graphcache.fingerprint(_mutated(gd, change_body_constant), fetches, feeds) != base
