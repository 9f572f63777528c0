"""Where the test suite's time goes, from its JUnit report.

    pytest --junitxml=_build/ci/pytest.xml && python benchmarks/suite_breakdown.py _build/ci/pytest.xml

`.ci/run` does both. Prints the seconds each part took (unit, grader, nbval per edition, the
book build, the browser) summed over its tests, setup and teardown included, and every
notebook's nbval time in both editions. Under pytest-xdist the parts run side by side, so they
add up to more than the wall time; the sum over both workers, divided by the wall time, says
how busy the two workers were.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", help="pytest's --junitxml file")
    args = parser.parse_args(argv)
    root = ET.parse(args.report).getroot()
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
    wall = float(suite.get("time", 0))
    print(f"\npytest wall time {wall:.0f} s; tests {suite.get('tests')}, failures "
          f"{suite.get('failures')}, errors {suite.get('errors')}, skipped {suite.get('skipped')}")
    print(f"{'part':32} {'tests':>6} {'seconds':>8}")
    for name in PARTS:
        print(f"{name:32} {counts[name]:6d} {seconds[name]:8.0f}")
    total = sum(seconds.values())
    print(f"{'sum over both workers':32} {sum(counts.values()):6d} {total:8.0f}"
          + (f"   ({total / wall:.2f} x the wall time)" if wall else ""))
    chapters = sorted({n.split(".", 1)[1] for n in notebooks})
    print(f"\n{'notebook':32} {'solutions (s)':>14} {'student (s)':>12}")
    def shown(key: str) -> str:
        return f"{notebooks[key]:.1f}" if key in notebooks else "-"

    for chapter in chapters:
        print(f"{chapter.removesuffix('.ipynb'):32} {shown('solutions.' + chapter):>14} "
              f"{shown('notebooks.' + chapter):>12}")
    print("(-: not run; a chapter without exercises is the same notebook in both editions, and "
          "runs once)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
