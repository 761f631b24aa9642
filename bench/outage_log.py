"""What `herdsched run` logs through a PostgreSQL outage: lines by level, and the lines themselves.

Not a speed benchmark: it counts what an operator reads. A throwaway server (the one the postgres
variants use), a fleet of two interval schedules (2 s and 5 s) run by ``python -m herdsched
run --store DSN``, the server stopped for ``--outage`` seconds after 8 s and started again, then
45 s more before SIGTERM.

    python -m bench.outage_log [--outage 45]
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.postgres import PostgresServer, server_binaries

_FLEET = """agents:
  - name: bot
    command: [sh, -c, 'echo hi']
    schedules: {tick: {type: interval, interval: 2s}, tock: {type: interval, interval: 5s}}
"""


def run(outage: float) -> list[str]:
    """The lines ``herdsched run`` wrote to stderr through one outage of ``outage`` seconds."""
    binaries = server_binaries()
    if binaries is None:
        raise SystemExit("needs the Debian package 'postgresql' (initdb, pg_ctl)")
    root = Path(tempfile.mkdtemp(prefix="herdsched-outage-"))
    work = Path(tempfile.mkdtemp(prefix="herdsched-outage-run-"))
    server = PostgresServer(root, binaries)
    try:
        server.init()
        server.start()
        (work / "fleet.yaml").write_text(_FLEET)
        with open(work / "run.log", "w", encoding="utf-8") as log:
            fleet = subprocess.Popen(
                [sys.executable, "-m", "herdsched", "run", "fleet.yaml", "--store", server.dsn],
                stdout=subprocess.DEVNULL,
                stderr=log,
                cwd=work,
            )
            time.sleep(8)
            server.stop("fast")
            time.sleep(outage)
            server.start()
            time.sleep(45)
            fleet.send_signal(signal.SIGTERM)
            fleet.wait(60)
        return (work / "run.log").read_text(encoding="utf-8").splitlines()
    finally:
        server.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.outage_log", description=__doc__)
    parser.add_argument("--outage", type=float, default=45.0, help="seconds the server is down")
    lines = run(parser.parse_args().outage)
    levels = Counter(line.split()[1] for line in lines if len(line.split()) > 1)
    print(f"{len(lines)} lines: " + ", ".join(f"{n} {level}" for level, n in levels.items()))
    for line in lines:
        if " ERROR " in line or " WARNING " in line:
            print("  ", line[:200])


if __name__ == "__main__":
    main()
