"""Dynamic loss scaling for the float16 variant: a GraphDef rewrite, and the scale the session keeps.

float16 flushes gradients below 6e-8 to zero, so the float16 variant's graph is rewritten before Grappler
sees it: each ``tf.gradients`` seed (``.../gradients/grad_ys_N``) is multiplied by a fed scale S, and
every float tensor leaving the gradients scope (what the optimizer, or clipping, consumes) is divided by
S in float32 and replaced by zeros unless every such gradient is finite. The session feeds S
(``LOSS_SCALE_FEED``) and reads the all-finite flag (``ALL_FINITE_FETCH``) with each run; ``LossScale``
keeps S: it starts at 2**15, halves on a non-finite step (that step's update gets zero gradients, the
global step still advances), and doubles after 2000 finite steps, like TensorFlow's dynamic loss scale.
Graphs that already scale their loss (a node named ``*loss_scale*``) are left alone. bfloat16 has
float32's exponent range and is not scaled.

``add_loss_scaling`` runs in phases, each a function below: the fan-in of the signature's roots, the
already-scaled check, the seeds by gradient scope, the gradients leaving their scope, the
scale/unscale/guard subgraph, and the rewiring of the original graph onto it.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

log = logging.getLogger("graphcache")

LOSS_SCALE_SCOPE = "graphcache_loss_scale"
LOSS_SCALE_FEED = f"{LOSS_SCALE_SCOPE}/scale:0"
ALL_FINITE_FETCH = f"{LOSS_SCALE_SCOPE}/all_finite:0"
INITIAL_LOSS_SCALE = 2.0**15
LOSS_SCALE_GROWTH_STEPS = 2000
MAX_LOSS_SCALE = 2.0**24

_SEED = re.compile(r"(?P<scope>(?:.*/)?gradients(?:_\d+)?)/grad_ys_\d+")
_FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")

# A gradient leaving its scope: its tensor ("node:port") -> the (consumer node, input index) pairs reading it.
Leaving = dict[str, list[tuple[str, int]]]


def add_loss_scaling(graph_def, tf_graph, roots: list[str]):
    """The float16 variant's graph: (new GraphDef, None) with dynamic loss scaling, or (graph_def, reason).

    ``tf_graph`` is the same graph as a tf.Graph (for tensor dtypes); ``roots`` are the signature's
    fetch/target node names: only gradient scopes in their fan-in are rewritten.
    """
    nodes = {node.name: node for node in graph_def.node}
    fan_in = _fan_in(nodes, roots)
    if _already_scaled(fan_in):
        return graph_def, "the graph already scales its loss"
    seeds_by_scope = _seeds_by_scope(fan_in)
    if not seeds_by_scope:
        return graph_def, "no tf.gradients seed (a '.../gradients/grad_ys_N' node) in the training signature"
    leaving = _leaving_gradients(nodes, fan_in, tuple(scope + "/" for scope in seeds_by_scope), tf_graph)
    if not leaving:
        return graph_def, "the gradients scope has no float output"
    seeds = [seed for scope in seeds_by_scope for seed in seeds_by_scope[scope]]
    subgraph = _scaling_subgraph(seeds, sorted(leaving), tf_graph)
    return _rewired(graph_def, fan_in, leaving, subgraph), None


def _tensor_key(ref: str) -> str:
    """A data input ("n", "n:0", "n:2") as "n:port"."""
    name, _, port = ref.partition(":")
    return f"{name}:{port or 0}"


def _fan_in(nodes: dict, roots: list[str]) -> set[str]:
    """The node names the roots depend on (data and control inputs), roots included.

    Only this part of the graph runs in the signature, so only gradient scopes in it are rewritten: a
    second ``tf.gradients`` call elsewhere in the graph (another tower, an evaluation metric) is left alone.
    Roots that are not nodes of the graph are skipped.
    """
    fan_in: set[str] = set()
    stack = list(roots)
    while stack:
        name = stack.pop()
        if name in fan_in or name not in nodes:
            continue
        fan_in.add(name)
        stack.extend(ref.lstrip("^").partition(":")[0] for ref in nodes[name].input)
    return fan_in


def _already_scaled(fan_in: set[str]) -> bool:
    """Whether a node of the fan-in has a name part containing ``loss_scale`` (any case).

    Such a graph scales its own loss (a LossScaleOptimizer, hand-written scaling): scaling it a second
    time would compound the scales and fight its own overflow handling.
    """
    return any("loss_scale" in part.lower() for name in fan_in for part in name.split("/"))


def _seeds_by_scope(fan_in: set[str]) -> dict[str, list[str]]:
    """The ``tf.gradients`` seed tensors (``<scope>/grad_ys_N:0``) of the fan-in, by gradients scope.

    The seeds are where the loss's gradient enters backprop: scaling them scales every gradient of the
    scope. Sorted by name so that the rewritten graph (and so its cache key) is the same in every process.
    """
    seeds_by_scope: dict[str, list[str]] = {}
    for name in sorted(fan_in):
        match = _SEED.fullmatch(name)
        if match:
            seeds_by_scope.setdefault(match["scope"], []).append(f"{name}:0")
    return seeds_by_scope


def _scope_of(name: str, scopes: tuple[str, ...]) -> str | None:
    """The gradients scope (with its trailing "/") a node name lies in, or None."""
    return next((s for s in scopes if name.startswith(s)), None)


def _leaving_gradients(nodes: dict, fan_in: set[str], scopes: tuple[str, ...], tf_graph) -> Leaving:
    """Float data edges from inside a gradients scope to a node outside it, within the fan-in.

    These carry the scaled gradients out of backprop (to the optimizer's update, to clipping, to a
    summary): each must be unscaled before anything outside the scope sees it. Control edges carry no
    value and integer outputs (shapes, indices) are not scaled, so both stay as they are.
    """
    leaving: Leaving = {}
    for name in sorted(fan_in):
        inside = _scope_of(name, scopes)
        for index, ref in enumerate(nodes[name].input):
            if ref.startswith("^"):
                continue
            key = _tensor_key(ref)
            source = _scope_of(key.rpartition(":")[0], scopes)
            if source is None or source == inside:
                continue
            if tf_graph.get_tensor_by_name(key).dtype.base_dtype.name in _FLOAT_DTYPES:
                leaving.setdefault(key, []).append((name, index))
    return leaving


@dataclass
class _ScalingSubgraph:
    """The nodes ``_scaling_subgraph`` adds, and the tensors that replace the seeds and the gradients."""

    nodes: list  # NodeDefs, all under LOSS_SCALE_SCOPE/, their inputs already naming the original tensors
    scaled_seed: dict[str, str]  # seed tensor -> its scaled replacement
    unscaled: dict[str, str]  # leaving gradient tensor -> its unscaled, guarded replacement


def _scaling_subgraph(seeds: list[str], gradients: list[str], tf_graph) -> _ScalingSubgraph:
    """The scale/unscale/guard nodes, built with TensorFlow ops in a scratch graph.

    The scratch graph stands in a placeholder for each original tensor (a seed or a leaving gradient), so
    the ops are TensorFlow's own (shape functions, dtype rules); ``_substitute`` then points the stand-ins'
    consumers at the original tensors. Every node lands in LOSS_SCALE_SCOPE, whose ``scale`` is the fed S
    and whose ``all_finite`` is the fetched flag.
    """
    import tensorflow as tf

    scratch = tf.Graph()
    stand_ins: dict[str, str] = {}  # stand-in placeholder node -> original tensor
    scaled_seed: dict[str, str] = {}
    unscaled: dict[str, str] = {}
    with scratch.as_default(), tf.compat.v1.name_scope(LOSS_SCALE_SCOPE + "/"):  # every node in the scope
        scale = tf.compat.v1.placeholder(tf.float32, [], name="scale")
        inverse = tf.math.reciprocal(scale, name="inverse")
        for i, seed in enumerate(seeds):
            dtype = tf_graph.get_tensor_by_name(seed).dtype.base_dtype
            stand_in = tf.compat.v1.placeholder(dtype, name=f"seed_in_{i}")
            stand_ins[stand_in.op.name] = seed
            scaled_seed[seed] = tf.multiply(stand_in, tf.cast(scale, dtype), name=f"scaled_seed_{i}").name
        raw = []
        for j, key in enumerate(gradients):
            dtype = tf_graph.get_tensor_by_name(key).dtype.base_dtype
            stand_in = tf.compat.v1.placeholder(dtype, name=f"grad_in_{j}")
            stand_ins[stand_in.op.name] = key
            # Unscale in float32 whatever the gradient's dtype, so the division cannot underflow again.
            raw.append((key, dtype, tf.multiply(tf.cast(stand_in, tf.float32), inverse, name=f"unscale_{j}")))
        finite = tf.reduce_all(tf.stack([tf.reduce_all(tf.math.is_finite(v)) for _, _, v in raw]),
                               name="all_finite")
        for j, (key, dtype, value) in enumerate(raw):
            guarded = tf.where(finite, value, tf.zeros_like(value), name=f"guard_{j}")
            unscaled[key] = tf.cast(guarded, dtype, name=f"grad_{j}").name
    return _ScalingSubgraph(_substitute(scratch.as_graph_def(), stand_ins), scaled_seed, unscaled)


def _substitute(scratch_def, stand_ins: dict[str, str]) -> list:
    """The scratch graph's nodes without the stand-ins, each input naming a stand-in renamed to its original."""
    added = [node for node in scratch_def.node if node.name not in stand_ins]
    for node in added:
        for index, ref in enumerate(node.input):
            original = stand_ins.get(ref.partition(":")[0])
            if original is not None:
                node.input[index] = original
    return added


