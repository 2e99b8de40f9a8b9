"""Read the built book's prose and fail on the marks of a sentence filled in from a template.

    python tools/check_prose.py _build/html

The prose of each page (its paragraphs, list items and table cells, outside code and math) is
searched for:

* **a verdict used as a noun after "is"**: "is follows difficulty", "is does not solve", "is wrong
  direction", "is fixed depth" (a person writes "follows the difficulty", "has a fixed depth");
* **a possessive after a glued label**: "'s" after a space ("ACT τ=0.01 's is");
* **a literal backtick**: Markdown that did not render (a backtick inside a role's text, say);
* **a sentence without its number**: a space before a punctuation mark that ends a clause
  ("is , and"), left where a glued value was missing;
* **a paragraph made only of glued text**: a ``<p>`` whose words all come from glued values (myst-nb's
  ``pasted-text``), so that no person wrote a word of it;
* **a sentence said twice**: the same sentence of :data:`REPEAT_WORDS` words or more twice on one page
  outside tables (a paste, or an edit applied in two places; each thing is said once).

Exit status 0 when every page is clean, 1 when any page has a fault (each printed as
``page: fault: "the text around it"``), 2 on bad input.
"""

from __future__ import annotations

import argparse
import re
import sys
from html.parser import HTMLParser
from pathlib import Path

SKIPPED_FOLDERS = {"_static", "_sources", "_images", "_downloads", "_modules"}
PROSE_TAGS = {"p", "li", "td", "th", "dd", "figcaption", "caption", "h1", "h2", "h3", "h4"}
SKIPPED_TAGS = {"pre", "code", "script", "style", "math", "nav", "header", "footer", "kbd", "samp"}
REPEAT_WORDS = 8  # a shorter sentence ("Both seeds fail.") may fairly come back
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(*])")
VERDICT_NOUNS = ("follows difficulty", "does not solve", "wrong direction", "fixed depth")
FAULTS = {
    "a verdict used as a noun after 'is'": re.compile(
        r"\bis\s+\*?(?:" + "|".join(VERDICT_NOUNS) + r")\b", re.IGNORECASE
    ),
    "a possessive after a glued label": re.compile(r"\s['’]s\b"),
    "a literal backtick": re.compile(r"`"),
    "a missing number": re.compile(r"\s[,;:.](?=\s|$)"),
}


class Prose(HTMLParser):
    """The text of a page's prose elements, one string per element. Code blocks and display math are
    left out; inline code and math stand as the words ``CODE`` and ``MATH``, so that the sentence
    around them reads whole."""

    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, str]] = []  # open elements: (tag, "skip" / "inline" / "prose" / "")
        self.current: list[str] = []
        self.own: list[str] = []  # the current block's text outside glued values
        self.glued = False  # whether the current block holds glued text
        self.blocks: list[str] = []
        self.sentences: list[str] = []  # the blocks outside tables (a table's labels repeat by design)
        self.glue_only: list[str] = []  # paragraphs whose words are all glued

    def _skipping(self) -> bool:
        return any(kind in ("skip", "inline") for _, kind in self.stack)

    def _in_prose(self) -> bool:
        return any(kind == "prose" for _, kind in self.stack)

    def handle_starttag(self, tag, attrs):
        if tag in self.VOID:
            return
        classes = (dict(attrs).get("class") or "").split()
        kind = ""
        if self._skipping():
            kind = "skip"
        elif tag in ("code", "kbd", "samp") or "math" in classes:
            kind = "inline" if self._in_prose() else "skip"
            if kind == "inline":
                self.current.append("MATH" if "math" in classes else "CODE")
        elif tag in SKIPPED_TAGS or any(c.startswith("highlight") for c in classes):
            kind = "skip"
        elif tag in PROSE_TAGS:
            kind = "prose"
            if self._in_prose():
                self.current.append(" ")
        elif "pasted-text" in classes:
            kind = "glued"
            self.glued = True
        self.stack.append((tag, kind))

    def handle_endtag(self, tag):
        if not any(t == tag for t, _ in self.stack):
            return  # a stray end tag
        while self.stack:
            open_tag, kind = self.stack.pop()
            if kind == "prose" and not self._in_prose():
                block = " ".join("".join(self.current).split())
                self.blocks.append(block)
                if open_tag not in ("td", "th") and not any(t in ("td", "th") for t, _ in self.stack):
                    self.sentences.append(block)
                if open_tag == "p" and self.glued and not re.search(r"[^\W\d_]", "".join(self.own)):
                    self.glue_only.append(block)
                self.current, self.own, self.glued = [], [], False
            if open_tag == tag:
                break

    def handle_data(self, data):
        if self._in_prose() and not self._skipping():
            self.current.append(data)
            if not any(kind == "glued" for _, kind in self.stack):
                self.own.append(data)


def page_faults(html: str) -> list[tuple[str, str]]:
    """``(fault, context)`` for each fault in a page's prose."""
    parser = Prose()
    parser.feed(html)
    found = []
    for block in parser.blocks:
        for name, pattern in FAULTS.items():
            for match in pattern.finditer(block):
                start, end = max(0, match.start() - 40), min(len(block), match.end() + 40)
                found.append((name, block[start:end]))
    found += [("a paragraph made only of glued text", block[:80]) for block in parser.glue_only]
    seen = set()
    for block in parser.sentences:
        for sentence in SENTENCE_END.split(block):
            if len(sentence.split()) >= REPEAT_WORDS:
                if sentence in seen:
                    found.append(("a sentence said twice", sentence[:80]))
                seen.add(sentence)
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html", type=Path, help="the built book's HTML folder (_build/html)")
    args = parser.parse_args(argv)
    if not args.html.is_dir():
        print(f"no such folder: {args.html}: build the book first (jupyter-book build .)", file=sys.stderr)
        return 2
    pages = [p for p in sorted(args.html.rglob("*.html")) if not SKIPPED_FOLDERS & set(p.parts)]
    faults = 0
    for page in pages:
        for name, context in page_faults(page.read_text(encoding="utf-8")):
            faults += 1
            print(f'{page.relative_to(args.html)}: {name}: "{context}"')
    print(f"{len(pages)} pages read, {faults} faults in their prose")
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main())
