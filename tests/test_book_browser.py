"""The built book, opened page by page in a real browser (headless Chromium, no network).

The module builds the instructor edition once (``coursekit book --all``: every page is re-read,
executed chapters come from jupyter-book's cache in ``_build/``), serves ``_build/html`` on
127.0.0.1 and opens every page. A page fails on a console error, a failed request, a request to
any other host, math left as raw TeX, a MathJax error, an image that did not load, or an explorer
whose slider (moved from the keyboard) does not change its frame and its text alternative; a
chapter also fails without an explorer that responds.
MathJax's menu is tried on a chapter (accessibility explorer, SVG renderer, another speech
language): everything it loads must come from the site. axe-core (the engine of the browsers'
accessibility tools, from ``axe-playwright-python``, which ships it: nothing is fetched) audits
every page; a serious or critical violation fails it. Each page of the instructor edition is
opened once for all of this (the audit runs on the page as loaded, before the sliders move), and
the contrast of colours repeated in code and tables is checked once per page (see
MARK_REPEATED_COLOURS): the audits took 870 s of a CI run before. A screenshot of the top of
every page, and of every explorer and concept check, lands in ``_build/screenshots``;
``COURSEKIT_FULL_SCREENSHOTS=1`` takes whole pages instead (2-7 s a chapter; 55 s for the 27
pages on the 2-core machine, against under 0.3 s a page for the top).

Chromium comes from Debian (``apt-get install chromium``); Playwright drives it and downloads no
browser of its own. Without Chromium the tests are skipped, with the reason and the command that
installs it; ``COURSEKIT_SKIP_BROWSER=1`` skips them explicitly. ``COURSEKIT_REQUIRE_BROWSER=1``
(set by ``.ci/run``) makes them mandatory: there, a missing browser or a skip request fails.

The book is built from the executions nbval has just made of the instructor edition
(``coursekit.pytest_plugin`` runs ``solutions/`` before this module, on the same worker), so no
chapter is executed a third time; a chapter missing from that cache is executed by the build.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

try:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
except ImportError:  # the `browser` fixture fails, saying how to install it
    PlaywrightTimeout = TimeoutError

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "html"
SCREENSHOTS = ROOT / "_build" / "screenshots"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run", "--disable-sync"]
BUILD_TIMEOUT = 1800  # seconds; a cold build executes every chapter
PAGE_TIMEOUT_MS = 120_000  # one page's load, and any single wait on it
CHAPTER = re.compile(r"solutions/\d\d_[^/]+\.html")  # solutions/01_rnn_recap.html

REQUIRED = os.environ.get("COURSEKIT_REQUIRE_BROWSER") == "1"
FULL_SCREENSHOTS = os.environ.get("COURSEKIT_FULL_SCREENSHOTS") == "1"
INSTALL = "sudo apt-get install chromium"


def _chromium() -> str | None:
    return next((found for name in ("chromium", "chromium-browser")
                 if (found := shutil.which(name))), None)


def _not_run(reason: str) -> None:
    """Skip the module, or fail it where the browser test is required (CI)."""
    if REQUIRED:
        pytest.fail(f"{reason}; COURSEKIT_REQUIRE_BROWSER=1 makes the browser test mandatory",
                    pytrace=False)
    pytest.skip(reason, allow_module_level=True)


if os.environ.get("COURSEKIT_SKIP_BROWSER") == "1":
    _not_run("COURSEKIT_SKIP_BROWSER=1: the browser test of the book is skipped")
if _chromium() is None:
    _not_run(f"Chromium is not installed, so the built book is not opened in a browser: install "
             f"it with `{INSTALL}` (Debian/Ubuntu) to run this test")


def chromium_path() -> str:
    found = _chromium()
    assert found, "Chromium went missing while the tests ran"
    return found


# ---------------------------------------------------------------------------------------------
# Fixtures: the build, a local server, the browser


@pytest.fixture(scope="module")
def build_log() -> str:
    """Build the instructor edition; return its log. Fails when the build fails."""
    chromium_path()  # fail before a long build if the browser is missing
    proc = subprocess.run(
        [sys.executable, "-m", "coursekit.cli", "book", "--edition", "instructor", "--all"],
        cwd=ROOT, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"the book did not build:\n{log[-6000:]}"
    return log


@pytest.fixture(scope="module")
def base_url(build_log: str):
    handler = functools.partial(_QuietHandler, directory=str(SITE))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the browser test needs Playwright: `pip install -r requirements.txt`",
                    pytrace=False)
    executable = chromium_path()
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=executable, headless=True,
                                     args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def pages(build_log: str) -> list[str]:
    """Every HTML page of the built book, as a path relative to the site."""
    found = sorted(p.relative_to(SITE).as_posix() for p in SITE.rglob("*.html")
                   if not p.relative_to(SITE).parts[0].startswith("_"))
    assert "index.html" in found and len(found) >= 5, found
    return found


class Visit:
    """One page open in the browser, with everything that went wrong while it loaded."""

    def __init__(self, browser, base_url: str, path: str):
        self.base, self.path, self.problems = base_url, path, []
        self.reloading = False
        self.in_flight: set[str] = set()  # the requests not yet answered, for a timeout's message
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        # Playwright's default is 30 s per wait. In CI the other core runs the other worker's
        # tests (notebook kernels among them) and the local server is a thread of this worker:
        # one page took longer than 30 s to go quiet there. A page that never does still fails,
        # naming the requests it was waiting for.
        self.context.set_default_timeout(PAGE_TIMEOUT_MS)
        self.page = self.context.new_page()
        self.context.route("**/*", self._route)
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda err: self.problems.append(f"JavaScript error: {err}"))
        self.page.on("request", lambda request: self.in_flight.add(request.url))
        self.page.on("requestfinished", lambda request: self.in_flight.discard(request.url))
        self.page.on("requestfailed", self._failed)
        self.page.on("response", self._response)
        started = time.monotonic()
        try:
            self.page.goto(base_url + path, wait_until="load")
            self.page.wait_for_load_state("networkidle")
        except PlaywrightTimeout:
            self.close()
            pytest.fail(f"{path} did not finish loading in {time.monotonic() - started:.0f} s; "
                        f"requests still open: {sorted(self.in_flight) or 'none'}", pytrace=False)
        self.page.evaluate(WAIT_FOR_MATHJAX)

    def _route(self, route):
        url = route.request.url
        if url.startswith(self.base) or url.split(":", 1)[0] in ("data", "blob", "about"):
            route.continue_()
        else:
            self.problems.append(f"external request: {url}")
            route.abort()

    def _console(self, message):
        if message.type == "error":
            self.problems.append(f"console error: {message.text}")

    def _failed(self, request):
        self.in_flight.discard(request.url)
        if self.reloading and request.failure == "net::ERR_ABORTED":
            return  # still in flight when we reloaded the page: the browser drops it
        if urlparse(request.url).hostname == "127.0.0.1":
            self.problems.append(f"failed request: {request.url} ({request.failure})")

    def reload(self):
        """Open the page again; requests it drops on the way do not count as failures."""
        self.reloading = True
        try:
            self.page.reload(wait_until="networkidle")
        finally:
            self.reloading = False

    def _response(self, response):
        if response.status >= 400:
            self.problems.append(f"HTTP {response.status}: {response.url}")

    def close(self):
        self.context.close()


WAIT_FOR_MATHJAX = """async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  await document.fonts.ready;
}"""

# Text that still looks like TeX, in prose or in an output, shown or hidden (a collapsed toggle):
# $$, \[ \], \( \), \begin{...}, or $...$ holding a command, a subscript or a superscript. Code
# blocks, inline code and text outputs (<pre>) are left alone: there these strings are code.
FIND_RAW_MATH = r"""() => {
  const skip = "PRE, CODE, KBD, SAMP, SCRIPT, STYLE, TEXTAREA, NOSCRIPT, MJX-CONTAINER, .highlight";
  const raw = /\$\$|\\[[\]()]|\\begin\{|\$[^$\n]*[\\^_][^$\n]*\$/;
  const found = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const parent = node.parentElement;
    if (!parent || parent.closest(skip)) continue;
    if (raw.test(node.textContent)) found.push(node.textContent.trim().slice(0, 120));
  }
  document.querySelectorAll("mjx-merror").forEach(e => found.push("MathJax error: " +
    (e.getAttribute("data-mjx-error") || e.textContent).slice(0, 120)));
  return found;
}"""

FIND_BROKEN_IMAGES = """async () => {
  const images = Array.from(document.images);
  await Promise.all(images.map(img => { img.loading = "eager"; return img.decode().catch(() => {}); }));
  return images.filter(img => !img.complete || img.naturalWidth === 0)
               .map(img => (img.getAttribute("src") || "(no src)").slice(0, 120));
}"""


def _screenshot_name(path: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", path.removesuffix(".html"))


def _check_explorers(visit: Visit) -> tuple[int, list[str]]:
    """Move every slider of every explorer to its end; the frame and its label must follow.
    Returns how many explorers responded (each slider that can move did), and the problems."""
    page, problems, responding = visit.page, [], 0
    explorers = page.locator(".ck-explorer")
    for e in range(explorers.count()):
        explorer = explorers.nth(e)
        explorer.scroll_into_view_if_needed()
        frame = explorer.locator("img.ck-explorer-frame")
        sliders = explorer.locator("input[type=range]")
        known, movable = len(problems), 0
        for s in range(sliders.count()):
            slider = sliders.nth(s)
            name = slider.get_attribute("data-control")
            labels = json.loads(slider.get_attribute("data-labels"))
            if len(labels) < 2:
                continue
            movable += 1
            before = frame.get_attribute("src")
            slider.focus()
            slider.press("End")
            after = frame.get_attribute("src")
            shown = slider.evaluate("el => el.nextElementSibling.textContent")
            if after == before:
                problems.append(f"explorer {e + 1}: moving {name!r} to its end did not change "
                                "the frame")
            if shown != labels[-1]:
                problems.append(f"explorer {e + 1}: {name!r} shows {shown!r}, not {labels[-1]!r}")
            alt = frame.get_attribute("alt") or ""
            if f"{name} = {labels[-1]}" not in alt or len(alt) < 40:
                problems.append(f"explorer {e + 1}: the frame's text alternative {alt!r} does not "
                                f"say what it shows at {name} = {labels[-1]}")
            if not frame.evaluate("img => img.complete && img.naturalWidth > 0"):
                problems.append(f"explorer {e + 1}: the frame for {name}={labels[-1]} is broken")
        if movable == 0:
            problems.append(f"explorer {e + 1} has no slider with more than one position")
        elif len(problems) == known:
            responding += 1
        explorer.screenshot(path=SCREENSHOTS / f"{_screenshot_name(visit.path)}--explorer-{e + 1}"
                            ".png")
    return responding, problems


def _concept_pages() -> set[str]:
    """The pages (solutions/NN_x.html) whose notebook asks concept checks."""
    import nbformat

    from coursekit.concepts import CONCEPTS_TAG
    return {f"solutions/{path.stem}.html" for path in (ROOT / "solutions").glob("*.ipynb")
            if any(CONCEPTS_TAG in c.get("metadata", {}).get("tags", [])
                   for c in nbformat.read(path, as_version=4).cells)}


def _check_concepts(visit: Visit) -> tuple[int, list[str]]:
    """Answer every concept check: a wrong answer first (it must say so), then the right one from
    the page's own data (it must say so). Returns how many questions answered, and the problems."""
    page, problems, answered = visit.page, [], 0
    blocks = page.locator(".ck-concepts")
    for b in range(blocks.count()):
        block = blocks.nth(b)
        block.scroll_into_view_if_needed()
        data = json.loads(block.locator("script.ck-concepts-data").text_content())
        boxes = block.locator(".ck-concept")
        if boxes.count() != len(data):
            problems.append(f"concept checks {b + 1}: {boxes.count()} boxes for {len(data)} questions")
            continue
        for n, q in enumerate(data):
            box = boxes.nth(n)
            for attempt, state in (("wrong", "wrong"), ("right", "right")):
                if q["kind"] == "choice":
                    options = [chr(97 + i) for i in range(len(q["options"]))]
                    letter = q["answer"] if attempt == "right" else next(
                        o for o in options if o != q["answer"])
                    box.locator(f'input[value="{letter}"]').check()
                else:
                    value = q["answer"] if attempt == "right" else "-987654"
                    box.locator("input[type=text]").fill(str(value))
                box.locator("button").click()
                if box.get_attribute("data-state") != state:
                    problems.append(f"concept check {q['id']}: the {attempt} answer is not "
                                    f"marked {state} "
                                    f"({box.locator('.ck-concept-feedback').text_content()!r})")
            answered += 1
        block.screenshot(path=SCREENSHOTS / f"{_screenshot_name(visit.path)}--concepts-{b + 1}.png")
    return answered, problems


