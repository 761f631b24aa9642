"""Jobs of ``fleet.yaml``: they may use the framework's context (see docs/embedding.md)."""

from herdsched import TriggerInfo


def write_report(info: TriggerInfo) -> str:
    try:
        from flask import current_app

        where = f"Flask app {current_app.name}"  # works: jobs run in app.app_context()
    except (ImportError, RuntimeError):
        where = "no Flask app"
    return f"{info.prompt} ({where})"
