"""A Flask application factory with herdsched configured from ``app.config``."""

from pathlib import Path
from typing import Any

from flask import Flask, Request

from herdsched.api import ADMIN
from herdsched.contrib.flask import init_app

HERE = Path(__file__).parent


def owner_of(request: Request) -> str | None:
    """Who is calling: an owner name, ADMIN (sees everything), or None (401)."""
    token = request.headers.get("Authorization", "")
    if token == "Bearer admin-token":
        return ADMIN
    name = token.removeprefix("Bearer user-")  # "Bearer user-ann" is owner "ann"
    if token.startswith("Bearer user-") and name.isalnum():  # never "*", no control characters
        return name
    return None


def create_app(**config: Any) -> Flask:
    app = Flask(__name__)
    app.config.update(
        HERDSCHED_FLEET_FILE=str(HERE / "fleet.yaml"),
        HERDSCHED_STATE_DIR=str(HERE / ".herdsched"),
        HERDSCHED_TIMEZONE="Europe/Berlin",
    )
    app.config.update(config)
    init_app(app, auth=owner_of)  # REST under /herdsched/api, page at /herdsched/
    return app
