"""The rendered book: two editions from one source, built to work with no network.

``jupyter-book build .`` builds the **instructor edition** into ``_build/html``: the chapters are
``solutions/``, and each exercise shows what a student sees (the stub) with its solution in a
collapsed toggle underneath. ``coursekit book --edition student`` builds the **student edition**
into ``_build/student/html`` from the generated ``notebooks/``: the same pages, with the exercises
as students get them, their ``check(...)`` cells saying "not attempted yet", and launch and download
buttons that open the student notebooks. Both execute every chapter, through jupyter-cache, so an
unchanged chapter is not executed again.

The student table of contents is derived from ``_toc.yml`` (``solutions/X`` becomes
``notebooks/X``), so adding a chapter is one line in ``_toc.yml``.

This module is also the Sphinx extension that ``_config.yml`` loads (``sphinx.extra_extensions``):

- exercises: a label ("Exercise 01.2 · lstm_cell · 3 points") on every exercise cell; in the
  instructor edition the cell shows the student's stub, followed by the solution in a toggle;
- references: a pybtex style ``coursekit`` whose labels read "Vaswani et al. 2017";
- widgets: an output that is only an ipywidget (a tqdm bar) is left out of the static book;
- offline: MathJax is copied into the site from the ``sphinx-mathjax-offline`` package (every
  file a page or MathJax's menu can ask for: :data:`MATHJAX_FILES`) and loaded from there, with the
  speech rule engine pointed at the site's copy of its rules; the ipywidgets state and widget
  manager are not shipped, because the explorers' static HTML/JavaScript version needs no kernel
  and no manager;
- figures: every figure an output shows has a text alternative, the author's (cell metadata
  ``mystnb: {image: {alt: "..."}}``) or one made from the titles and labels its code writes
  (:func:`figure_text`);
- accessibility: every written page goes through :func:`accessible_html`, which names what the
  theme and docutils leave unnamed (the sidebar's section toggles, the solution toggles), puts the
  sidebar's title link in a landmark, gives the bibliography ARIA roles that are current, and
  turns empty table header cells into data cells (the axe-core audit in
  ``tests/test_book_browser.py`` checks every page).
"""

from __future__ import annotations

import argparse
import copy
import html
import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

EDITIONS = ("instructor", "student")
SOLUTIONS, NOTEBOOKS = "solutions/", "notebooks/"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
ROOT = Path(__file__).resolve().parents[2]

# MathJax 3.2 as shipped by the `sphinx-mathjax-offline` wheel: every file a page or MathJax's
# menu can ask for. The combined TeX/CHTML component (the menu is part of it), the TeX extensions
# it autoloads (\boldsymbol, \cancel, ...) and its web fonts; the menu's other renderer (SVG, whose
# font is JavaScript); the accessibility components the menu loads on demand (the explorer, and
# the MathML input it re-reads formulas with); the speech rules of every language the menu
# offers, with Nemeth Braille (3.9 MB, the largest part).
MATHJAX_PACKAGE = "sphinx-mathjax-offline"
MATHJAX_ENTRY = "tex-chtml.js"
MATHJAX_FILES = (
    MATHJAX_ENTRY,
    "input/tex/extensions",
    "output/chtml/fonts/woff-v2",
    "output/svg.js",
    "output/svg/fonts",
    "input/mml.js",
    "a11y",
    "sre/mathmaps",
)
MATHJAX_SPEECH_RULES = "_static/mathjax/sre/mathmaps"
# MathJax 3.2.2 re-renders after a menu change without waiting for the components the change
# loads, so turning on the explorer left every formula blank; this is the maintainers'
# work-around (https://github.com/mathjax/MathJax/issues/3124).
MATHJAX_MENU_RERENDER = """window.MathJax = window.MathJax || {};
MathJax.startup = {...MathJax.startup, ready() {
  const {mathjax} = MathJax._.mathjax, {STATE} = MathJax._.core.MathItem;
  const {Menu} = MathJax._.ui.menu.Menu, rerender = Menu.prototype.rerender;
  Menu.prototype.rerender = function (start = STATE.TYPESET) {
    mathjax.handleRetriesFor(() => rerender.call(this, start));
  };
  MathJax.startup.defaultReady();
}};"""


# ---------------------------------------------------------------------------------------------
# Building an edition


def output_dir(edition: str, source: Path = ROOT) -> Path:
    """Where an edition's HTML goes: ``_build/html`` (instructor) or ``_build/student/html``."""
    _check_edition(edition)
    return source / "_build" / ("html" if edition == "instructor" else "student/html")


