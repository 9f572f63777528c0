"""Running a notebook's exercise cells, the way both the tests and the batch grader do.

The contract with students: the grader runs only the code cells tagged ``exercise``, in order, in
a namespace that already holds ``math``, ``numpy as np``, ``torch``, ``torch.nn as nn`` and
``torch.nn.functional as F``. A helper an exercise needs belongs inside its exercise cell.
"""

from __future__ import annotations

from typing import Any

PRELUDE = (
    "import math\nimport numpy as np\nimport torch\nimport torch.nn as nn\n"
    "import torch.nn.functional as F\n"
)


def exercise_namespace(nb, run_cells: bool = True) -> tuple[dict[str, Any], dict[str, str]]:
    """Execute a notebook's exercise cells; return the namespace and per-exercise load errors.

    A cell that fails to run (syntax error, exception at definition time) costs only its own
    exercise: the error is recorded under the exercise's name and the other cells still run.
    """
    from coursekit.release import exercises

    namespace: dict[str, Any] = {"__name__": "__submission__"}
    exec(PRELUDE, namespace)
    errors: dict[str, str] = {}
    for ex in exercises(nb):
        source = nb.cells[ex.cell_index].source
        try:
            code = compile(source, f"<exercise {ex.exercise}>", "exec")
            if run_cells:
                exec(code, namespace)
        except Exception as err:  # reported per exercise; the others still load
            errors[ex.name] = f"the cell did not run: {type(err).__name__}: {err}"
    return namespace, errors
