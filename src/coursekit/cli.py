"""The ``coursekit`` command: ``release``, ``store-outputs``, ``grade``, ``export``, ``book``,
``validate``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _release(args: argparse.Namespace) -> int:
    from coursekit.release import ReleaseError, release

    try:
        changed = release(Path(args.solutions), Path(args.notebooks), check=args.check)
    except ReleaseError as err:
        print(f"coursekit release: {err}", file=sys.stderr)
        return 2
    if args.check:
        if changed:
            print("notebooks/ is stale; run `coursekit release`:\n  " + "\n  ".join(changed))
            return 1
        print("notebooks/ is up to date")
        return 0
    print(f"wrote {len(changed)} notebook(s)" + "".join(f"\n  {c}" for c in changed))
    return 0


def _store_outputs(args: argparse.Namespace) -> int:
    from coursekit.release import store_checked_outputs

    for name in args.paths:
        kept = store_checked_outputs(Path(name))
        print(f"{name}: executed; {kept} NBVAL_CHECK_OUTPUT cell(s) keep their output")
    return 0


def _grade(args: argparse.Namespace) -> int:
    import faulthandler
    import signal

    from coursekit.grading.batch import HarnessError, Limits, grade

    # `kill -USR1 <pid>` prints where every thread of a long batch is (to stderr), without
    # stopping it: how a run that seems stuck is diagnosed
    try:
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    except (OSError, ValueError):  # stderr is not a file (called in-process, captured)
        pass

    limits = Limits(timeout=args.timeout, case_timeout=args.case_timeout,
                    memory_mib=args.memory, output_kib=args.output)
    if args.gradescope:
        from coursekit.grading.gradescope import build_autograder

        try:
            path = build_autograder(Path(args.gradescope), chapter=args.chapter,
                                    extra_cases=args.extra_cases, limits=limits,
                                    concept_points=args.concept_points)
        except (ValueError, OSError) as err:
            print(f"coursekit grade: {err}", file=sys.stderr)
            return 2
        print(f"wrote the Gradescope autograder {path}: upload it as the assignment's "
              "autograder (Ubuntu base image)")
        return 0
    if not args.paths or not args.out:
        print("coursekit grade: give the submissions (PATH ...) and --out DIR, "
              "or --gradescope ZIP", file=sys.stderr)
        return 2
    try:
        result = grade(args.paths, args.out, jobs=args.jobs, limits=limits, force=args.force,
                       extra_cases=args.extra_cases, chapter=args.chapter,
                       stream=None if args.quiet else sys.stderr, lms=args.lms,
                       lms_assignment=args.lms_assignment, concept_points=args.concept_points)
    except (HarnessError, ValueError, OSError) as err:
        print(f"coursekit grade: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    if args.quiet:
        print(result.summary)
    if not result.records:
        print(f"coursekit grade: no submissions found in {', '.join(args.paths)}",
              file=sys.stderr)
        return 2
    errors = sum(bool(r["extra_data"]["coursekit"]["harness_errors"]) for r in result.records)
    print(f"results in {args.out}/ (grades.csv, "
          + (f"grades-{args.lms}.csv, " if args.lms else "")
          + "summary.md, summary.html, <submission>/results.json and feedback.md)",
          file=sys.stderr)
    return 1 if errors else 0


def _export(args: argparse.Namespace) -> int:
    from coursekit.release import ReleaseError

    if args.tool == "nbgrader":
        from coursekit.export.nbgrader import export
    else:
        from coursekit.export.otter import export
    try:
        written = export(Path(args.dir), solutions=Path(args.solutions), chapter=args.chapter,
                         extra_cases=args.extra_cases)
    except (ReleaseError, ValueError, OSError) as err:
        print(f"coursekit export: {err}", file=sys.stderr)
        return 2
    print(f"wrote the {args.tool} course in {args.dir}: {len(written)} notebook(s)"
          + "".join(f"\n  {p}" for p in written))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="coursekit", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("release", help="write the student edition notebooks/ from solutions/")
    p.add_argument("--solutions", default="solutions")
    p.add_argument("--notebooks", default="notebooks")
    p.add_argument("--check", action="store_true", help="only report whether notebooks/ is stale")
    p.set_defaults(run=_release)

    p = commands.add_parser("store-outputs",
                            help="execute solutions notebooks, keeping outputs of NBVAL_CHECK_OUTPUT cells")
    p.add_argument("paths", nargs="+")
    p.set_defaults(run=_store_outputs)

    p = commands.add_parser(
        "grade", help="grade submitted notebooks in sandboxed workers (Gradescope results.json, "
                      "feedback, class CSV)",
        description="Grade a class's submissions: each PATH is a notebook, a .py file, a folder "
                    "or a zip of them. Student code runs in sandboxed worker processes; the "
                    "grader chooses the inputs, runs the references and decides every verdict.")
    p.add_argument("paths", nargs="*", metavar="PATH")
    p.add_argument("--out", help="folder for the results (created if needed)")
    p.add_argument("--jobs", "-j", type=int, default=None,
                   help="submissions graded in parallel (default: the number of CPUs)")
    p.add_argument("--timeout", type=float, default=60,
                   help="wall and CPU seconds per submission (default 60)")
    p.add_argument("--case-timeout", type=float, default=10,
                   help="wall seconds per exercise cell or case (default 10)")
    p.add_argument("--memory", type=int, default=2048,
                   help="MiB of memory per worker (default 2048)")
    p.add_argument("--output", type=int, default=1024,
                   help="KiB a submission may print before its worker is stopped (default 1024)")
    p.add_argument("--force", action="store_true",
                   help="re-grade submissions whose results are up to date")
    p.add_argument("--extra-cases", metavar="DIR",
                   help="instructor folder of hidden cases (*.py files defining CASES)")
    p.add_argument("--chapter", help="grade every submission as this chapter (e.g. 01)")
    p.add_argument("--concept-points", type=float, default=0.0, metavar="P",
                   help="grade the concept checks each notebook asks, P points each (all or "
                        "nothing), on top of the exercises (default 0: recorded, ungraded)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    p.add_argument("--lms", choices=["canvas", "moodle"],
                   help="also write grades-<lms>.csv in that LMS's gradebook import format; "
                        "students are named by the LMS's bulk download file names")
    p.add_argument("--lms-assignment", metavar="TITLE",
                   help="the gradebook column (Canvas assignment title) for --lms canvas "
                        "(default: Chapter NN)")
    p.add_argument("--gradescope", metavar="ZIP",
                   help="instead of grading, write a Gradescope autograder zip that runs this "
                        "grader (use with --chapter)")
    p.set_defaults(run=_grade)

    p = commands.add_parser(
        "export", help="write the course for nbgrader or Otter-Grader",
        description="Write the chapters as an nbgrader course (source/chNN/) or as Otter-Grader "
                    "master notebooks; each exercise gets a graded test cell that calls "
                    "coursekit's suite, so the scores are those of `coursekit grade`.")
    p.add_argument("tool", choices=["nbgrader", "otter"])
    p.add_argument("dir", metavar="DIR", help="folder to write (created if needed)")
    p.add_argument("--chapter", help="only this chapter (e.g. 03) or notebook (e.g. 02b)")
    p.add_argument("--solutions", default="solutions")
    p.add_argument("--extra-cases", metavar="DIR",
                   help="instructor folder of hidden cases (*.py files defining CASES), kept "
                        "out of what students receive")
    p.set_defaults(run=_export)

    from coursekit import book  # the book: `coursekit book --edition student|instructor`

    p = commands.add_parser("book", help="build the book (instructor or student edition)",
                            description=book.build_help())
    book.add_arguments(p)

    from coursekit import validate  # nbval over both editions, any profile, any seeds

    p = commands.add_parser("validate", help="run every chapter under nbval in a profile and seeds",
                            description=validate.__doc__.split("\n\n")[0])
    validate.add_arguments(p)
    p.set_defaults(run=validate.main)

    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