def execution_cache(edition: str, source: Path = ROOT) -> Path:
    """The jupyter-cache an edition's build executes through (where myst-nb puts it: next to
    the HTML folder). The test suite fills it with nbval's executions (coursekit.pytest_plugin)."""
    return output_dir(edition, source).parent / ".jupyter_cache"


def student_toc(toc: dict[str, Any]) -> dict[str, Any]:
    """The student edition's table of contents, derived from the instructor's ``_toc.yml``."""

    def convert(entry: Any) -> Any:
        if isinstance(entry, list):
            return [convert(e) for e in entry]
        if not isinstance(entry, dict):
            return entry
        out = {}
        for key, value in entry.items():
            if key in ("file", "glob", "root") and isinstance(value, str) \
                    and value.startswith(SOLUTIONS):
                value = NOTEBOOKS + value[len(SOLUTIONS):]
            out[key] = convert(value)
        return out

    return convert(toc)


def build(edition: str = "instructor", source: Path = ROOT, fresh: bool = False,
          strict: bool = False, execute: bool = True, quiet: bool = False,
          output: Path | None = None) -> Path:
    """Build one edition of the book and return its HTML folder.

    ``fresh`` re-reads every page (the execution cache still applies); ``strict`` turns Sphinx
    warnings into errors; ``execute=False`` renders stored outputs only (a quick draft);
    ``output`` replaces the edition's usual HTML folder (:func:`output_dir`). Raises
    ``RuntimeError`` when the build fails.
    """
    import yaml
    from jupyter_book.sphinx import build_sphinx

    _check_edition(edition)
    source = Path(source).resolve()
    out = Path(output).resolve() if output else output_dir(edition, source)
    # what `jupyter-book build` passes, plus the edition
    overrides: dict[str, Any] = {"latex_individualpages": False, "coursekit_edition": edition}
    toc = source / "_toc.yml"
    if edition == "student":
        derived = yaml.safe_load(toc.read_text(encoding="utf-8"))
        toc = out.parent / "_toc.yml"
        toc.parent.mkdir(parents=True, exist_ok=True)
        toc.write_text("# Generated by `coursekit book --edition student` from _toc.yml.\n"
                       + yaml.safe_dump(student_toc(derived), sort_keys=False), encoding="utf-8")
        overrides["exclude_patterns"] = _student_excludes(source)
    overrides["external_toc_path"] = toc.as_posix()
    if not execute:
        overrides["nb_execution_mode"] = "off"
    result = build_sphinx(source, out, noconfig=True, path_config=str(source / "_config.yml"),
                          confoverrides=overrides, freshenv=fresh, warningiserror=strict,
                          keep_going=strict, quiet=quiet)
    if result != 0:
        raise RuntimeError(f"the {edition} edition did not build: {result}")
    return out


def _student_excludes(source: Path) -> list[str]:
    import yaml

    config = yaml.safe_load((source / "_config.yml").read_text(encoding="utf-8"))
    patterns = [p for p in config.get("exclude_patterns", []) if p.rstrip("/") != "notebooks"]
    return [*patterns, "solutions"]


def _check_edition(edition: str) -> None:
    if edition not in EDITIONS:
        raise ValueError(f"edition must be one of {EDITIONS}, not {edition!r}")


def build_help() -> str:
    return ("Build the book: the instructor edition (solutions in collapsed toggles) into "
            "_build/html, or the student edition (exercises without solutions) into "
            "_build/student/html. Chapters are executed; unchanged ones come from the cache.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--edition", choices=EDITIONS, default="instructor")
    parser.add_argument("--all", action="store_true", dest="fresh",
                        help="re-read every page (executed chapters still come from the cache)")
    parser.add_argument("--strict", action="store_true", help="fail on any Sphinx warning")
    parser.add_argument("--no-execute", action="store_false", dest="execute",
                        help="do not execute chapters: a quick draft with stored outputs only")
    parser.add_argument("--pdf", action="store_true",
                        help="then print the edition into one PDF, solutions open "
                             "(_build/pdf/book-instructor.pdf; needs Chromium: see coursekit.pdf)")
    parser.set_defaults(run=run)


def pdf_path(edition: str, source: Path = ROOT) -> Path:
    """Where ``coursekit book --pdf`` writes an edition's PDF: ``_build/pdf/book-instructor.pdf``
    or ``_build/student/pdf/book-student.pdf``."""
    return output_dir(edition, source).parent / "pdf" / f"book-{edition}.pdf"


