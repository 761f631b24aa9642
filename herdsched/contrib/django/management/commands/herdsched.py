"""``manage.py herdsched``: run the scheduler in a process of its own, in the foreground."""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand

from herdsched.contrib import django as integration
from herdsched.store.spec import store_location


class Command(BaseCommand):
    help = (
        "Run the herdsched scheduler of settings.HERDSCHED in the foreground until SIGINT or "
        "SIGTERM (set HERDSCHED['AUTOSTART'] = False for the web processes then)."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        scheduler = integration.get_scheduler()
        status = scheduler.get_status()
        agents = len({item.agent for item in status.schedules})
        self.stdout.write(
            f"Running the herdsched scheduler of settings.HERDSCHED in the foreground (pid "
            f"{os.getpid()}): {len(status.schedules)} schedule(s) of {agents} agent(s), state "
            f"in {store_location(scheduler.store)}. Ctrl-C or SIGTERM stops it gracefully."
        )
        scheduler.run_forever()
        self.stdout.write("The herdsched scheduler stopped.")
