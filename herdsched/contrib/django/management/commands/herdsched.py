"""``manage.py herdsched``: run the scheduler in a process of its own, in the foreground."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from herdsched.contrib import django as integration


class Command(BaseCommand):
    help = (
        "Run the herdsched scheduler of settings.HERDSCHED in the foreground until SIGINT or "
        "SIGTERM (set HERDSCHED['AUTOSTART'] = False for the web processes then)."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        scheduler = integration.get_scheduler()
        count = len(scheduler.get_status().schedules)
        self.stdout.write(
            f"herdsched: {count} schedule(s), state in {scheduler.state_dir}; "
            "Ctrl-C stops gracefully"
        )
        scheduler.run_forever()
        self.stdout.write("herdsched stopped")
