"""Single flight within a process: a function traced or first-called again while this process is still writing
its entry in the background reads that entry (core/background.py ``wait_for_key``) instead of compiling it a
second time. TensorFlow's own ``testCallOptionsMemory`` (tracing_compilation_test.py) met the gap: on an empty
cache dir its warm-up calls missed again while the first call's writes were pending, so its first hits (and the
use records they leave, core/usage.py) came in the calls it measures for new Python objects.

The writes are made slow here (each waits 0.6 s before it writes) so that the second lookup comes while the first
write is pending: without the wait for it, that lookup misses and the cache stores the entries twice."""

from __future__ import annotations

from .helpers import run_python

CHILD = '''
import json, time
import tensorflow as tf
import graphcache
from graphcache.core.service import EntryService

write_entry = EntryService.write_entry
def slow_write_entry(self, *args, **kwargs):
    time.sleep(0.6)  # a slow disk: the next lookup of the same key comes while this write is pending
    return write_entry(self, *args, **kwargs)
EntryService.write_entry = slow_write_entry
cache = graphcache.GraphCache({cache_dir!r}, traces=True, functions=True)

def make():
    @tf.function
    def scaled(x):  # the same code every time: one trace key, one function key
        return tf.reduce_sum(tf.sin(x) * 3.0 + 1.0)
    return scaled

x = tf.range(8, dtype=tf.float32)
values = []
for _ in range(3):
    values.append(float(make()(x)))
    time.sleep(0.05)  # well inside the pending write
cache.wait_for_writes()
stats = cache.stats()
print(json.dumps({{"values": values, "traces": stats.traces, "functions": stats.functions,
                  "kinds": sorted(row.kind for row in cache.entries())}}))
'''


def test_a_lookup_waits_for_this_processs_pending_write_of_its_entry(cache_dir):
    out = run_python(CHILD.format(cache_dir=str(cache_dir)))
    assert len(set(out["values"])) == 1
    assert out["traces"]["trace_misses"] == 1 and out["traces"]["trace_hits"] == 2, out["traces"]
    assert out["functions"]["function_compiles"] == 1 and out["functions"]["function_hits"] == 2, out["functions"]
    assert out["kinds"].count("tf_trace") == 1, out["kinds"]
