"""``python -m herdsched``: the ``herdsched`` command line."""

from __future__ import annotations

from herdsched.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
