"""Count the book's prose the way a reader reads it, page by page in table-of-contents order.

Counted: the prose of the Markdown chapters and of the notebooks' Markdown cells. Not counted: code
(fenced blocks, code cells, inline ``code``), math ($...$, $$...$$, math directives), the bodies of
directives that hold code or are executed (``{code-cell}``, ``{code-block}``, ``{math}``, ...), HTML
comments, front matter and outputs. A role such as {glue:text}`x` or {cite}`key` counts as one word.

    python tools/word_count.py            # the table and the total
    python tools/word_count.py --max 18000  # exit 1 when the total exceeds 18,000
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Directives whose bodies are not prose (code, math, executed cells, figures' options).
NON_PROSE = {
    "code-cell",
    "code-block",
    "code",
    "sourcecode",
    "math",
    "glue:math",
    "raw",
    "toctree",
    "bibliography",
    "glue",
    "literalinclude",
    "include",
}
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,}|:{3,})\s*(\{([^}]*)\})?(.*)$")
ROLE = re.compile(r"\{[\w:-]+\}`[^`]*`")
INLINE_CODE = re.compile(r"`[^`]*`")
DISPLAY_MATH = re.compile(r"\$\$.*?\$\$", re.DOTALL)
INLINE_MATH = re.compile(r"(?<![\\$])\$(?!\s)(?:[^$\n]|\n(?![ \t]*\n))+?(?<!\s)\$")
COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
WORD = re.compile(r"[^\W_]+(?:['’.-][^\W_]+)*")


def strip_fences(text: str) -> str:
    """Drop fenced blocks that are code or math; keep the bodies of prose directives (notes, admonitions)."""
    out, stack = [], []  # stack of (marker, keep_body)
    for line in text.splitlines():
        m = FENCE.match(line)
        if m:
            marker = m.group(2)
            if (
                stack
                and marker[0] == stack[-1][0][0]
                and len(marker) >= len(stack[-1][0])
                and not m.group(3)
                and not m.group(5).strip()
            ):
                stack.pop()
                continue
            directive = m.group(4)
            keep = directive is not None and directive.strip() not in NON_PROSE and marker[0] != "~"
            if marker[0] == "`" and directive is None:
                keep = False  # a plain code block
            stack.append((marker, keep and (not stack or stack[-1][1])))
            continue
        if stack and not stack[-1][1]:
            continue
        if stack and re.match(r"^\s*:[\w-]+:", line):
            continue  # a directive's option (:width: 80%)
        out.append(line)
    return "\n".join(out)


def prose_words(markdown: str) -> int:
    """Number of prose words in one Markdown text."""
    text = markdown
    if text.startswith("---\n"):  # front matter
        end = text.find("\n---", 4)
        if end != -1:
            text = text[end + 4 :]
    text = COMMENT.sub(" ", text)
    text = strip_fences(text)
    text = DISPLAY_MATH.sub(" ", text)
    text = ROLE.sub(" ROLE ", text)
    text = INLINE_CODE.sub(" ", text)
    text = INLINE_MATH.sub(" ", text)
    text = LINK.sub(r" \1 ", text)
    text = re.sub(r"^\s*\(.*\)=\s*$", " ", text, flags=re.MULTILINE)  # (label)= targets
    text = re.sub(r"<[^>]+>", " ", text)  # HTML tags
    return len(WORD.findall(text))


def page_words(path: Path) -> int:
    """Prose words of one page: a Markdown file or a notebook's Markdown cells."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text())["cells"]
        return sum(prose_words("".join(c["source"])) for c in cells if c["cell_type"] == "markdown")
    return prose_words(path.read_text())


def toc_pages(root: Path = ROOT) -> list[Path]:
    """The pages of _toc.yml in order (root first)."""
    names = re.findall(r"^\s*(?:root|-\s*file):\s*(\S+)\s*$", (root / "_toc.yml").read_text(), re.MULTILINE)
    pages = []
    for name in names:
        for suffix in (".md", ".ipynb"):
            if (root / (name + suffix)).exists():
                pages.append(root / (name + suffix))
                break
        else:
            raise SystemExit(f"_toc.yml names {name}, which is neither {name}.md nor {name}.ipynb.")
    return pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=None, help="exit 1 when the total exceeds this")
    parser.add_argument("--root", type=Path, default=ROOT, help="the book's root (holds _toc.yml)")
    args = parser.parse_args(argv)
    total = 0
    for path in toc_pages(args.root):
        words = page_words(path)
        total += words
        print(f"{words:7,d}  {path.relative_to(args.root)}")
    print(f"{total:7,d}  total")
    if args.max is not None and total > args.max:
        print(f"the book's prose has {total:,d} words, more than {args.max:,d}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
