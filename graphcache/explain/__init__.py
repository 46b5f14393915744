"""Misses that explain themselves: why a graph's key hits or misses, against what is cached.

- ``nodes``: the compact per-node table every graph entry keeps of its source graph, and the node diff;
- ``report``: ``explain(graph, fetches, feeds, targets, cache=...)`` -> :class:`Explanation`, and
  ``note_miss``, what GraphCache's miss path records (the index side is core/misses.py);
- ``sources``: what ``graphcache explain GRAPH`` compares: a .pb/.pbtxt or a SavedModel signature,
  frozen as ``warm`` and ``load_saved_model`` freeze it (imports the SavedModel code: not imported here,
  so cache.py can import ``report`` without a cycle).
"""

from __future__ import annotations

from .report import Explanation, NearestEntry, explain

__all__ = ["Explanation", "NearestEntry", "explain"]
