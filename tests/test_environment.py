"""The supported library range (coursekit.environment) is one statement in four places: the
constraint files that build its two ends, the pins CI runs, pyproject's floor, and the one-line
check a notebook's set-up cell prints."""

from __future__ import annotations

import re
from pathlib import Path

from coursekit.environment import SUPPORTED, _version, problems

ROOT = Path(__file__).resolve().parent.parent


def _pins(path: Path) -> dict[str, str]:
    return dict(re.findall(r"^([A-Za-z0-9_-]+)==([^\s#]+)", path.read_text(), re.M))


def test_inside_the_range_nothing_is_said_and_outside_one_line_names_what_to_install():
    inside = {name: low + ".0" for name, (low, _) in SUPPORTED.items()}
    assert problems(inside) == []
    old = problems({**inside, "transformers": "4.40.2"})
    assert old == ['transformers 4.40.2 is older than the book supports: pip install "transformers>=4.57,<6"']
    new = problems({**inside, "torch": "2.15.0+cu126"})
    assert len(new) == 1 and new[0].startswith("torch 2.15.0+cu126 is newer than the book has been tested")
    assert problems({**inside, "peft": None}) == []          # not installed: the chapter says so itself


def test_the_ends_and_the_pins_lie_in_the_declared_range():
    oldest, newest = _pins(ROOT / "benchmarks/env-oldest.txt"), _pins(ROOT / "benchmarks/env-newest.txt")
    pinned = _pins(ROOT / "requirements.txt")
    for name, (low, high) in SUPPORTED.items():
        assert _version(oldest[name])[:2] == _version(low)[:2], f"{name}: the oldest end is the range's floor"
        for found in (oldest[name], newest[name], pinned[name]):
            assert _version(low) <= _version(found) < _version(high), (name, found)
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'"torch>={SUPPORTED["torch"][0]}"' in pyproject
    for name in ("transformers", "peft", "bitsandbytes"):
        low, high = SUPPORTED[name]
        assert f'"{name}>={low},<{high}"' in pyproject, name
