"""Demo: preview the next fire times of a small fleet's schedules."""

from __future__ import annotations

from datetime import datetime, timezone
from itertools import islice

from herdsched.cadence import iter_cron_triggers, parse_interval

if __name__ == "__main__":
    now = datetime.now(timezone.utc)
    print("interval 1h30m =", parse_interval("1h30m"))
    for expr, zone in [("0 9 * * 1-5", "Europe/Berlin"), ("30 2 * * *", "America/New_York")]:
        times = [t.isoformat() for t in islice(iter_cron_triggers(expr, now, zone), 3)]
        print(f"{expr!r} in {zone}: {times}")
