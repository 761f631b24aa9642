"""A real Jupyter notebook, executed with nbclient and an ipykernel.

The constructor cell runs, then runs again after an edit, on one state directory: the edited
scheduler takes over from the first, so the edited job runs; nothing fires twice, no threads pile
up, nothing is written to stderr, ``_repr_html_`` renders the status table, the timer thread is a
daemon, and ``stop()`` from a cell returns promptly (each cell has a timeout).
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

pytestmark = pytest.mark.slow

CELL = (Path(__file__).parent / "apps" / "notebook_cell.py").read_text()  # in the docs too
EDITED = CELL.replace('f"tick at', 'f"edited tick at')
assert EDITED != CELL

WATCH = """\
import gc, json, threading, time
time.sleep(3.5)
made = sorted((o for o in gc.get_objects() if isinstance(o, ThreadedScheduler)),
              key=lambda s: s.status)
leader = next(s for s in made if s.is_leader)
runs = [{"slot": r.scheduled_for.isoformat(), "start": r.started_at.timestamp(),
         "end": r.finished_at.timestamp(), "output": r.output_summary}
        for r in leader.history("nb", "tick", limit=50)]
timers = [t for t in threading.enumerate() if t.name == "herdsched-timer"]
print(json.dumps({"runs": runs, "statuses": [s.status for s in made],
                  "timers": len(timers), "daemons": all(t.daemon for t in timers)}))
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


def test_an_edited_cell_run_again_takes_over_renders_and_stops(tmp_path: Path) -> None:
    from nbformat.v4 import new_code_cell, new_notebook

    notebook = new_notebook(
        cells=[
            new_code_cell(CELL),
            new_code_cell(EDITED),  # the cell edited and run again
            new_code_cell(WATCH),
            new_code_cell("sched"),
            new_code_cell(STOP),
        ]
    )
    client = nbclient.NotebookClient(
        notebook, timeout=30, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    )
    client.execute()
    cells = notebook.cells
    assert (tmp_path / ".herdsched" / "state.yaml").exists()  # the kernel ran in tmp_path

    _, _, first = outputs_of(cells[0])
    assert "herdsched-status" in first["text/html"]
    assert "<b>herdsched</b>: running" in first["text/html"]
    assert "<td>nb</td><td>tick</td>" in first["text/html"]
    _, stderr, second = outputs_of(cells[1])
    # the edited one leads at once, or, when the old one was running a tick at that instant,
    # right after that job (as documented); the later cell shows it leading either way
    assert re.search("<b>herdsched</b>: (running|standby)", second["text/html"])
    assert stderr == ""  # no notice in red: hand-overs and standbys log below WARNING

    stdout, _, _ = outputs_of(cells[2])
    watched = json.loads(stdout)
    assert watched["statuses"] == ["running", "stopped"]
    runs = sorted(watched["runs"], key=lambda r: r["start"])
    assert len(runs) >= 2  # every ~1 s for at least 3.5 s
    span = runs[-1]["start"] - runs[0]["start"]  # one scheduler at a time: a run a second,
    assert len(runs) <= span + 2, (len(runs), span)  # plus the one right after the hand-over
    assert len({r["slot"] for r in runs}) == len(runs)  # never a slot twice
    for before, after in itertools.pairwise(runs):
        assert after["start"] >= before["end"]
    assert runs[-1]["output"].startswith("edited tick at")  # the edited code runs
    assert watched["timers"] == 1  # the first scheduler's thread ended
    assert watched["daemons"] is True

    _, _, later = outputs_of(cells[3])
    assert "<b>herdsched</b>: running" in later["text/html"]

    stdout, _, _ = outputs_of(cells[4])
    assert json.loads(stdout) == ["stopped", "stopped"]