# ---------------------------------------------------------------------------------------------
# The tests


def test_the_book_builds_without_warnings(build_log: str):
    warnings = [line for line in build_log.splitlines() if re.search(r"\b(WARNING|ERROR):", line)]
    assert not warnings, "the build warned:\n" + "\n".join(warnings)


def test_the_book_is_built_from_the_executions_nbval_just_made(build_log: str):
    """In the whole suite, the instructor edition's chapters ran under nbval on this worker just
    before this module (coursekit.pytest_plugin): the build must take each from the cache."""
    from coursekit import pytest_plugin

    executed = sorted(p.name for p in pytest_plugin.cached["instructor"])
    if not executed:
        pytest.skip("no chapter of solutions/ ran in this session (run `pytest` or "
                    "`pytest solutions tests/test_book_browser.py`)")
    from_cache = {Path(line.split(":")[0]).name for line in build_log.splitlines()
                  if "Using cached notebook" in line}
    assert set(executed) <= from_cache, (
        f"the build executed {sorted(set(executed) - from_cache)} again although nbval had just "
        f"executed them:\n{build_log[-3000:]}")


def test_a_second_build_takes_every_chapter_from_the_cache(build_log: str):
    """Nothing changed since the build above: every chapter comes from jupyter-cache, none runs."""
    proc = subprocess.run(
        [sys.executable, "-m", "coursekit.cli", "book", "--edition", "instructor", "--all"],
        cwd=ROOT, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"the second build failed:\n{log[-6000:]}"
    chapters = sorted(p.name for p in (ROOT / "solutions").glob("*.ipynb"))
    cached = [line for line in log.splitlines() if "Using cached notebook" in line]
    assert sorted(Path(line.split(":")[0]).name for line in cached) == chapters, log[-3000:]
    assert "Executing notebook" not in log, "a chapter was executed again although nothing changed"


@pytest.fixture(scope="module")
def instructor_pages(browser, base_url, pages) -> dict[str, tuple[list[str], list[dict], list[str]]]:
    """Every page of the instructor edition, opened once: path -> (what went wrong on it,
    axe's violations, what is wrong with its solution toggles). On each page, in this order: the
    load (console errors, failed or external requests), raw math, broken images, a screenshot,
    the axe audit (of the page as loaded), then the solution toggles (opened), the explorers'
    sliders and the concept checks' answers."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    found, concept_pages = {}, _concept_pages()
    exercised = {f"solutions/{nb.stem}.html" for nb in (ROOT / "solutions").glob("*.ipynb")
                 if _has_exercises(nb)}
    for path in pages:
        visit = Visit(browser, base_url, path)
        try:
            problems = visit.problems
            problems += [f"raw math: {t}" for t in visit.page.evaluate(FIND_RAW_MATH)]
            problems += [f"missing image: {s}" for s in visit.page.evaluate(FIND_BROKEN_IMAGES)]
            visit.page.screenshot(path=SCREENSHOTS / f"{_screenshot_name(path)}.png",
                                  full_page=FULL_SCREENSHOTS)
            before_audit = len(problems)
            violations = axe_violations(visit.page, repeated_colours_once=True)
            # axe's style-sheet preload fetches theme.css's `@import "../basic.css"` relative to
            # the page instead of the style sheet (a 404 on /basic.css, from every page): axe's
            # requests, not the book's
            del problems[before_audit:]
            toggles = (_check_toggles(visit, path in exercised) if path.startswith("solutions/")
                       else [])
            responding, explorer_problems = _check_explorers(visit)
            problems += explorer_problems
            if CHAPTER.fullmatch(path) and not responding:
                problems.append("a chapter without an explorer that responds to its sliders")
            answered, concept_problems = _check_concepts(visit)
            problems += concept_problems
            if path in concept_pages and not answered:
                problems.append("its concept checks are missing from the page (no .ck-concepts)")
        finally:
            visit.close()
        found[path] = (problems, violations, toggles)
    return found


def test_every_page_renders_offline_and_its_explorers_respond(pages, instructor_pages):
    """Every page: no console error, no failed or external request, no raw math, no broken
    image, every explorer answers its sliders and every concept check its answers; every
    chapter has an explorer that does (an explorer that became a bare ipywidget shows nothing in
    the static book). Screenshots go to
    _build/screenshots/ (whole pages with COURSEKIT_FULL_SCREENSHOTS=1)."""
    assert [p for p in pages if CHAPTER.fullmatch(p)], f"no chapter page among {pages}"
    failures = {path: problems for path, (problems, *_) in instructor_pages.items() if problems}
    report = "\n".join(f"{path}:\n  " + "\n  ".join(p) for path, p in failures.items())
    assert not failures, f"{len(failures)} of {len(pages)} pages failed:\n{report}"


def test_the_raw_math_check_finds_tex_in_prose_and_outputs_and_not_in_code(browser):
    page = browser.new_page()
    try:
        page.set_content(r"""<body>
          <p>inline \(x_t\) and display \[h_t\] and $$a$$ and $\alpha$ and $d_k$</p>
          <details><summary>solution</summary><p>hidden \(y\)</p></details>
          <div class="cell_output"><div class="output text_html">an output $W^Q$</div></div>
          <pre>print("$$") \(</pre><p>inline <code>\[x\]</code> code</p>
          <div class="highlight"><span>\begin{x}</span></div>
          <p>costs $5 and $10; \n is a newline</p></body>""")
        found = page.evaluate(FIND_RAW_MATH)
    finally:
        page.close()
    assert [t.split()[0] for t in found] == ["inline", "hidden", "an"], found


def test_math_is_typeset_by_mathjax_from_the_site(browser, base_url):
    visit = Visit(browser, base_url, "solutions/01_rnn_recap.html")
    try:
        assert visit.page.locator("mjx-container").count() > 5
        scripts = visit.page.eval_on_selector_all("script[src]", "els => els.map(e => e.src)")
        assert any(s.startswith(base_url) and "mathjax" in s for s in scripts), scripts
        assert not visit.problems, visit.problems
    finally:
        visit.close()


def _use_mathjax_menu(page, *path: str) -> None:
    """Right-click a formula (near its left edge, so that the submenus fit in the window), hover
    each submenu of ``path`` and click its last item: ("Accessibility", "Activate")."""
    page.locator("article mjx-container[display=true]").first.click(
        button="right", position={"x": 10, "y": 10})
    for name in path[:-1]:
        page.locator(".CtxtMenu_Menu").last.locator(".CtxtMenu_MenuItem", has_text=name).hover()
    page.locator(".CtxtMenu_Menu").last.locator(".CtxtMenu_MenuItem", has_text=path[-1]).click()


SPEECH = """() => Array.from(document.querySelectorAll("mjx-container [data-semantic-speech]"),
                        e => e.getAttribute("data-semantic-speech")).join("\\n")"""
# Every formula typeset again by `jax`, with the accessibility explorer attached.
EXPLORABLE = """([count, jax]) => {
  const math = Array.from(document.querySelectorAll("mjx-container"));
  return math.length === count
    && math.every(m => m.getAttribute("jax") === jax && m.hasAttribute("sre-explorer-id"));
}"""
MENU_TIMEOUT = 180_000  # ms; the explorer computes the speech of every formula (a loaded CI machine)


def test_the_mathjax_menu_works_offline(browser, base_url, pages):
    """Turn on the accessibility explorer, switch to the SVG renderer, choose German speech,
    and open the page again with those settings (MathJax keeps them): every formula comes back,
    explorable, and everything the menu loaded came from the site."""
    chapter = next(p for p in pages if CHAPTER.fullmatch(p))
    visit = Visit(browser, base_url, chapter)
    try:
        page = visit.page
        count = page.locator("mjx-container").count()
        assert count > 5, f"{chapter}: {count} formulas"
        _use_mathjax_menu(page, "Accessibility", "Activate")
        page.wait_for_function(EXPLORABLE, arg=[count, "CHTML"], timeout=MENU_TIMEOUT)
        _use_mathjax_menu(page, "Math Settings", "Math Renderer", "SVG")
        page.wait_for_function(EXPLORABLE, arg=[count, "SVG"], timeout=MENU_TIMEOUT)
        english = page.evaluate(SPEECH)
        with page.expect_response(lambda r: r.url.endswith("/mathmaps/de.json")) as rules:
            _use_mathjax_menu(page, "Accessibility", "Speech", "Language", "German")
        assert rules.value.ok and rules.value.url.startswith(base_url)
        rules.value.finished()
        visit.reload()
        page.wait_for_function(EXPLORABLE, arg=[count, "SVG"], timeout=MENU_TIMEOUT)
        assert page.evaluate(SPEECH) not in ("", english), "the speech is not German"
        page.wait_for_load_state("networkidle")
        problems = visit.problems + page.evaluate(FIND_RAW_MATH)
        assert not problems, problems
    finally:
        visit.close()


def _has_exercises(notebook: Path) -> bool:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return any("exercise" in c.get("metadata", {}).get("tags", []) for c in cells)


def _check_toggles(visit: Visit, exercised: bool) -> list[str]:
    """Every solution of a chapter page is a collapsed toggle right under the student's stub,
    one per exercise label; opened, it shows the solution. Returns the problems."""
    page, path, problems = visit.page, visit.path, []
    labels = page.locator(".ck-exercise-label")
    toggles = page.locator("details.ck-solution")
    if toggles.count() != labels.count():
        problems.append(f"{toggles.count()} solution toggles for {labels.count()} exercises")
    if exercised and labels.count() < 1:
        problems.append("no exercise label on a chapter with exercises")
    for i in range(toggles.count()):
        toggle = toggles.nth(i)
        if toggle.get_attribute("open") is not None:
            problems.append(f"solution {i + 1} is open")
        stub = toggle.locator("xpath=preceding-sibling::*[1]").inner_text()
        if "raise NotImplementedError" not in stub:
            problems.append(f"solution {i + 1}: no stub above it")
        toggle.locator("summary").click()
        solution = toggle.locator("pre")
        if toggle.get_attribute("open") is None or not solution.is_visible():
            problems.append(f"solution {i + 1} does not open")
        elif "NotImplementedError" in solution.inner_text() or "SOLUTION" in solution.inner_text():
            problems.append(f"solution {i + 1} shows the stub or a SOLUTION marker")
    return [f"{path}: {p}" for p in problems]


def test_solutions_are_collapsed_toggles_under_the_students_stub(pages, instructor_pages):
    chapters = [p for p in pages if p.startswith("solutions/")]
    # a chapter's later notebooks (02b_..., 06b_...) may hold no exercise
    exercised = {f"solutions/{nb.stem}.html" for nb in (ROOT / "solutions").glob("*.ipynb")
                 if _has_exercises(nb)}
    assert exercised and exercised <= set(chapters), (exercised, chapters)
    problems = [p for path in chapters for p in instructor_pages[path][2]]
    assert not problems, "\n".join(problems)


def test_launch_and_download_buttons_follow_the_repository_setting(browser, base_url, pages):
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    repo = urlparse(config["repository"]["url"]).path.strip("/")  # org/name
    branch = config["repository"].get("branch", "main")
    chapter = next(p for p in pages if p.startswith("solutions/"))
    notebook = chapter.removesuffix(".html") + ".ipynb"
    visit = Visit(browser, base_url, chapter)
    try:
        links = visit.page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")
        assert any(h.startswith(config["launch_buttons"]["binderhub_url"]) and repo in h
                   and branch in h and notebook in h for h in links), "no Binder button"
        assert any(h.startswith(config["launch_buttons"]["colab_url"]) and repo in h
                   and notebook in h for h in links), "no Colab button"
        download = [h for h in links if h.startswith(base_url) and h.endswith(".ipynb")]
        assert download, "no download-notebook button"
        response = visit.page.request.get(download[0])
        assert response.ok and '"cells"' in response.text()
    finally:
        visit.close()


AXE_FAILS_ON = ("serious", "critical")


# axe's colour-contrast rule is nine tenths of an audit's time, and nine tenths of what it checks
# are the tokens of highlighted code (07a: 5,000 of 5,600 elements, 20 of 23 s) and the cells of
# tables (the performance page: 2,100 paragraphs): the same few colours on the same backgrounds,
# again and again. Its verdict on an element depends on the element's colour, font size and
# weight, text shadow, and the colours, images and opacities of what lies behind it. This marks
# every visible code token and table paragraph whose values of all of those (its own, and every
# ancestor's background, opacity, blend mode and filter) an earlier visible one already has; the
# contrast rule leaves the marked ones out. Hidden ones (in a collapsed solution) are never the
# representative: axe skips hidden text.
MARK_REPEATED_COLOURS = """() => {
  const behind = new Map();
  const chain = el => {
    if (!el) return "";
    if (!behind.has(el)) {
      const s = getComputedStyle(el);
      behind.set(el, [s.backgroundColor, s.backgroundImage, s.opacity, s.mixBlendMode,
                      s.filter].join(",") + ";" + chain(el.parentElement));
    }
    return behind.get(el);
  };
  const seen = new Set();
  let audited = 0, marked = 0;
  for (const el of document.querySelectorAll(".highlight span, table p")) {
    if (!el.checkVisibility()) continue;
    const s = getComputedStyle(el);
    const key = [s.color, s.fontSize, s.fontWeight, s.textShadow, chain(el)].join("|");
    if (seen.has(key)) { el.setAttribute("data-ck-same-contrast", ""); marked++; }
    else { seen.add(key); audited++; }
  }
  return [audited, marked];
}"""


def axe_violations(page, repeated_colours_once: bool = False,
                   within: str | None = None) -> list[dict]:
    """axe-core's violations on the page as it is now: [{"id", "impact", "help", "nodes"}].
    With ``repeated_colours_once``, the colour-contrast rule checks each combination of
    colours and fonts in highlighted code and in tables once (MARK_REPEATED_COLOURS); every other rule
    and every other element is audited as usual, in the same run. ``within`` (a CSS selector)
    audits only the elements it matches and what they contain (axe's context), with the
    repeated colours checked once."""
    try:
        from axe_playwright_python.sync_playwright import Axe
    except ImportError:
        pytest.fail("the accessibility audit needs axe-playwright-python: "
                    "`pip install -r requirements.txt`", pytrace=False)
    if not repeated_colours_once and within is None:
        return Axe().run(page).response["violations"]
    page.evaluate(MARK_REPEATED_COLOURS)
    page.evaluate(Axe().axe_script)
    return page.evaluate("""async (within) => {
      axe.configure({rules: [{id: "color-contrast", selector: "*:not([data-ck-same-contrast])"}]});
      const context = within === null ? document : {include: [within]};
      return (await axe.run(context, {resultTypes: ["violations"]})).violations;
    }""", within)


def axe_report(violations: list[dict]) -> list[str]:
    """One line per rule and element: impact, rule, where (CSS selector) and axe's help."""
    return [f"{v['impact']}: {v['id']} at {' '.join(map(str, node['target']))} ({v['help']})"
            for v in violations for node in v["nodes"]]


def test_every_page_passes_the_axe_accessibility_audit(instructor_pages):
    """axe-core on every page once its math is typeset: no serious or critical violation (a
    toggle or control without a name, a broken ARIA structure, ...). Moderate and minor ones are
    printed (`pytest -s`), with the rule, the impact and the element."""
    report_audit({path: violations for path, (_, violations, _) in instructor_pages.items()},
                 "instructor")


def audit(browser, base_url: str, pages: list[str], edition: str,
          audited: dict[str, list[dict]] | None = None) -> None:
    """Open every page and audit it (the student edition's pages); ``audited`` holds the
    violations of pages already audited, which are reported without opening them again."""
    found = dict(audited or {})
    for path in pages:
        if path in found:
            continue
        visit = Visit(browser, base_url, path)
        try:
            found[path] = axe_violations(visit.page, repeated_colours_once=True)
        finally:
            visit.close()
    report_audit(found, edition)


def same_markup(student_html: str, instructor_html: str) -> bool:
    """Whether two pages of the two editions are the same markup but for the edition's name, its
    folder (notebooks/, solutions/) and the assets' cache-busting ``?v=`` suffixes."""
    def normal(text: str) -> str:
        text = re.sub(r"\?v=[0-9a-f]+", "", text)
        text = re.sub(r"(student|instructor) edition", "EDITION", text)
        return re.sub(r"\b(notebooks|solutions)\b", "FOLDER", text)
    return normal(student_html) == normal(instructor_html)


VOID_ELEMENTS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
                 "source", "track", "wbr"}
EXERCISE_CELL = ".tag_exercise"  # myst-nb's class for a cell tagged `exercise`


class _Outline(HTMLParser):
    """A page's elements in document order, each as (tag, class, role, attribute names), with
    no text and no attribute values but those two, and without the exercise cells' subtrees."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple] = []
        self.depth_in_exercise = 0

    def handle_starttag(self, tag, attrs):
        found = dict(attrs)
        if self.depth_in_exercise:
            self.depth_in_exercise += tag not in VOID_ELEMENTS
        elif "tag_exercise" in (found.get("class") or "").split():
            self.depth_in_exercise = 1
        else:
            self.elements.append((tag, found.get("class"), found.get("role"), tuple(sorted(found))))

    def handle_endtag(self, tag):
        if self.depth_in_exercise and tag not in VOID_ELEMENTS:
            self.depth_in_exercise -= 1


def same_outside_exercises(student_html: str, instructor_html: str) -> bool:
    """Whether two pages have the same elements, classes, roles and attributes outside their
    exercise cells: what they differ in there is text (numbers a cell printed, ids, links to
    the edition's own folder), which the audit of the instructor's page has checked in its form."""
    outlines = []
    for html in (student_html, instructor_html):
        parser = _Outline()
        parser.feed(html)
        parser.close()
        outlines.append(parser.elements)
    return outlines[0] == outlines[1]


def report_audit(found: dict[str, list[dict]], edition: str) -> None:
    """Fail on serious or critical violations; print the lesser ones."""
    failures, lesser = {}, {}
    for path, violations in found.items():
        blocking = [v for v in violations if v["impact"] in AXE_FAILS_ON]
        if blocking:
            failures[path] = axe_report(blocking)
        if len(blocking) < len(violations):
            lesser[path] = axe_report([v for v in violations if v not in blocking])
    for path, lines in lesser.items():
        print(f"axe, {edition} edition, {path}:\n  " + "\n  ".join(lines))
    report = "\n".join(f"{path}:\n  " + "\n  ".join(lines) for path, lines in failures.items())
    assert not failures, (f"{len(failures)} of {len(found)} pages of the {edition} edition have "
                          f"serious or critical accessibility violations:\n{report}")


# The markup the theme, docutils and myst-nb write (as in the built pages), which the audit flagged
THEIR_MARKUP = """<!DOCTYPE html><html lang="en"><head><title>t</title><style>
div.cell details.hide[open]>summary>p.collapsed {display: none}
div.cell details.hide:not([open])>summary>p.expanded {display: none}</style></head><body>
<div id="pst-primary-sidebar" class="bd-sidebar-primary bd-sidebar">
  <div class="sidebar-primary-items__start sidebar-primary__section">
    <div class="sidebar-primary-item">
<a class="navbar-brand logo" href="intro.html"><p class="title logo__title">A book</p></a></div>
    <div class="sidebar-primary-item"><nav class="bd-links bd-docs-nav" aria-label="Main">
<ul class="nav bd-sidenav"><li class="toctree-l1 current active has-children"><a class="current \
reference internal" href="#">7. GPT &amp; friends</a><details open="open"><summary><span \
class="toctree-toggle" role="presentation"><i class="fa-solid fa-chevron-down"></i></span>
</summary><ul><li class="toctree-l2"><a class="reference internal" href="b.html">7b</a></li></ul>
</details></li></ul></nav></div></div></div>
<main id="main-content" class="bd-main" role="main"><article class="bd-article">
<h1>Page</h1>
<table class="table"><thead><tr class="row-odd"><th class="head"><p></p></th>
<th class="head"><p>score</p></th></tr></thead>
<tbody><tr class="row-even"><td><p>the</p></td><td><p>0</p></td></tr></tbody></table>
<div class="cell"><details class="admonition hide below-input ck-solution">
<summary aria-label="Toggle hidden content">
<p class="collapsed admonition-title">Show solution</p>
<p class="expanded admonition-title">Hide solution</p>
</summary><pre>x = 1</pre></details></div>
<div role="list" class="citation-list">
<div class="citation" id="id29" role="doc-biblioentry">
<span class="label"><span class="fn-bracket">[</span><a role="doc-backlink" href="#id7">Bahdanau \
et al. 2015</a><span class="fn-bracket">]</span></span>
<p>Dzmitry Bahdanau. Neural machine translation. 2015.</p>
</div></div></article></main></body></html>"""


def test_the_books_markup_fixes_clear_what_axe_found_in_the_theme(browser):
    """coursekit.book.accessible_html on the theme's markup: axe's findings on it (an unnamed
    sidebar toggle, content outside landmarks, a bibliography that is not a list of items, an
    empty header cell) are gone, and the toggles are named after what they open."""
    from coursekit.book import accessible_html

    found = {}
    for name, markup in (("theirs", THEIR_MARKUP), ("fixed", accessible_html(THEIR_MARKUP))):
        page = browser.new_page()
        try:
            page.set_content(markup)
            found[name] = {v["id"] for v in axe_violations(page)}
            if name == "fixed":
                names = page.eval_on_selector_all(
                    "summary", "els => els.map(e => e.getAttribute('aria-label') || e.innerText)")
        finally:
            page.close()
    assert {"summary-name", "region", "aria-required-children",
            "empty-table-header"} <= found["theirs"], found
    assert not found["fixed"], found
    assert [n.strip() for n in names] == ["Sections of 7. GPT & friends", "Show solution"], names


REPEATED_LOW_CONTRAST = """<!DOCTYPE html><html lang="en"><head><title>t</title></head><body>
<main><div class="highlight"><pre><span style="color:#ccc">alpha</span>
<span style="color:#ccc">beta</span> <span style="color:#ccc">gamma</span>
<span style="color:#ccc">delta</span> <span style="color:#000">black</span></pre></div>
<details><summary>solution</summary><div class="highlight"><pre><span style="color:#ddd">hidden</span>
</pre></div></details>
<div class="highlight"><pre><span style="color:#ddd">shown</span></pre></div>
<table><tr><td><p style="color:#ccc">first</p></td></tr><tr><td><p style="color:#ccc">second</p></td>
</tr></table></main></body></html>"""


def test_the_audit_checks_each_colour_of_code_and_tables_once_and_misses_none(browser):
    """The pages' audit checks repeated colours once (MARK_REPEATED_COLOURS): four
    low-contrast tokens of one colour are one finding instead of four, and a colour whose first
    token is hidden in a collapsed toggle is still found where it is shown."""
    counts = {}
    for once in (False, True):
        page = browser.new_page()
        try:
            page.set_content(REPEATED_LOW_CONTRAST)
            found = axe_violations(page, repeated_colours_once=once)
        finally:
            page.close()
        counts[once] = sorted(node["html"] for v in found if v["id"] == "color-contrast"
                              for node in v["nodes"])
    assert len(counts[False]) == 4 + 1 + 2, counts[False]  # the hidden token is not audited
    assert counts[True] == ['<p style="color:#ccc">first</p>', '<span style="color:#ccc">alpha</span>',
                            '<span style="color:#ddd">shown</span>'], counts[True]


def test_search_works_offline(browser, base_url):
    visit = Visit(browser, base_url, "search.html?q=LSTM")
    try:
        results = visit.page.locator("#search-results li")
        results.first.wait_for()  # PAGE_TIMEOUT_MS: the index loads after the page
        assert results.count() >= 1
        assert not visit.problems, visit.problems
    finally:
        visit.close()


def test_a_chapter_of_the_built_book_prints_to_pdf_with_its_title_and_figures(build_log, tmp_path):
    """`coursekit book --pdf` on one chapter of the book just built (the whole book is the same
    loop over every page; tests/test_pdf.py checks the order and bookmarks on a small site)."""
    import html

    import pypdf

    chapter = sorted((SITE / "solutions").glob("0*.html"))[0]
    source = chapter.read_text(encoding="utf-8")
    article = source[source.index("<article"):source.index("</article>")]
    figures = set(re.findall(r'<img[^>]*\bsrc="([^"]+)"', article))
    out = tmp_path / "chapter.pdf"
    # its own process: this module's browser holds Playwright's event loop
    proc = subprocess.run([sys.executable, "-m", "coursekit.pdf", str(SITE), str(out),
                           f"solutions/{chapter.name}"], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    title = html.unescape(re.search(r"<title>(.*?) &#8212;", source, re.S).group(1).strip())
    reader = pypdf.PdfReader(out)
    text = re.sub(r"\s+", " ", " ".join(page.extract_text() for page in reader.pages))
    assert title and re.sub(r"\s+", " ", title) in text
    images = sum(len(page.images) for page in reader.pages)
    assert images >= len(figures) > 0, (images, len(figures))


# ---------------------------------------------------------------------------------------------
# The student edition: every page audited, where it differs from the instructor edition's (a
# chapter's exercise cells, when nothing else but text differs; a whole page otherwise). It is
# built last, from the executions nbval made of notebooks/ on the other worker
# (``_build/student/.jupyter_cache``); a chapter missing there is executed by the build.

STUDENT_SITE = ROOT / "_build" / "student" / "html"


@pytest.fixture(scope="module")
def student_site(build_log: str):
    proc = subprocess.run(
        [sys.executable, "-m", "coursekit.cli", "book", "--edition", "student", "--all"],
        cwd=ROOT, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"the student edition did not build:\n{log[-6000:]}"
    handler = functools.partial(_QuietHandler, directory=str(STUDENT_SITE))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    pages = sorted(p.relative_to(STUDENT_SITE).as_posix() for p in STUDENT_SITE.rglob("*.html")
                   if not p.relative_to(STUDENT_SITE).parts[0].startswith("_"))
    yield f"http://127.0.0.1:{server.server_address[1]}/", pages
    server.shutdown()
    server.server_close()


def test_every_page_of_the_student_edition_passes_the_axe_accessibility_audit(
        browser, student_site, instructor_pages):
    """A page whose markup is the instructor edition's but for the edition's name and folder
    (the book's own pages, the index, search, and the chapters without exercises, which are the
    same notebook in both editions) takes the instructor edition's audit. A chapter with
    exercises (stubs, check outputs, no solution toggles) whose elements outside the exercise
    cells are the instructor chapter's (same_outside_exercises: only text differs there) takes
    the instructor chapter's audit and has its exercise cells audited; any other page is opened
    and audited whole. (Whole chapters took 146 s of a CI run, their exercise cells about a
    tenth of each chapter's audit.)"""
    base_url, pages = student_site
    chapters = [p for p in pages if re.fullmatch(r"notebooks/\d\d[a-z]?_[^/]+\.html", p)]
    assert len(chapters) == len(list((ROOT / "notebooks").glob("*.ipynb"))), pages
    with_exercises = {f"notebooks/{nb.stem}.html" for nb in (ROOT / "notebooks").glob("*.ipynb")
                      if _has_exercises(ROOT / "solutions" / nb.name)}
    audited, exercises_only = {}, []
    for path in pages:
        twin = re.sub(r"^notebooks/", "solutions/", path)
        if twin not in instructor_pages:
            continue
        student, instructor = (STUDENT_SITE / path).read_text(), (SITE / twin).read_text()
        if same_markup(student, instructor):
            assert path not in with_exercises, (
                f"a student chapter with exercises has its instructor chapter's markup: {path}")
            audited[path] = instructor_pages[twin][1]
        elif path in with_exercises and same_outside_exercises(student, instructor):
            visit = Visit(browser, base_url, path)
            try:
                assert visit.page.locator(EXERCISE_CELL).count(), f"{path}: no exercise cell"
                audited[path] = (instructor_pages[twin][1]
                                 + axe_violations(visit.page, within=EXERCISE_CELL))
            finally:
                visit.close()
            exercises_only.append(path)
    assert with_exercises
    print(f"student edition: {len(exercises_only)} of {len(with_exercises)} chapters with "
          f"exercises audited in their exercise cells; audited whole: "
          f"{sorted(with_exercises - set(exercises_only)) or 'none'}")
    audit(browser, base_url, pages, "student", audited)


EXERCISE_PAGE = """<!DOCTYPE html><html lang="en"><head><title>t</title></head><body><main>
<h1>Chapter</h1><p>Text {text}</p>{extra}
<div class="cell tag_exercise docutils container"><div class="cell_input">{inside}</div>
<img src="data:image/png;base64,iVBORw0KGgo=" alt="a plot"><br></div>
<div class="cell docutils container"><img src="data:image/png;base64,iVBORw0KGgo="></div>
</main></body></html>"""


def test_same_outside_exercises_sees_elements_not_text_and_skips_the_exercise_cells():
    page = functools.partial(EXERCISE_PAGE.format, text="1.0", extra="", inside="<p>stub</p>")
    assert same_outside_exercises(page(), page())
    assert same_outside_exercises(page(text="2.5 ms"), page())          # text outside
    assert same_outside_exercises(page(inside="<details><summary>s</summary><pre>x</pre>"
                                              "</details>"), page())    # inside the exercise cell
    assert not same_outside_exercises(page(extra="<p>new</p>"), page())  # an element outside
    assert not same_outside_exercises(page(extra='<p role="note"></p>'), page(extra="<p></p>"))
    assert not same_outside_exercises(page(extra="<img src=x>"), page(extra='<img src=x alt="">'))


def test_the_exercise_cells_audit_sees_what_is_in_them_and_nothing_else(browser):
    """An image without a text alternative is found inside an exercise cell, and not outside
    one, when only the exercise cells are audited."""
    page = browser.new_page()
    try:
        page.set_content(EXERCISE_PAGE.format(text="", extra="", inside='<img src="x.png">'))
        inside = [n["html"] for v in axe_violations(page, within=EXERCISE_CELL)
                  if v["id"] == "image-alt" for n in v["nodes"]]
        whole = [n["html"] for v in axe_violations(page) if v["id"] == "image-alt"
                 for n in v["nodes"]]
    finally:
        page.close()
    assert inside == ['<img src="x.png">'], inside
    assert len(whole) == 2 and inside[0] in whole, whole


def test_same_markup_ignores_only_the_editions_name_folder_and_asset_versions():
    instructor = ('<title>Intro · instructor edition</title><link href="_static/a.css?v=8cd3d715">'
                  '<a href="solutions/01_rnn_recap.html">1.</a><p>Run <code>notebooks/</code></p>'
                  '<script>path: "./solutions"</script>')
    student = ('<title>Intro · student edition</title><link href="_static/a.css">'
               '<a href="notebooks/01_rnn_recap.html">1.</a><p>Run <code>notebooks/</code></p>'
               '<script>path: "./notebooks"</script>')
    assert same_markup(student, instructor)
    assert not same_markup(student.replace("<code>", "<code class=x>"), instructor)
    assert not same_markup(student.replace("1.</a>", "1.</a><img src=x.png>"), instructor)
