"""Open every page of the built book in headless Chromium and fail on what a reader would see broken.

    python tools/check_rendering.py _build/html --screenshots DIR --shoot book/04_losses.html ...

Each page is served from a local HTTP server (127.0.0.1, as the book is served on the web) and loaded
in Debian's Chromium through Debian's chromedriver (Selenium), offline, with a fresh profile. When the
page has loaded, its images have loaded or failed and MathJax (if the page loads it) has typeset the
page, four faults are looked for:

* **raw TeX**: the text of the page, outside code (``pre``, ``code``) and outside typeset math, holds
  a TeX delimiter, ``\\(``, ``\\)``, ``\\[``, ``\\]``, ``$$`` or ``\\begin{``: math that MathJax did not
  typeset. A formula that MathJax typeset as an error (``mjx-merror``) counts too.
* **broken image**: an ``img`` whose ``naturalWidth`` is 0 once loading is over (lazy images are made
  eager first).
* **wider than the column**: the column is the article's content box (``article.bd-article``, the
  page's ``main`` or ``body`` elsewhere). A rendered element inside it is too wide when either
  (a) it extends more than 1 px beyond the column's right edge (it spills over the margin; only the
  outermost spilling element is named, and an element inside a box that clips or scrolls is judged by
  that box), or (b) it is a box that scrolls sideways (computed ``overflow-x`` ``auto`` or
  ``scroll``) whose content is more than 1 px wider than the box (``scrollWidth > clientWidth``: the
  reader must scroll to see part of it), or a box that clips (``hidden``, ``clip``) content more than
  1 px wider than the column. The page as a whole must not scroll sideways either. Elements that are
  not rendered (a collapsed toggle, ``display: none``) are not judged, and a typeset formula is
  judged as a whole (its ``mjx-container``), not by MathJax's inner boxes.
* **cut table cell**: a cell of a table (``td``, ``th``) whose text ends in ``...``: pandas cut it
  (``display.max_colwidth``), and the reader cannot see the rest.

The window is ``--width`` × ``--height`` CSS pixels (default 1280 × 900, a laptop's window, where the
book's column is about 700 px wide). Exit status 0 when every page is clean, 1 when any page has a
fault (each is printed, one line per fault), 2 on bad input (no such folder, Chromium missing).
"""

from __future__ import annotations

import argparse
import functools
import http.server
import shutil
import sys
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# Flags that keep Chromium offline and quiet on a machine without a display or network.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
)
SKIPPED_FOLDERS = {"_static", "_sources", "_images", "_downloads"}
TEX_DELIMITERS = ("\\(", "\\)", "\\[", "\\]", "$$", "\\begin{")
PAGE_TIMEOUT_S = 60

