"""What an entry is, below everything else: the byte format and its checks, the kinds, keys from named parts
and the shape of a key. This layer imports nothing of graphcache but ``errors``: the store moves these bytes,
the core serves them, and neither defines them again."""
