"""Where the test suite's time goes, from its JUnit report.

    pytest --junitxml=_build/ci/pytest.xml && python benchmarks/suite_breakdown.py _build/ci/pytest.xml

`.ci/run` does both. Prints the seconds each part took (unit, grader, nbval per edition, the
book build, the browser) summed over its tests, setup and teardown included, and every
notebook's nbval time in both editions. Under pytest-xdist the parts run side by side, so they
add up to more than the wall time; the sum over both workers, divided by the wall time, says
how busy the two workers were. With ``--record benchmarks/results.json`` the figures are also
kept there, for the book's Performance page (``python benchmarks/pages.py``).
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

PARTS = ("unit", "grader", "nbval, instructor edition", "nbval, student edition", "book",
         "browser (with the book build)")


def part(classname: str) -> str:
    if classname.startswith("solutions."):
        return PARTS[2]
    if classname.startswith("notebooks."):
        return PARTS[3]
    module = classname.removeprefix("tests.")
    if module.startswith(("test_grader", "test_suites")):
        return PARTS[1]
    if module.startswith("test_book_build"):
        return PARTS[4]
    if module.startswith("test_book_browser"):
        return PARTS[5]
    return PARTS[0]


def breakdown(report: str | Path) -> dict:
    """The seconds and test counts per part and every notebook's nbval seconds per edition."""
    root = ET.parse(report).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    seconds: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    notebooks: dict[str, float] = defaultdict(float)
    for case in suite.iter("testcase"):
        name, t = case.get("classname", ""), float(case.get("time", 0))
        seconds[part(name)] += t
        counts[part(name)] += 1
        if name.startswith(("solutions.", "notebooks.")):
            notebooks[name] += t
    chapters = sorted({n.split(".", 1)[1] for n in notebooks})
    return {"wall (s)": round(float(suite.get("time", 0)), 1),
            **{k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")},
            "parts": [{"part": p, "tests": counts[p], "seconds": round(seconds[p], 1)} for p in PARTS],
            "notebooks": [{"notebook": c.removesuffix(".ipynb"),
                           "instructor (s)": round(notebooks["solutions." + c], 1)
                           if "solutions." + c in notebooks else None,
                           "student (s)": round(notebooks["notebooks." + c], 1)
                           if "notebooks." + c in notebooks else None} for c in chapters]}


def record(result: dict, out: Path) -> None:
    """Keep ``result`` as the ``suite`` part of a benchmarks JSON, with this machine's record."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from run import machine  # imports PyTorch: only when recording

    results = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}
    results["suite"] = result
    results.setdefault("measured", {})["suite"] = machine()
    out.write_text(json.dumps(results, indent=1), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", help="pytest's --junitxml file")
    parser.add_argument("--record", type=Path, metavar="JSON",
                        help="also keep the figures as the suite part of this benchmarks JSON "
                             "(benchmarks/results.json: the Performance page's)")
    args = parser.parse_args(argv)
    b = breakdown(args.report)
    wall = b["wall (s)"]
    print(f"\npytest wall time {wall:.0f} s; tests {b['tests']}, failures {b['failures']}, "
          f"errors {b['errors']}, skipped {b['skipped']}")
    print(f"{'part':32} {'tests':>6} {'seconds':>8}")
    for row in b["parts"]:
        print(f"{row['part']:32} {row['tests']:6d} {row['seconds']:8.0f}")
    total = sum(row["seconds"] for row in b["parts"])
    print(f"{'sum over both workers':32} {sum(row['tests'] for row in b['parts']):6d} {total:8.0f}"
          + (f"   ({total / wall:.2f} x the wall time)" if wall else ""))
    print(f"\n{'notebook':32} {'solutions (s)':>14} {'student (s)':>12}")
    for row in b["notebooks"]:
        shown = [f"{row[k]:.1f}" if row[k] is not None else "-" for k in ("instructor (s)", "student (s)")]
        print(f"{row['notebook']:32} {shown[0]:>14} {shown[1]:>12}")
    print("(-: not run; a chapter without exercises is the same notebook in both editions, and "
          "runs once)")
    if args.record:
        record(b, args.record)
        print(f"kept as the suite part of {args.record}")
    return 0

if __name__ == "__main__":
    sys.exit(main())
