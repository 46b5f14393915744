"""The SQLite index of one cache dir (derived data: rebuilt from the entry files when it is damaged): its
rows and totals (``database``), the schema and its migrations (``schema``), rebuilding (``rebuild``),
``verify``'s checks and drift repair (``audit``) and what explains misses (``misses``)."""
