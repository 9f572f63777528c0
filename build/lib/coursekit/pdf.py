"""The book as one printable PDF: Chromium's print-to-PDF of the built pages, merged in order.

``coursekit book --pdf`` builds an edition and then writes ``_build/pdf/book-instructor.pdf``
(``_build/student/pdf/book-student.pdf`` for the student edition); ``python -m coursekit.pdf
SITE OUT.pdf`` prints an edition already built into SITE. Each page of the site is opened, in the
book's order (the chain of "next" links from the first page), in headless Chromium (Debian's
``chromium``, driven by Playwright, as the browser test does), served from 127.0.0.1 and with no
other request allowed. Before printing, its math is typeset (MathJax, from the site), every image
is loaded and every toggle is opened, so the solutions are printed under their exercises; the
explorers print their static view (the first frame). The theme's print style sheet leaves out
the navigation. The pages' PDFs are merged with ``pypdf``, one bookmark per page.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import io
import shutil
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urljoin, urlparse

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run", "--disable-sync"]
PAPER = {"format": "A4", "margin": {"top": "15mm", "bottom": "15mm", "left": "14mm",
                                      "right": "14mm"}}

# Everything a printed page must show: typeset math, loaded images, open toggles.
PREPARE = """async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  document.querySelectorAll("details").forEach(d => { d.open = true; });
  const images = Array.from(document.images);
  await Promise.all(images.map(img => { img.loading = "eager"; return img.decode().catch(() => {}); }));
  await document.fonts.ready;
}"""
# The next page in the book's order, from the theme's "next" button.
NEXT = """() => { const a = document.querySelector("a.right-next"); return a ? a.href : null; }"""
TITLE = """() => { const h = document.querySelector("article h1");
                 return (h ? h.textContent : document.title).replace(/[#¶]\\s*$/, "").trim(); }"""


def chromium() -> str | None:
    """Debian's Chromium (``apt-get install chromium``), or None."""
    return next((found for name in ("chromium", "chromium-browser")
                 if (found := shutil.which(name))), None)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass


@contextmanager
def serve(site: Path) -> Iterator[str]:
    """Serve ``site`` on 127.0.0.1 (a free port); yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def _first_page(site: Path) -> str:
    """The book's first page: where index.html redirects to (jupyter-book's root), else itself."""
    import re

    index = (site / "index.html").read_text(encoding="utf-8", errors="replace")
    found = re.search(r'http-equiv="Refresh" content="0; url=([^"]+)"', index, re.I)
    return found[1] if found else "index.html"


def build_pdf(site: Path | str, out: Path | str, pages: Sequence[str] | None = None,
              executable: str | None = None) -> list[tuple[str, str, int]]:
    """Print the built book in ``site`` into ``out``; ``pages`` (paths relative to the site)
    replaces the book's order. Returns, per page: its path, its title and its number of pages
    in the PDF. Raises ``RuntimeError`` without Chromium or on a page that does not load."""
    from playwright.sync_api import sync_playwright
    from pypdf import PdfReader, PdfWriter

    site, out = Path(site).resolve(), Path(out)
    executable = executable or chromium()
    if executable is None:
        raise RuntimeError("the PDF is printed by Chromium: install it with "
                           "`sudo apt-get install chromium`")
    writer, printed = PdfWriter(), []
    with serve(site) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_FLAGS)
        try:
            context = browser.new_context(viewport={"width": 1100, "height": 1400})
            context.route("**/*", lambda route: route.continue_()
                          if route.request.url.startswith(base)
                          or route.request.url.split(":", 1)[0] in ("data", "blob", "about")
                          else route.abort())
            page = context.new_page()
            todo = list(pages) if pages is not None else None
            url, seen = urljoin(base, todo.pop(0) if todo is not None else _first_page(site)), set()
            while url and url not in seen:
                seen.add(url)
                response = page.goto(url, wait_until="load")
                if response is None or not response.ok:
                    raise RuntimeError(f"{url} did not load: "
                                       f"{response.status if response else 'no response'}")
                page.wait_for_load_state("networkidle")
                page.evaluate(PREPARE)
                title = page.evaluate(TITLE)
                document = PdfReader(io.BytesIO(page.pdf(print_background=True, **PAPER)))
                start = len(writer.pages)
                for sheet in document.pages:
                    writer.add_page(sheet)
                writer.add_outline_item(title=title, page_number=start)
                path = urlparse(url).path.removeprefix(urlparse(base).path)
                printed.append((path, title, len(document.pages)))
                if todo is not None:
                    url = urljoin(base, todo.pop(0)) if todo else None
                else:
                    following = page.evaluate(NEXT)
                    url = following.split("#")[0] if following else None
        finally:
            browser.close()
    out.parent.mkdir(parents=True, exist_ok=True)
    writer.add_metadata({"/Title": printed[0][1] if printed else "book"})
    with out.open("wb") as f:
        writer.write(f)
    return printed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m coursekit.pdf", description=__doc__.split("\n")[0])
    parser.add_argument("site", type=Path, help="a built edition, e.g. _build/html")
    parser.add_argument("out", type=Path, help="the PDF to write")
    parser.add_argument("pages", nargs="*", help="only these pages (relative to the site)")
    args = parser.parse_args(argv)
    try:
        printed = build_pdf(args.site, args.out, args.pages or None)
    except RuntimeError as err:
        print(f"coursekit pdf: {err}", file=sys.stderr)
        return 1
    print(f"wrote {args.out}: {len(printed)} pages of the book, "
          f"{sum(n for *_, n in printed)} PDF pages")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
