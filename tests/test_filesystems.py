"""A cache dir on a network file system is detected and named (graphcache/core/filesystems.py).

The mount tables are real ``/proc/<pid>/mountinfo`` lines as Linux writes them for NFS, CIFS and Lustre
clients (no network file system can be mounted on the test machine); the local case reads this machine's.
"""

from __future__ import annotations

import warnings

import pytest

from graphcache.core import filesystems
from graphcache.core.cachedir import CacheDir
from graphcache.errors import GraphCacheWarning

MOUNTINFO = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 259:1 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p1 rw
98 27 0:52 / /mnt/shared rw,relatime shared:60 - nfs4 filer:/export/ml rw,vers=4.2,rsize=1048576
99 98 259:3 / /mnt/shared/local\\040disk rw,relatime - xfs /dev/nvme1n1 rw
120 27 0:61 / /home/team rw,relatime - cifs //fs01/team rw,vers=3.1.1,cache=strict
140 27 0:70 / /lustre rw,relatime - lustre 10.0.0.5@tcp:/scratch rw,flock
"""


@pytest.mark.parametrize("path, fstype", [
    ("/mnt/shared/gc", "nfs4"), ("/mnt/shared", "nfs4"), ("/home/team/.cache/graphcache", "cifs"),
    ("/lustre/u/gc", "lustre"), ("/mnt/shared/local disk/gc", None), ("/mnt/sharedness/gc", None),
    ("/var/cache/gc", None),
])
def test_the_longest_mount_point_above_the_dir_names_its_file_system(path, fstype):
    mount = filesystems.network_mount(path, MOUNTINFO)
    assert (mount.fstype if mount else None) == fstype


def test_a_network_cache_dir_is_named_with_its_mount_and_how_to_share_instead():
    with pytest.warns(GraphCacheWarning) as caught:
        mount = filesystems.warn_if_network("/mnt/shared/gc", MOUNTINFO)
    assert mount == filesystems.Mount("/mnt/shared", "nfs4", "filer:/export/ml")
    text = str(caught[0].message)
    assert "'/mnt/shared/gc'" in text and "nfs4" in text and "filer:/export/ml" in text
    assert "GRAPHCACHE_REMOTE" in text and "local disk" in text


def test_a_local_cache_dir_opens_without_a_word(tmp_path):
    assert filesystems.network_mount(tmp_path) is None  # this machine's real mount table
    with warnings.catch_warnings():
        warnings.simplefilter("error", GraphCacheWarning)
        assert CacheDir(tmp_path).index is not None
