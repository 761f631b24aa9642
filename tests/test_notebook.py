"""A real Jupyter notebook, executed with nbclient and an ipykernel.

The constructor cell runs twice with one state directory: the second scheduler stands by and
says so, nothing fires twice, ``_repr_html_`` renders the status table, the timer threads are
daemons, and ``stop()`` from a cell returns promptly (each cell has a timeout).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

pytestmark = pytest.mark.slow

SETUP = """\
import threading, time
from herdsched import Agent, Schedule, ThreadedScheduler

STATE_DIR = {state_dir!r}
fired = []

def tick(info):
    fired.append(time.monotonic())
    return "tick"
"""

CONSTRUCTOR = """\
sched = ThreadedScheduler(state_dir=STATE_DIR, max_sleep=0.5)
sched.add_agent(Agent("nb", job=tick, schedules={"tick": Schedule.interval("1s")}))
sched.start()
globals().setdefault("made", []).append(sched)
sched.status
"""

WATCH = """\
time.sleep(3.5)
gaps = [round(b - a, 3) for a, b in zip(fired, fired[1:])]
timer_threads = [t for t in threading.enumerate() if t.name == "herdsched-timer"]
print(json.dumps({"runs": len(fired), "gaps": gaps,
                  "timers": len(timer_threads),
                  "daemons": all(t.daemon for t in timer_threads),
                  "statuses": [s.status for s in made]}))
"""

STOP = """\
for s in made:
    s.stop()
print(json.dumps([s.status for s in made]))
"""


def outputs_of(cell: Any) -> tuple[str, str, dict[str, str]]:
    """(stdout, stderr, display data) of an executed cell."""
    stdout = stderr = ""
    data: dict[str, str] = {}
    for output in cell.outputs:
        if output.output_type == "stream":
            if output.name == "stdout":
                stdout += output.text
            else:
                stderr += output.text
        elif output.output_type in ("execute_result", "display_data"):
            data.update(output.data)
        elif output.output_type == "error":
            raise AssertionError("\n".join(output.traceback))
    return stdout, stderr, data


def test_notebook_reruns_stand_by_render_and_stop(tmp_path: Path) -> None:
    from nbformat.v4 import new_code_cell, new_notebook

    notebook = new_notebook(
        cells=[
            new_code_cell("import json\n" + SETUP.format(state_dir=str(tmp_path / "state"))),
            new_code_cell(CONSTRUCTOR),
            new_code_cell(CONSTRUCTOR),  # the same cell run again
            new_code_cell(WATCH),
            new_code_cell("made[0]"),
            new_code_cell("sched"),
            new_code_cell(STOP),
        ]
    )
    client = nbclient.NotebookClient(
        notebook, timeout=30, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    )
    client.execute()
    cells = notebook.cells

    _, _, first = outputs_of(cells[1])
    assert first["text/plain"] == "'running'"
    _, stderr, second = outputs_of(cells[2])
    assert second["text/plain"] == "'standby'"
    assert "standing by" in stderr  # the second scheduler says so

    stdout, _, _ = outputs_of(cells[3])
    watched = json.loads(stdout)
    assert watched["statuses"] == ["running", "standby"]
    assert 2 <= watched["runs"] <= 5  # one scheduler, every ~1 s for 3.5 s
    assert all(gap >= 0.9 for gap in watched["gaps"]), watched  # never fired twice at once
    assert watched["timers"] == 2
    assert watched["daemons"] is True

    _, _, active_view = outputs_of(cells[4])
    assert "herdsched-status" in active_view["text/html"]
    assert "running" in active_view["text/html"]
    assert "<td>nb</td><td>tick</td>" in active_view["text/html"]
    _, _, standby_view = outputs_of(cells[5])
    assert "standby" in standby_view["text/html"]
    assert "leader pid" in standby_view["text/html"]

    stdout, _, _ = outputs_of(cells[6])
    assert json.loads(stdout) == ["stopped", "stopped"]
