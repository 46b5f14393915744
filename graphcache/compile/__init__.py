"""From a graph to its compiled form: loading and validating graphs, the canonical form and the key, the
compiler identity, the compiler backends, importing serialized graphs, and the compiled graph itself."""