def _rewired(graph_def, fan_in: set[str], leaving: Leaving, subgraph: _ScalingSubgraph):
    """A copy of ``graph_def`` that reads the scaled seeds and the unscaled gradients, plus the subgraph.

    Backprop inside each scope then runs on scaled values, and everything outside it sees gradients at
    their true size (zeros on a non-finite step). The input graph is left as it was: the session still
    compiles its original-precision signatures from it.
    """
    from tensorflow.core.framework import graph_pb2

    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    rewired = {node.name: node for node in out.node}
    for name in fan_in:  # every consumer of a seed is inside its scope
        node = rewired[name]
        for index, ref in enumerate(node.input):
            if not ref.startswith("^") and _tensor_key(ref) in subgraph.scaled_seed:
                node.input[index] = subgraph.scaled_seed[_tensor_key(ref)]
    for key, consumers in leaving.items():
        for name, index in consumers:
            rewired[name].input[index] = subgraph.unscaled[key]
    out.node.extend(subgraph.nodes)
    return out


class LossScale:
    """Dynamic loss scale state, kept by the session (fed in, updated from the all-finite flag)."""

    def __init__(self) -> None:
        self.value = INITIAL_LOSS_SCALE
        self.good_steps = 0
        self.skipped = 0

    def update(self, finite: bool) -> None:
        if finite:
            self.good_steps += 1
            if self.good_steps >= LOSS_SCALE_GROWTH_STEPS:
                self.value = min(self.value * 2.0, MAX_LOSS_SCALE)
                self.good_steps = 0
        else:
            self.skipped += 1
            self.good_steps = 0
            self.value = max(self.value / 2.0, 1.0)
            log.debug("graphcache: non-finite float16 gradients: update skipped, loss scale -> %g", self.value)
