"""Every python block of docs/agents.md runs (each block is self-contained)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "agents.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```$", DOC.read_text(encoding="utf-8"), re.S | re.M)


def test_the_page_has_examples() -> None:
    assert len(BLOCKS) >= 6


@pytest.mark.parametrize("number", range(len(BLOCKS)))
def test_block_runs(number: int, capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(BLOCKS[number], f"{DOC}:block{number}", "exec"), {"__name__": "docs_example"})
    if number == 0:  # the worked example: the one conditional notification is printed
        out = capsys.readouterr().out
        assert out.count("NOTIFY triage/check-issues:") == 1
        assert "Login fails with SSO: needs a human today" in out
