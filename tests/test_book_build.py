"""The book's two editions and offline assets, without a browser (tests/test_book_browser.py
opens the built book)."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest
import yaml
from docutils import nodes
from docutils.frontend import get_default_settings
from docutils.parsers.rst import Parser
from docutils.utils import new_document

from coursekit import book
from coursekit.release import BEGIN, END

# sphinx-jupyterbook-latex still calls docutils' traverse(); nothing this project can change
pytestmark = pytest.mark.filterwarnings("ignore:nodes.Node.traverse:PendingDeprecationWarning")
ROOT = Path(__file__).resolve().parents[1]
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))


def _files(toc) -> list[str]:
    if isinstance(toc, list):
        return [f for entry in toc for f in _files(entry)]
    if isinstance(toc, dict):
        own = [toc[k] for k in ("root", "file") if k in toc]
        return own + [f for k, v in toc.items() if k not in ("root", "file") for f in _files(v)]
    return []


def test_every_toc_entry_exists_in_both_editions():
    for edition in (TOC, book.student_toc(TOC)):
        for name in _files(edition):
            assert any((ROOT / f"{name}{s}").exists() for s in (".md", ".ipynb")), name


def test_the_student_toc_swaps_solutions_for_notebooks_and_keeps_the_rest():
    toc = {"format": "jb-book", "root": "book/intro",
           "parts": [{"caption": "Chapters", "chapters": [
               {"file": "solutions/01_a"}, {"file": "solutions/02_b", "sections": [
                   {"file": "solutions/02_c"}]}]},
                     {"caption": "Reference", "chapters": [{"file": "book/references"}]}]}
    student = book.student_toc(toc)
    assert _files(student) == ["book/intro", "notebooks/01_a", "notebooks/02_b",
                               "notebooks/02_c", "book/references"]
    assert toc["parts"][0]["chapters"][0]["file"] == "solutions/01_a"  # the input is untouched
    chapters = [f for f in _files(book.student_toc(TOC)) if not f.startswith("book/")]
    assert chapters and all(f.startswith("notebooks/") for f in chapters)


def test_editions_are_checked_and_built_in_separate_folders():
    assert book.output_dir("instructor", ROOT) == ROOT / "_build" / "html"
    assert book.output_dir("student", ROOT) == ROOT / "_build" / "student" / "html"
    with pytest.raises(ValueError, match="edition"):
        book.output_dir("teacher", ROOT)


def _exercise_cell(source: str) -> nodes.container:
    """A code cell as myst-nb puts it in the doctree."""
    document = new_document("test", get_default_settings(Parser))
    meta = {"tags": ["exercise"], "coursekit": {"exercise": "09.1", "name": "f", "points": 2}}
    cell = nodes.container(nb_element="cell_code", cell_metadata=meta, classes=["cell"])
    code = nodes.container(nb_element="cell_code_source", classes=["cell_input"])
    code += nodes.literal_block(source, source, language="ipython3")
    cell += code
    document += cell
    return cell


SOLVED = "def f(x):\n    y = 1\n    ### BEGIN SOLUTION\n    return x + y\n    ### END SOLUTION"


def test_instructor_edition_shows_the_stub_then_the_solution_in_a_collapsed_toggle():
    from myst_nb.sphinx_ import HideCodeCellNode

    cell = _exercise_cell(SOLVED)
    book._render_exercise(cell, "instructor", "solutions/09_x")
    label, stub, toggle = cell.children
    assert label.astext() == "Exercise 09.1 · f · 2 points"
    assert stub.astext() == ('def f(x):\n    y = 1\n    # YOUR CODE HERE\n'
                             '    raise NotImplementedError("Exercise 09.1")')
    assert isinstance(toggle, HideCodeCellNode) and "ck-solution" in toggle["classes"]
    assert toggle["prompt_show"] == "Show solution"
    assert toggle.astext() == "def f(x):\n    y = 1\n    return x + y"
    assert next(iter(toggle.findall(nodes.literal_block)))["language"] == "ipython3"


def test_student_edition_never_shows_a_solution():
    cell = _exercise_cell(SOLVED)
    book._render_exercise(cell, "student", "solutions/09_x")
    assert "return x + y" not in cell.astext() and "SOLUTION" not in cell.astext()
    assert "raise NotImplementedError" in cell.astext()
    released = _exercise_cell('def f(x):\n    # YOUR CODE HERE\n    raise NotImplementedError("x")')
    before = released.children[0].astext()
    book._render_exercise(released, "student", "notebooks/09_x")
    assert [c.astext() for c in released.children] == ["Exercise 09.1 · f · 2 points", before]


def test_mathjax_is_shipped_by_an_installed_package():
    source = book._mathjax_source()
    assert source is not None, f"pip install {book.MATHJAX_PACKAGE}"
    for name in book.MATHJAX_FILES:
        assert (source / name).exists(), name
    fonts = list((source / "output/chtml/fonts/woff-v2").glob("*.woff"))
    assert len(fonts) > 20


def test_the_config_loads_the_extension_and_no_cdn_scripts():
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    assert "coursekit.book" in config["sphinx"]["extra_extensions"]
    assert config["sphinx"]["config"]["nb_ipywidgets_js"] == {}
    assert config["launch_buttons"].get("thebe") is False
    assert (ROOT / config["bibtex_bibfiles"][0]).exists()


class _Text(HTMLParser):
    """The visible text of an HTML page (syntax-highlighted code joined back into lines)."""

    def __init__(self):
        super().__init__()
        self.parts, self._skip = [], 0

    def handle_starttag(self, tag, attrs):
        self._skip += tag in ("script", "style")

    def handle_endtag(self, tag):
        self._skip -= tag in ("script", "style")

    def handle_data(self, data):
        if not self._skip:
            self.parts.append(data)


def _page_text(path: Path) -> str:
    parser = _Text()
    parser.feed(path.read_text(encoding="utf-8"))
    return "".join(parser.parts)


def _solution_lines(chapter: str) -> list[str]:
    """Lines that only a chapter's solutions contain: between BEGIN and END SOLUTION, long
    enough to be unmistakable, and absent from the student notebook."""
    lines = []
    for path in [ROOT / "solutions" / f"{chapter}.ipynb"]:
        student = (ROOT / "notebooks" / path.name).read_text(encoding="utf-8")
        for cell in nbformat.read(path, as_version=4).cells:
            inside = False
            for line in cell.source.splitlines():
                if line.strip() in (BEGIN, END):
                    inside = line.strip() == BEGIN
                elif inside and len(line.strip()) > 15 and line.strip() not in student:
                    lines.append(line.strip())
    return lines


CHAPTERS = [f.split("/", 1)[1] for f in _files(TOC) if f.startswith("solutions/")]
# the chapters' notebooks that hold exercises (a chapter's later notebooks may hold none)
EXERCISED = [c for c in CHAPTERS if any(
    "exercise" in cell.metadata.get("tags", [])
    for cell in nbformat.read(ROOT / "solutions" / f"{c}.ipynb", as_version=4).cells)]


@pytest.fixture(scope="module")
def drafts(tmp_path_factory) -> tuple[Path, Path]:
    """Both editions, built without executing (stored outputs only): their HTML folders."""
    out = tmp_path_factory.mktemp("book")
    return (book.build("instructor", output=out / "i", execute=False, quiet=True),
            book.build("student", output=out / "s", execute=False, quiet=True))


def test_the_student_edition_has_every_exercise_and_no_solution(drafts):
    """The solutions are in the instructor edition's toggles and nowhere in the student
    edition."""
    instructor, student = drafts
    assert not (student / "solutions").exists()
    assert len(EXERCISED) >= 4, EXERCISED
    for chapter in EXERCISED:
        solutions = _solution_lines(chapter)
        assert solutions, chapter
        page = instructor / "solutions" / f"{chapter}.html"
        text, raw = _page_text(page), page.read_text(encoding="utf-8")
        labels = raw.count('class="ck-exercise-label"')
        assert labels >= 1 and raw.count('class="admonition hide below-input ck-solution"') == labels
        assert 'raise NotImplementedError("Exercise' in text  # the stub, above each toggle
        assert [line for line in solutions if line in text], f"{chapter}: no solution shown"

        page = student / "notebooks" / f"{chapter}.html"
        text, raw = _page_text(page), page.read_text(encoding="utf-8")
        assert raw.count('class="ck-exercise-label"') == labels
        assert 'raise NotImplementedError("Exercise' in text
        assert "ck-solution" not in raw
        assert not [line for line in solutions if line in text], f"{chapter}: a solution leaked"
        assert f"notebooks/{chapter}.ipynb" in raw  # launch and download the student's notebook


def test_the_site_serves_mathjax_and_everything_its_menu_loads(drafts):
    """The SVG renderer and its font, the explorer's components and the speech rules of every
    language; a page with math points the speech rule engine at them before MathJax runs."""
    site = drafts[0]
    mathjax = site / "_static" / "mathjax"
    assert all((mathjax / name).exists() for name in book.MATHJAX_FILES)
    assert (mathjax / "output/svg/fonts/tex.js").exists() and (mathjax / "a11y/explorer.js").exists()
    rules = {p.name for p in (mathjax / "sre/mathmaps").glob("*.json")}
    assert rules == {p.name for p in (book._mathjax_source() / "sre/mathmaps").glob("*.json")}
    assert {"base.json", "en.json", "de.json", "nemeth.json"} <= rules
    page = (site / "solutions" / f"{CHAPTERS[0]}.html").read_text(encoding="utf-8")
    assert 'window.SREfeature = {json: "../_static/mathjax/sre/mathmaps"};' in page
    assert page.index("window.MathJax = {") < page.index("window.SREfeature")
    assert "SREfeature" not in (site / "genindex.html").read_text(encoding="utf-8")  # no math


def test_every_page_offers_a_way_to_report_a_mistake(drafts):
    """The theme's issue button, from the one repository setting: a new issue naming the page."""
    repo = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))["repository"]["url"]
    for site in drafts:
        pages = [p for p in site.rglob("*.html") if "_static" not in p.parts]
        assert len(pages) > 20, site
        for page in pages:
            raw = page.read_text(encoding="utf-8")
            if 'http-equiv="Refresh"' in raw:  # index.html: a redirect to the first page
                continue
            assert f'href="{repo}/issues/new?title=' in raw, f"{page.relative_to(site)}: no issue button"
