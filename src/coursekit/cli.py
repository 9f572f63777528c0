"""The ``coursekit`` command: ``release``, ``store-outputs`` (and more as the book grows)."""

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

    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