# Runs in the page: waits for images and MathJax, then returns the faults as a list of strings.
CHECK_PAGE_JS = r"""
const done = arguments[arguments.length - 1];
const delimiters = arguments[0];

function describe(el) {
  let name = el.tagName.toLowerCase();
  if (el.id) name += "#" + el.id;
  const classes = Array.from(el.classList).slice(0, 3);
  if (classes.length) name += "." + classes.join(".");
  let heading = null;  // the nearest heading before the element, to say where it is
  const all = Array.from(document.querySelectorAll("h1, h2, h3, h4"));
  for (const h of all) {
    if (h.compareDocumentPosition(el) & Node.DOCUMENT_POSITION_FOLLOWING) heading = h;
  }
  const where = heading ? ` under "${heading.textContent.replace(/[#¶]/g, "").trim().slice(0, 60)}"` : "";
  return name + where;
}

function rawTex(faults) {
  const skip = "pre, code, script, style, textarea, mjx-container, mjx-assistive-mml, .MathJax";
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const seen = new Set();
  while (walker.nextNode()) {
    const node = walker.currentNode;
    const parent = node.parentElement;
    if (!parent || parent.closest(skip)) continue;
    const text = node.textContent;
    for (const d of delimiters) {
      const at = text.indexOf(d);
      if (at < 0) continue;
      const context = text.slice(Math.max(0, at - 20), at + 40).replace(/\s+/g, " ").trim();
      const key = d + context;
      if (seen.has(key)) continue;
      seen.add(key);
      faults.push(`raw TeX ${JSON.stringify(d)} in the text: "${context}" (${describe(parent)})`);
    }
  }
  for (const e of document.querySelectorAll("mjx-merror")) {
    faults.push(`math error: "${e.textContent.slice(0, 60)}" (${describe(e)})`);
  }
}

function brokenImages(faults) {
  for (const img of document.images) {
    if (!img.complete || img.naturalWidth === 0) {
      faults.push(`broken image: ${img.getAttribute("src")} did not load (${describe(img)})`);
    }
  }
}

function cutCells(faults) {
  for (const cell of document.querySelectorAll("td, th")) {
    const text = cell.textContent.trim();
    if (text.endsWith("...")) {
      faults.push(`cut table cell: "${text.slice(-60)}" (${describe(cell)})`);
    }
  }
}

function rendered(el) {
  return el.getClientRects().length > 0 && getComputedStyle(el).visibility !== "hidden";
}

function tooWide(faults) {
  const column = document.querySelector("article.bd-article") || document.querySelector("main") || document.body;
  const box = column.getBoundingClientRect();
  const style = getComputedStyle(column);
  const right = box.left + column.clientLeft + column.clientWidth - parseFloat(style.paddingRight);
  const width = Math.round(column.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight));
  const spilling = new Set();
  for (const el of column.querySelectorAll("*")) {
    // A formula is judged as a whole: MathJax's inner boxes clip glyph parts by design.
    if (el.parentElement.closest("mjx-container") || !rendered(el)) continue;
    const overflowX = getComputedStyle(el).overflowX;
    const scrolls = overflowX === "auto" || overflowX === "scroll";
    const hidden = scrolls ? el.clientWidth : width;  // a clipping box may cut a glyph's overhang
    if (overflowX !== "visible" && el.scrollWidth > hidden + 1) {
      faults.push(
        `wider than the column: ${describe(el)} holds content ${el.scrollWidth} px wide in a box ` +
        `${el.clientWidth} px wide (overflow-x: ${overflowX}; column ${width} px)`
      );
    }
    const extra = el.getBoundingClientRect().right - right;
    if (extra <= 1) continue;
    let clipped = false;  // inside a box that scrolls or clips: judged by that box
    let outer = false;  // an ancestor spills already and is named instead
    for (let a = el.parentElement; a && a !== column; a = a.parentElement) {
      if (spilling.has(a)) { outer = true; break; }
      if (getComputedStyle(a).overflowX !== "visible") { clipped = true; break; }
    }
    if (clipped) continue;
    spilling.add(el);
    if (!outer) {
      faults.push(
        `wider than the column: ${describe(el)} extends ${Math.round(extra)} px beyond the ` +
        `column's right edge (column ${width} px)`
      );
    }
  }
  const page = document.documentElement;
  if (page.scrollWidth > window.innerWidth + 1) {
    faults.push(`wider than the window: the page scrolls sideways (${page.scrollWidth} px in a ${window.innerWidth} px window)`);
  }
  return width;
}

(async () => {
  for (const img of document.images) img.loading = "eager";
  await Promise.all(Array.from(document.images).map((img) => img.complete ? null : new Promise((resolve) => {
    img.addEventListener("load", resolve);
    img.addEventListener("error", resolve);
    setTimeout(resolve, 15000);
  })));
  if (window.MathJax && window.MathJax.startup && window.MathJax.startup.promise) {
    await window.MathJax.startup.promise;
  }
  await document.fonts.ready;
  const faults = [];
  rawTex(faults);
  brokenImages(faults);
  cutCells(faults);
  const width = tooWide(faults);
  done({faults: faults, column: width});
})().catch((error) => done({faults: ["the check itself failed in the page: " + error], column: 0}));
"""


