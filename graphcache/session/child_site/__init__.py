"""A folder ``graphcache run`` puts first on its script's ``PYTHONPATH``: its ``sitecustomize`` installs graphcache
in the script's child Python processes (see graphcache/session/adoption.py)."""
