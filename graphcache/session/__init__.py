"""graphcache in TF1 programs: the drop-in Session (``drop_in``), the cache it opens at its first compile
(``lazy_cache``), its private run graph and placement check, and zero-code adoption (``adoption``:
``install()``, ``graphcache run``, the install of child processes through ``child_site/``)."""
