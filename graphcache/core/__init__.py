"""The TensorFlow-free core: everything a cache dir needs that is not compiling.

Nothing in this package imports TensorFlow (a static test enforces it): the CLI's file commands, bundles
and pushes run on it alone, and ``import tensorflow`` by itself takes seconds.
"""
