"""``python -m graphcache``: the command line (see graphcache.cli)."""

from .cli import main

if __name__ == "__main__":
    main()
