"""Every ```python block in the listed documentation pages runs.

Blocks of one page run in order in one namespace, like cells of a notebook, so a later block may
use names an earlier one defined. A block right after a line ``<!-- no-test -->`` is skipped
(for fragments that need a network, a web server or a real fleet). Add a page to ``PAGES`` once
its examples are self-contained.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
PAGES = [
    "agents.md",
    "getting-started.md",
    "scheduler.md",
    "scheduling.md",
    "state.md",
    "testing.md",
]

_FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w+-]*)\s*$")
_SKIP_MARK = "<!-- no-test -->"


def python_blocks(text: str) -> list[tuple[int, str]]:
    """``(line number, code)`` of each ```python block, in order; skipped blocks left out."""
    blocks: list[tuple[int, str]] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if not opening or not opening["lang"]:
            index += 1
            continue
        start = index
        indent = len(opening["indent"])
        index += 1
        body: list[str] = []
        while index < len(lines) and not re.match(r"^ *```\s*$", lines[index]):
            body.append(lines[index][indent:])
            index += 1
        index += 1  # the closing fence
        skipped = start > 0 and lines[start - 1].strip() == _SKIP_MARK
        if opening["lang"] == "python" and not skipped:
            blocks.append((start + 1, "\n".join(body) + "\n"))
    return blocks


def test_block_extraction() -> None:
    text = "\n".join(
        [
            "# Title",
            "```python",
            "x = 1",
            "```",
            "```yaml",
            "a: 1",
            "```",
            "<!-- no-test -->",
            "```python",
            "raise SystemExit",
            "```",
            "1. a list item",
            "    ```python",
            "    y = x + 1",
            "    ```",
        ]
    )
    assert python_blocks(text) == [(2, "x = 1\n"), (13, "y = x + 1\n")]


def run_examples(path: Path) -> None:
    """Run the page's python blocks in order in one namespace; fail naming the block's line."""
    blocks = python_blocks(path.read_text(encoding="utf-8"))
    assert blocks, f"{path.name} has no python examples"
    namespace: dict[str, object] = {"__name__": f"docs_{path.stem}"}
    for line, code in blocks:
        compiled = compile(code, f"{path}:{line}", "exec")
        try:
            exec(compiled, namespace)
        except Exception as exc:  # pragma: no cover - the failure report
            pytest.fail(f"example at {path.name}:{line} failed: {type(exc).__name__}: {exc}")


@pytest.mark.parametrize("page", PAGES)
def test_page_examples_run(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each page in a directory of its own: an example may write a relative ``.herdsched``,
    the demo fleet's state directory (``state.md`` pauses ``triage/check-issues`` there, which
    the suite once did to the checkout's own demo state)."""
    monkeypatch.chdir(tmp_path)
    run_examples(DOCS / page)
    if page == "state.md":
        assert (tmp_path / ".herdsched" / "state.yaml").exists()


def test_readme_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # its state directory is a relative .herdsched
    run_examples(DOCS.parent / "README.md")
    assert (tmp_path / ".herdsched" / "state.yaml").exists()


def test_the_testing_modules_recipe_fires_what_is_due(tmp_path: Path) -> None:
    """The recipe in ``herdsched.testing``'s docstring (shown on the reference page) never
    called ``start()``, and ``run_pending()`` on a scheduler never started fired nothing in
    silence: a test of "it did not fire" passed without testing anything."""
    import textwrap
    from datetime import datetime, timezone

    import herdsched
    import herdsched.testing

    doc = herdsched.testing.__doc__ or ""
    recipe = textwrap.dedent(doc.split("::\n", 1)[1].split("\n\n", 1)[0])
    runs: list[str] = []
    namespace = {
        **{name: getattr(herdsched, name) for name in herdsched.__all__},
        "FakeClock": herdsched.testing.FakeClock,
        "datetime": datetime,
        "timezone": timezone,
        "tmp_path": tmp_path,
        "my_job": lambda info: runs.append(info.schedule),
    }
    exec(compile(recipe, "herdsched/testing.py docstring", "exec"), namespace)
    sched = namespace["sched"]
    try:
        assert sched.wait_until_idle(10)
        assert runs == ["s", "s"]  # due at once, then again five minutes later
    finally:
        sched.stop()


def test_the_first_fleet_file_of_the_fleet_files_page_validates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Copied as the page shows it, with the two files the page gives beside it, the first
    fleet file validates (the page did not show them: a copy failed for the missing job module
    and agent file)."""
    from herdsched.cli import main

    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    fleet, agent_file = re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)[:2]
    [job_module] = python_blocks(text)[:1]
    (tmp_path / "fleet.yaml").write_text(fleet)
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "backup.yaml").write_text(agent_file)
    (tmp_path / "ops_jobs.py").write_text(job_module[1])
    code = main(["validate", str(tmp_path / "fleet.yaml")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert 'valid fleet "ops": 2 agent(s), 3 schedule(s)' in out
