"""Misses that explain themselves: why a graph's key hits or misses, against what is cached. A plugin
(core/plugins.py), wanted by every GraphCache and enabled at its first miss.

- ``nodes``: the compact per-node table every graph entry keeps of its source graph, and the node diff;
- ``report``: ``explain(graph, fetches, feeds, targets, cache=...)`` -> :class:`Explanation`, and
  ``note_miss``, what a miss records (the index side is core/index/misses.py);
- ``plugin``: the miss hook (a miss is recorded, its entry keeps the node table).

What ``graphcache explain GRAPH`` compares (a .pb/.pbtxt or a SavedModel signature) is share/sources.py.
"""

from __future__ import annotations

from .report import Explanation, NearestEntry, explain

__all__ = ["Explanation", "NearestEntry", "explain"]