def pages_of(root: Path) -> list[str]:
    """The HTML pages of a built book, as paths relative to its root (assets and redirects left out)."""
    pages = []
    for path in sorted(root.rglob("*.html")):
        relative = path.relative_to(root)
        if relative.parts[0] in SKIPPED_FOLDERS:
            continue
        if 'http-equiv="Refresh"' in path.read_text(errors="replace")[:2000]:
            continue  # a redirect (index.html), checked through the page it points to
        pages.append(relative.as_posix())
    return pages


@contextmanager
def serve(root: Path):
    """A local HTTP server on 127.0.0.1 for the folder; yields its base URL."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def chromium(width: int, height: int):
    """Headless Chromium driven by Debian's chromedriver, offline, with a fresh profile."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        driver.set_script_timeout(PAGE_TIMEOUT_S)
        driver.set_page_load_timeout(PAGE_TIMEOUT_S)
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def check_site(
    root: Path,
    pages: list[str] | None = None,
    screenshots: dict[str, Path] | None = None,
    width: int = 1280,
    height: int = 900,
) -> dict[str, dict]:
    """Check the pages (default: every page) of the site in ``root``.

    Returns:
        ``{page: {"faults": [str, ...], "column": width of the column in px}}``.
    """
    root = Path(root)
    pages = pages_of(root) if pages is None else pages
    screenshots = screenshots or {}
    results = {}
    with serve(root) as base, chromium(width, height) as driver:
        for page in pages:
            driver.get(base + page)
            results[page] = driver.execute_async_script(CHECK_PAGE_JS, list(TEX_DELIMITERS))
            if page in screenshots:
                path = Path(screenshots[page])
                path.parent.mkdir(parents=True, exist_ok=True)
                # The whole page: the window grows to the document's height for the shot.
                full = driver.execute_script("return document.documentElement.scrollHeight")
                driver.set_window_size(width, min(int(full), 16000))
                driver.save_screenshot(str(path))
                driver.set_window_size(width, height)
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", type=Path, help="the built HTML folder (_build/html)")
    parser.add_argument("--screenshots", type=Path, help="folder for the screenshots (outside the tree)")
    parser.add_argument(
        "--shoot", action="append", default=[], help="a page to screenshot (relative to the site); repeatable"
    )
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=900)
    args = parser.parse_args(argv)
    if not args.site.is_dir() or not pages_of(args.site):
        print(f"error: {args.site} holds no built HTML pages; build the book first", file=sys.stderr)
        return 2
    for program in (CHROMIUM, CHROMEDRIVER):
        if not Path(program).is_file():
            print(
                f"error: {program} is missing; install Debian's chromium and chromium-driver", file=sys.stderr
            )
            return 2
    if args.shoot and not args.screenshots:
        print("error: --shoot needs --screenshots DIR", file=sys.stderr)
        return 2
    shots = {
        page: args.screenshots / (page.replace("/", "_").removesuffix(".html") + ".png")
        for page in args.shoot
    }
    missing = [page for page in shots if not (args.site / page).is_file()]
    if missing:
        print(f"error: no such page to screenshot: {', '.join(missing)}", file=sys.stderr)
        return 2
    results = check_site(args.site, screenshots=shots, width=args.width, height=args.height)
    bad = 0
    for page, result in results.items():
        faults = result["faults"]
        status = "ok" if not faults else f"{len(faults)} fault(s)"
        print(f"{page}: {status} (column {result['column']} px)")
        for fault in faults:
            print(f"  - {fault}")
        bad += bool(faults)
    for page, path in shots.items():
        print(f"screenshot of {page}: {path}")
    print(f"{len(results) - bad} of {len(results)} pages clean")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