def run(args: argparse.Namespace) -> int:
    try:
        out = build(args.edition, fresh=args.fresh, strict=args.strict, execute=args.execute)
    except RuntimeError as err:
        print(f"coursekit book: {err}", file=sys.stderr)
        return 1
    print(f"the {args.edition} edition is in {out}/ (open index.html)")
    if getattr(args, "pdf", False):
        from coursekit.pdf import build_pdf

        target = pdf_path(args.edition)
        try:
            printed = build_pdf(out, target)
        except RuntimeError as err:
            print(f"coursekit book --pdf: {err}", file=sys.stderr)
            return 1
        print(f"printed {len(printed)} pages of the book into {target} "
              f"({sum(n for *_, n in printed)} PDF pages)")
    return 0


# ---------------------------------------------------------------------------------------------
# The Sphinx extension


def setup(app) -> dict[str, Any]:
    from sphinx.transforms.post_transforms import SphinxPostTransform

    class ExerciseCells(SphinxPostTransform):
        """Label exercise cells; in the instructor edition, stub + solution in a toggle."""

        default_priority = 198  # before myst-nb's HideInputCells (199)
        formats = ("html",)

        def run(self, **kwargs: Any) -> None:
            edition = self.app.config.coursekit_edition
            for cell in list(self.document.findall(_is_exercise_cell)):
                _render_exercise(cell, edition, self.env.docname)

    class WidgetOnlyOutputs(SphinxPostTransform):
        """Drop outputs that are an ipywidget with no static version (a tqdm bar, whose text is
        its state when first shown, "0%"): the static book could only show them wrong."""

        default_priority = 3  # before myst-nb selects a mime type (4)
        formats = ("html",)

        def run(self, **kwargs: Any) -> None:
            for bundle in list(self.document.findall(_is_widget_only)):
                output = bundle.parent
                output.remove(bundle)
                if output.get("nb_element") == "cell_code_output" and not output.children:
                    output.parent.remove(output)

    class FigureText(SphinxPostTransform):
        """Every figure a code cell draws gets a text alternative: the author's (the cell's
        metadata ``mystnb: {image: {alt: "..."}}``, which myst-nb applies) or else one made from
        the titles and axis labels the cell's code writes, never the file's name (docutils'
        default, which a screen reader would spell out)."""

        default_priority = 200  # after myst-nb has chosen each output's mime type (4)
        formats = ("html",)

        def run(self, **kwargs: Any) -> None:
            from docutils import nodes

            for cell in self.document.findall(_is_code_cell):
                images = [i for i in cell.findall(nodes.image) if not i.get("alt")]
                source = next((c.astext() for c in cell.findall(nodes.literal_block)), "")
                for n, image in enumerate(images, 1):
                    image["alt"] = figure_text(source, n, len(images))

    _register_author_year_style()
    app.add_config_value("coursekit_edition", "instructor", "env", [str])
    app.add_post_transform(ExerciseCells)
    app.add_post_transform(WidgetOnlyOutputs)
    app.add_post_transform(FigureText)
    app.connect("config-inited", _configure)
    app.connect("doctree-read", _drop_widget_scripts)
    app.connect("html-page-context", _drop_thebe)
    app.connect("html-page-context", _configure_mathjax_menu, priority=600)  # after MathJax (500)
    app.connect("build-finished", _copy_mathjax)
    app.connect("builder-inited", _write_accessible_pages)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}


def _configure(app, config) -> None:
    _check_edition(config.coursekit_edition)
    config.html_title = f"{config.html_title or config.project} · {config.coursekit_edition} edition"
    if _mathjax_source() is None:
        from sphinx.errors import ConfigError

        raise ConfigError(f"the book serves MathJax itself: pip install {MATHJAX_PACKAGE}")
    config.mathjax_path = f"mathjax/{MATHJAX_ENTRY}"  # relative: served from _static/


def _is_exercise_cell(node) -> bool:
    from docutils import nodes

    return (isinstance(node, nodes.container) and node.get("nb_element") == "cell_code"
            and "exercise" in (node.get("cell_metadata") or {}).get("tags", []))


def _is_code_cell(node) -> bool:
    from docutils import nodes

    return isinstance(node, nodes.container) and node.get("nb_element") == "cell_code"


_FIGURE_WORDS = re.compile(
    r"""\b(?:set_title|suptitle|title|set_xlabel|xlabel|set_ylabel|ylabel)\(\s*[rf]?(["'])(.+?)\1""")


def figure_text(source: str, n: int = 1, count: int = 1) -> str:
    """A figure's fallback text alternative, from the titles and axis labels its cell's code
    writes as plain strings: "Figure from the code cell: Attention weights; key; query"."""
    words = list(dict.fromkeys(w for _, w in _FIGURE_WORDS.findall(source) if "{" not in w))
    which = f"Figure {n} of {count}" if count > 1 else "Figure"
    return f"{which} from the code cell" + (f": {'; '.join(words)}" if words else "")


