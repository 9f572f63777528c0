"""The printable PDF (coursekit.pdf): Chromium prints built pages, pypdf merges them.

A small site written here stands for the built book: a first page (where index.html redirects,
as jupyter-book's does) whose "next" link leads to a chapter with two figures and an exercise
whose solution sits in a collapsed toggle. The PDF must hold the chapter's title, the solution
(the toggle printed open) and every figure, in the book's order, with one bookmark per page.
Where the book has been built (``_build/html``), its first chapter is printed too. Skipped
without Chromium, like the browser test (``COURSEKIT_REQUIRE_BROWSER=1`` makes it mandatory).
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from coursekit import pdf

ROOT = Path(__file__).resolve().parents[1]
BUILT = ROOT / "_build" / "html"

if pdf.chromium() is None:
    if os.environ.get("COURSEKIT_REQUIRE_BROWSER") == "1":
        pytest.fail("Chromium is missing; COURSEKIT_REQUIRE_BROWSER=1 makes it mandatory",
                    pytrace=False)
    pytest.skip("Chromium is not installed (`sudo apt-get install chromium`): no PDF is printed",
                allow_module_level=True)
import pypdf  # noqa: E402  (pinned in requirements.txt)


def _figure(seed: int) -> bytes:
    """A distinct small PNG (a plot), as the book's figures are."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot(np.random.default_rng(seed).normal(size=20).cumsum())
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=60)
    plt.close(fig)
    return buffer.getvalue()


PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>{title}</title></head>
<body><article class="bd-article">{body}</article>{next}</body></html>"""


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("site")
    (root / "book").mkdir()
    (root / "solutions").mkdir()
    (root / "_images").mkdir()
    for n in (1, 2):
        (root / "_images" / f"figure{n}.png").write_bytes(_figure(n))
    (root / "index.html").write_text(
        '<!DOCTYPE html><html><head><meta http-equiv="Refresh" content="0; url=book/intro.html" />'
        "</head></html>", encoding="utf-8")
    (root / "book" / "intro.html").write_text(PAGE.format(
        title="Intro", body="<h1>The course<a class='headerlink' href='#'>#</a></h1><p>Welcome.</p>",
        next='<a class="right-next" href="../solutions/01_demo.html">next</a>'), encoding="utf-8")
    chapter = """<h1>1. Attention as soft search</h1>
      <p>Prose before the first figure.</p><img alt="first" src="../_images/figure1.png">
      <p class="ck-exercise-label"><strong>Exercise 01.1</strong></p>
      <pre>raise NotImplementedError</pre>
      <details class="ck-solution"><summary>Show solution</summary>
        <pre>return softmax_of_scores_solution</pre></details>
      <img alt="second" src="../_images/figure2.png">"""
    (root / "solutions" / "01_demo.html").write_text(
        PAGE.format(title="Chapter", body=chapter, next=""), encoding="utf-8")
    return root


def _images(reader) -> int:
    return sum(len(page.images) for page in reader.pages)


def test_one_chapter_prints_with_its_title_its_solution_and_every_figure(site, tmp_path):
    out = tmp_path / "chapter.pdf"
    printed = pdf.build_pdf(site, out, pages=["solutions/01_demo.html"])
    assert [(path, title) for path, title, _ in printed] == [
        ("solutions/01_demo.html", "1. Attention as soft search")]
    reader = pypdf.PdfReader(out)
    text = "\n".join(page.extract_text() for page in reader.pages)
    assert "1. Attention as soft search" in text
    assert "softmax_of_scores_solution" in text, "the solution toggle was not printed open"
    assert _images(reader) == 2, f"{_images(reader)} figures in the PDF, the page has 2"


def test_the_book_prints_in_order_from_the_first_page_with_a_bookmark_each(site, tmp_path):
    out = tmp_path / "book.pdf"
    printed = pdf.build_pdf(site, out)
    assert [title for _, title, _ in printed] == ["The course", "1. Attention as soft search"]
    reader = pypdf.PdfReader(out)
    assert [item["/Title"] for item in reader.outline] == ["The course",
                                                          "1. Attention as soft search"]
    text = "\n".join(page.extract_text() for page in reader.pages)
    assert text.index("Welcome.") < text.index("Prose before the first figure.")
    assert len(reader.pages) == sum(n for *_, n in printed)


def test_coursekit_book_takes_pdf_and_writes_next_to_the_edition():
    import argparse

    from coursekit import book

    parser = argparse.ArgumentParser()
    book.add_arguments(parser)
    assert parser.parse_args(["--pdf"]).pdf and not parser.parse_args([]).pdf
    assert book.pdf_path("instructor", ROOT) == ROOT / "_build" / "pdf" / "book-instructor.pdf"
    assert book.pdf_path("student", ROOT) == ROOT / "_build" / "student" / "pdf" / "book-student.pdf"
