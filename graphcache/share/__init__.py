"""Entries that travel: SavedModel cold start (aliases, builds deferred off the caller's path), CI warming,
pushes to the remote, and bundles."""