def _register_author_year_style() -> None:
    """pybtex style ``coursekit``: the plain style, sorted by author and year, with labels that
    match author-year citations: "Elman 1990", "Hochreiter & Schmidhuber 1997",
    "Vaswani et al. 2017" (a, b, ... when two would be equal)."""
    from collections import Counter

    import pybtex.plugin
    from pybtex.style.formatting.plain import Style as Plain
    from pybtex.style.labels import BaseLabelStyle

    def surname(person) -> str:
        return " ".join(str(part) for part in person.rich_last_names)

    class AuthorYear(BaseLabelStyle):
        def format_labels(self, sorted_entries):
            labels = []
            for entry in sorted_entries:
                people = [surname(p) for p in entry.persons.get("author", [])] or ["Anon."]
                who = (people[0] if len(people) == 1 else " & ".join(people) if len(people) == 2
                       else f"{people[0]} et al.")
                labels.append(f"{who} {entry.fields.get('year', 'n.d.')}")
            counts, seen = Counter(labels), Counter()
            for label in labels:
                seen[label] += 1
                yield label if counts[label] == 1 else f"{label}{'abcdefghij'[seen[label] - 1]}"

    class Style(Plain):
        default_label_style = AuthorYear

    pybtex.plugin.register_plugin("pybtex.style.labels", "coursekit", AuthorYear, force=True)
    pybtex.plugin.register_plugin("pybtex.style.formatting", "coursekit", Style, force=True)


def _is_widget_only(node) -> bool:
    from docutils import nodes

    if not (isinstance(node, nodes.container) and node.get("nb_element") == "mime_bundle"):
        return False
    types = {child.get("mime_type") for child in node.children}
    return WIDGET_VIEW in types and types <= {WIDGET_VIEW, "text/plain"}


def _render_exercise(cell, edition: str, docname: str) -> None:
    from docutils import nodes
    from myst_nb.sphinx_ import HideCodeCellNode

    from coursekit.release import BEGIN, END, strip_solution

    meta = cell["cell_metadata"].get("coursekit") or {}
    number, name = meta.get("exercise", "?"), meta.get("name", "?")
    points = meta.get("points")
    label = nodes.paragraph(classes=["ck-exercise-label"])
    label += nodes.strong(text=f"Exercise {number}")
    label += nodes.Text(" · ")
    label += nodes.literal(text=name)
    if points is not None:
        label += nodes.Text(f" · {float(points):g} point{'s' if float(points) != 1 else ''}")
    cell.insert(0, label)

    source = next((c for c in cell.children if c.get("nb_element") == "cell_code_source"), None)
    block = source and next(iter(source.findall(nodes.literal_block)), None)
    if block is None or BEGIN not in block.astext():
        return
    full = block.astext()
    stub = strip_solution(full, str(number), f"{docname}, exercise {number}")
    block.replace_self(_code_like(block, stub))
    if edition != "instructor":  # a solutions notebook in the student edition: never show it
        return
    solution = "\n".join(line for line in full.splitlines() if line.strip() not in (BEGIN, END))
    toggle = HideCodeCellNode(prompt_show="Show solution", prompt_hide="Hide solution",
                              classes=["below-input", "ck-solution"])
    toggle += nodes.container("", _code_like(block, solution), classes=["cell_input"],
                              nb_element="cell_code_source")
    cell.insert(cell.index(source) + 1, toggle)


def _code_like(block, text: str):
    """A literal block with ``block``'s language and options, holding ``text``."""
    from docutils import nodes

    new = nodes.literal_block(text, text)
    for key in ("language", "linenos", "highlight_args", "classes", "source", "line"):
        if block.get(key) is not None:
            new[key] = copy.deepcopy(block[key])
    return new


def _drop_widget_scripts(app, doctree) -> None:
    """The static book shows each explorer's HTML version: no widget state, no widget manager."""
    data = getattr(app.env, "nb_metadata", {}).get(app.env.docname, {})
    for key in [k for k in data.get("js_files", {}) if k.startswith("ipywidgets_")]:
        del data["js_files"][key]


def _drop_thebe(app, pagename, templatename, context, doctree) -> None:
    """Without live code (``launch_buttons.thebe: false``), sphinx-thebe's scripts only cost:
    it adds its set-up twice (a JavaScript error) and names a CDN."""
    if (app.config.html_theme_options.get("launch_buttons") or {}).get("thebe"):
        return

    def thebe(entry) -> bool:
        body = getattr(entry, "attributes", {}).get("body", "")
        return "thebe" in str(getattr(entry, "filename", entry) or "") or "THEBE_JS_URL" in body

    for key in ("script_files", "css_files"):
        if key in context:
            # in place: these are the builder's lists, which later handlers still add to
            context[key][:] = [e for e in context[key] if not thebe(e)]


