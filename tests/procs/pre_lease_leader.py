"""A leader as herdsched versions before the lease were, for the upgrade tests.

Usage: pre_lease_leader.py STATE_DIR LEDGER SECONDS

Such a version led while it held an exclusive ``flock`` on ``STATE_DIR/scheduler.lock`` (with
its pid, host and start written into it) and stood by, retrying, while another process held
it; it knew nothing of ``lease.json``. Leading, this process runs the 1-second cron of
``lease_child.py``: one ledger line ``pid tick slot`` per second. It prints ``led`` or ``stood
by`` and exits after SECONDS, letting go of the lock as such a version did.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from datetime import datetime, timezone

import portalocker

from herdsched.timestamps import format_timestamp


def main() -> None:
    state_dir, ledger, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    handle = open(os.path.join(state_dir, "scheduler.lock"), "a+", encoding="utf-8")  # noqa: SIM115
    end = time.monotonic() + seconds
    held, led, last = False, False, None
    while time.monotonic() < end:
        if not held:
            try:
                portalocker.lock(handle, portalocker.LOCK_EX | portalocker.LOCK_NB)
            except portalocker.exceptions.LockException:
                time.sleep(0.2)
                continue
            held = led = True
            started = format_timestamp(datetime.now(timezone.utc))
            handle.seek(0)
            handle.truncate()
            handle.write(
                json.dumps(
                    {"pid": os.getpid(), "host": socket.gethostname(), "started_at": started}
                )
            )
            handle.flush()
        slot = datetime.now(timezone.utc).replace(microsecond=0)
        if slot != last:
            last = slot
            fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, f"{os.getpid()} tick {format_timestamp(slot)}\n".encode())
            finally:
                os.close(fd)
        time.sleep(0.05)
    if held:
        handle.seek(0)
        handle.truncate()
        handle.flush()
        portalocker.unlock(handle)
    handle.close()
    print("led" if led else "stood by", flush=True)


if __name__ == "__main__":
    main()
