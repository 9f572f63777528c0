"""The book's notation (book/notation.md) is kept automatically: every formula in the markdown
of solutions/ is checked against the page's table of spellings the book does not use."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "book" / "notation.md"
MATH = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$", re.S)


def rules() -> list[tuple[re.Pattern, str, str]]:
    """(pattern, instead, why) from the page's table under 'Spellings the book does not use'."""
    text = PAGE.read_text()
    section = text.split("## Spellings the book does not use", 1)[1]
    found = []
    for line in section.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if len(cells) == 3 and cells[0].startswith("`") and cells[0].endswith("`"):
            pattern = cells[0][1:-1].replace("\\|", "|")
            found.append((re.compile(pattern), cells[1].replace("`", ""), cells[2]))
    return found


def formulas(path: Path):
    nb = nbformat.read(path, as_version=4)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        text = re.sub(r"```.*?```|`[^`\n]*`", "", cell.source, flags=re.S)  # code is not math
        for match in MATH.finditer(text):
            yield index, match.group(1) or match.group(2)


def test_the_page_has_rules_and_each_rule_catches_what_it_names():
    table = rules()
    assert len(table) >= 5
    examples = {r"W_Q x": 0, r"W^{V}": 1, r"\mathbf{x}": 2, r"|V| \times d": 3,
                r"d_{model}": 4, r"\text{softmax}(e)": 5}
    for formula, rule in examples.items():
        assert table[rule][0].search(formula), f"rule {rule} misses {formula!r}"
    for fine in [r"\boldsymbol{W}^Q", r"\lvert\mathcal{V}\rvert", r"d_\text{model}",
                 r"\operatorname{softmax}", r"\boldsymbol{W}_{ih}", r"\sum_j |a_j|",
                 r"|\mathcal{V}|"]:
        assert not any(p.search(fine) for p, _i, _w in table), f"a rule flags {fine!r}"


@pytest.mark.parametrize("path", sorted((ROOT / "solutions").glob("*.ipynb")), ids=lambda p: p.stem)
def test_every_formula_follows_the_notation_page(path):
    table = rules()
    problems = [f"cell {index}: ${formula.strip()[:80]}$ writes {m.group(0)!r}; the book writes "
                f"{instead} ({why})"
                for index, formula in formulas(path) for pattern, instead, why in table
                if (m := pattern.search(formula))]
    assert not problems, f"{path.name} leaves book/notation.md in {len(problems)} places:\n" + \
        "\n".join(problems)


# Chapters 3 to 6 and 8a write every query, key, value, input and weight matrix in bold; a bare
# Q, K, V, X or A in their math is a matrix left plain (Chapter 9 uses A for LoRA's factor and
# Chapter 7 V in the vocabulary's name, so the rule is these chapters'). Superscripts such as
# W^{QK} name a matrix's role, not a matrix.
BOLD_CHAPTERS = ["03_self_attention", "04_multi_head_attention", "05_positional_encoding",
                 "06a_transformer_blocks", "06b_encoder_decoder", "08a_vit"]
UPRIGHT = re.compile(r"\\(boldsymbol|mathbb|mathrm|mathcal|operatorname|text)\{[^{}]*\}|\^\{[A-Z]+(\\top)?\}")
PLAIN_MATRIX = re.compile(r"(?<![\\A-Za-z_^])[QKVXA](?![a-z])")


@pytest.mark.parametrize("stem", BOLD_CHAPTERS)
def test_these_chapters_write_their_matrices_in_bold(stem):
    found = list(formulas(ROOT / "solutions" / f"{stem}.ipynb"))
    assert len(found) > 50
    bad = [f"cell {i}: ${f.strip()[:80]}$" for i, f in found if PLAIN_MATRIX.search(UPRIGHT.sub("", f))]
    assert not bad, f"{stem}: matrices not in bold:\n" + "\n".join(bad[:10])
    assert PLAIN_MATRIX.search(UPRIGHT.sub("", r"\operatorname{softmax}(Q K^\top)"))
    assert not PLAIN_MATRIX.search(UPRIGHT.sub("", r"\boldsymbol{Q}\boldsymbol{K}^\top"))
    assert not PLAIN_MATRIX.search(UPRIGHT.sub("", r"\boldsymbol{W}^{QK}, \lvert\mathcal{V}\rvert"))
    assert PLAIN_MATRIX.search(UPRIGHT.sub("", r"V \times d_\text{model}"))