def _configure_mathjax_menu(app, pagename, templatename, context, doctree) -> None:
    """On a page that loads MathJax, before it runs: the speech rule engine reads its rules from
    the site (its default is jsDelivr, and only a11y/sre.js re-points it, so a speech language set
    before the explorer loaded was fetched from the network), and the menu's re-render waits for
    the components it loads."""
    scripts = [str(getattr(js, "filename", js)) for js in context.get("script_files", [])]
    if not any(name.endswith(f"mathjax/{MATHJAX_ENTRY}") for name in scripts):
        return
    rules = context["pathto"](MATHJAX_SPEECH_RULES, resource=True)
    body = f"window.SREfeature = {{json: {json.dumps(rules)}}};\n{MATHJAX_MENU_RERENDER}"
    app.builder.add_js_file("", body=body, priority=501)  # after the MathJax configuration


def _mathjax_source() -> Path | None:
    spec = importlib.util.find_spec(MATHJAX_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "static" / "mathjax"


def _copy_mathjax(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    source = _mathjax_source()
    target = Path(app.outdir) / "_static" / "mathjax"
    for name in MATHJAX_FILES:
        src, dst = source / name, target / name
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True)
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)


# ---------------------------------------------------------------------------------------------
# Accessibility of the written pages
#
# An axe-core audit of the built book (tests/test_book_browser.py) found markup that the book's
# sources cannot change: pydata-sphinx-theme's sidebar toggles (<summary> holding only a chevron
# icon: no accessible name), sphinx-book-theme's title link in the primary sidebar (outside every
# landmark), docutils' bibliography (role "doc-biblioentry", deprecated in ARIA 1.2, under a
# role="list" whose items then are not list items) and Markdown tables with an empty corner
# header cell; and myst-nb names every toggle "Toggle hidden content", whatever it hides. The
# patterns below are the markup these packages write (pinned in requirements.txt); a pattern
# that stops matching after an upgrade leaves the page as it was, and the audit fails again.

_TOC_TOGGLE = re.compile(
    r'(<li class="toctree-l\d[^"]*has-children[^"]*">\s*<a [^>]*>(?P<title>.*?)</a>\s*'
    r'<details(?: open="open")?>\s*)<summary>', re.S)
_SIDEBAR_TITLE = re.compile(r'<div class="sidebar-primary-item">(\s*<a class="navbar-brand)')
_BIBLIOENTRY = re.compile(r'(<div class="citation" id="[^"]*") role="doc-biblioentry"')
_EMPTY_HEADER = re.compile(r'<th class="head">\s*(?:<p>\s*</p>\s*)?</th>')
_SOLUTION_TOGGLE = re.compile(
    r'(<details class="[^"]*\bck-solution\b[^"]*">\s*<summary) aria-label="Toggle hidden content"')


def accessible_html(page: str) -> str:
    """A written page with the fixes above: each sidebar toggle is named after its chapter
    ("Sections of 7. GPT: ..."), the solution toggles take their name from their visible text
    ("Show solution" / "Hide solution"), the sidebar's title link is a navigation landmark,
    bibliography entries are list items, and an empty header cell is a data cell."""

    def name_toggle(match: re.Match) -> str:
        title = html.unescape(re.sub(r"<[^>]+>", "", match["title"])).strip()
        return f'{match[1]}<summary aria-label="{html.escape(f"Sections of {title}")}">'

    page = _TOC_TOGGLE.sub(name_toggle, page)
    page = _SOLUTION_TOGGLE.sub(r"\1", page)
    page = _SIDEBAR_TITLE.sub(
        r'<div class="sidebar-primary-item" role="navigation" aria-label="Book title">\1', page)
    page = _BIBLIOENTRY.sub(r'\1 role="listitem"', page)
    return _EMPTY_HEADER.sub('<td class="head"></td>', page)


def _write_accessible_pages(app) -> None:
    """Every page the HTML builder renders from its templates passes through
    :func:`accessible_html` (the search page and the index included)."""
    templates = getattr(app.builder, "templates", None)
    if app.builder.format != "html" or templates is None \
            or getattr(templates, "_coursekit_accessible", False):
        return
    render = templates.render

    def render_accessible(template: str, context: dict[str, Any]) -> str:
        out = render(template, context)
        return accessible_html(out) if template.endswith(".html") else out

    templates.render = render_accessible
    templates._coursekit_accessible = True
