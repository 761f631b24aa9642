"""``python -m bench``: run the benchmark scenarios (see :mod:`bench.cli`)."""

from bench.cli import main

raise SystemExit(main())
