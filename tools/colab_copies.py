"""Write the notebooks that Colab opens: each book notebook, executed, with the book's MyST markup
turned into what plain Markdown shows, and check them.

The book's notebooks are written in MyST: their Markdown cells state numbers with ``{glue:text}`` roles,
show figures with ``{glue:figure}`` directives and link with ``{doc}``, ``{ref}`` and ``{cite}``. Colab
renders none of it. This script reads the book that Jupyter Book built (``_build``: the executed
notebooks in its execution cache and Sphinx's environment, which knows every page's title and every
label) and writes, for each notebook, a copy in which

* a ``{glue:text}`` role is the glued value, formatted as the book formats it (the values and the
  outputs come from the build's execution cache, ``_build/.jupyter_cache``);
* a ``{glue:figure}`` directive is its caption in italics: the figure itself is the output of the code
  cell above it (``show()`` displays it there);
* ``{doc}`` and ``{ref}`` are Markdown links to the published pages, ``{cite}`` is author-year text
  linked to the bibliography;
* the install line of the first code cell installs the package at the commit the copy was built
  from (``@<commit>``, not ``@main``, which may have moved on from the outputs the copy shows);
* a ``literalinclude`` is the code it includes, a dropdown ``admonition`` a ``<details>`` block,
  and a ``(label)=`` target is dropped; so are the Markdown cells tagged ``remove-cell`` (the badge
  that opens this very copy) and the glued values' own outputs (MIME types no front end shows).

Code cells follow the book's tags, so that what a reader sees expanded is what teaches: a cell the
book removes (``remove-cell``) is dropped, unless it draws a figure the book shows (then it is
collapsed, as below); a cell whose code the book hides or removes (``hide-input``, ``hide-cell``,
``remove-input``) is in Colab's form view (its code collapsed under a ``# @title`` line); outputs the
book hides (``hide-output``, ``hide-cell``) are folded into a ``<details>`` block, and of those it
removes (``remove-output``) only the figure stays, the one a ``{glue:figure}`` below captions.

The outputs stay, so that a reader sees the figures and numbers before running anything. The Pages
workflow pushes the copies to the ``colab`` branch, which the Colab badges and launch buttons open;
CI writes them from its own build and fails (exit status 1) on any MyST role, directive or label
left in a Markdown cell, on a glued value that is missing, on a glued figure that no cell displays,
on a ``glue(``/``claim(`` line or a removed cell that a reader sees, on a dropped cell that binds a
name a kept cell reads, and on a copy more than 1.3 times as tall as its book page (by a proxy of
the height, the same for both: see ``book_height``).

    python tools/colab_copies.py _build OUT [--base-url URL] [--commit SHA]
"""

from __future__ import annotations

import argparse
import json
import pickle
import re
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
GLUE_PREFIX = "application/papermill.record/"
IMAGE_TYPES = ("image/png", "image/svg+xml", "image/jpeg")

ROLE = re.compile(r"\{(glue:text|glue|doc|ref|cite:p|cite:t|cite)\}`([^`]*)`")
DIRECTIVE = re.compile(r"^(?P<fence>`{3,}|:{3,})\{(?P<name>[\w:-]+)\}[ \t]*(?P<arg>.*)\n", re.MULTILINE)
TARGET = re.compile(r"^\([\w:-]+\)=[ \t]*\n", re.MULTILINE)
# What must not be left in a Markdown cell of a copy.
LEFTOVER = re.compile(
    r"\{glue|\{doc\}|\{ref\}|\{cite|\{[\w:-]+\}`|^\s*(?:`{3,}|:{3,})\{|^\([\w:-]+\)=", re.MULTILINE
)


# The notebooks' Colab install line (tools/pin_colab_install.py keeps the source's ref at a branch)
INSTALL = re.compile(r"(pondernet_tutorial @ git\+https://github\.com/[\w.-]+/[\w.-]+?)(?:@[\w./-]+)?(?=\")")


class CopyError(Exception):
    pass


def book_url(config: Path) -> str:
    """Where the Pages workflow publishes the book: ``https://OWNER.github.io/REPO/``, from the
    repository that ``_config.yml`` names."""
    match = re.search(r"url:\s*https://github\.com/([\w.-]+)/([\w.-]+)", config.read_text())
    if not match:
        raise CopyError(f"{config} names no GitHub repository under repository.url")
    return f"https://{match.group(1)}.github.io/{match.group(2)}/"


def load_environment(build: Path):
    from sphinx.environment import BuildEnvironment  # noqa: F401 (the pickle's classes)

    path = build / ".doctrees" / "environment.pickle"
    if not path.is_file():
        raise CopyError(f"no Sphinx environment at {path}: build the book first (jupyter-book build .)")
    with path.open("rb") as file:
        return pickle.load(file)


def split_target(text: str) -> tuple[str | None, str]:
    """``"title <target>"`` -> (title, target); ``"target"`` -> (None, target)."""
    match = re.fullmatch(r"(.*?)\s*<([^>]+)>", text.strip(), re.DOTALL)
    if match:
        return match.group(1), match.group(2)
    return None, text.strip()


class Resolver:
    def __init__(self, env, base_url: str, bibliography: Path):
        self.env, self.base = env, base_url
        self.labels = env.domaindata["std"]["labels"]
        self.anonlabels = env.domaindata["std"]["anonlabels"]
        self._bib = None
        self.bibliography = bibliography

    def page(self, docname: str, anchor: str = "") -> str:
        return f"{self.base}{docname}.html" + (f"#{anchor}" if anchor else "")

    def doc(self, text: str, docname: str) -> str:
        title, target = split_target(text)
        base = "/".join(docname.split("/")[:-1])
        name = target.lstrip("/") if target.startswith("/") else "/".join(p for p in (base, target) if p)
        if name not in self.env.titles:
            raise CopyError(f"{{doc}} names an unknown page: {target}")
        return f"[{title or self.env.titles[name].astext()}]({self.page(name)})"

    def ref(self, text: str) -> str:
        title, label = split_target(text)
        label = label.lower()
        if label in self.labels:
            docname, anchor, section = self.labels[label]
        elif label in self.anonlabels and title:
            (docname, anchor), section = self.anonlabels[label], title
        else:
            raise CopyError(f"{{ref}} names an unknown label: {label}")
        return f"[{title or section}]({self.page(docname, anchor)})"

    def cite(self, role: str, keys: str) -> str:
        if self._bib is None:
            from pybtex.database import parse_file

            self._bib = parse_file(str(self.bibliography)).entries
        parts = []
        for key in (k.strip() for k in keys.split(",")):
            if key not in self._bib:
                raise CopyError(f"{{cite}} names an unknown reference: {key}")
            entry = self._bib[key]
            names = [p.last_names[0] if p.last_names else str(p) for p in entry.persons.get("author", [])]
            names = [re.sub(r"[{}]", "", n) for n in names]
            who = (
                names[0]
                if len(names) == 1
                else " and ".join(names)
                if len(names) == 2
                else f"{names[0]} et al."
            )
            year = entry.fields.get("year", "n.d.")
            parts.append(f"{who} ({year})" if role == "cite:t" else f"{who} {year}")
        link = self.page("book/bibliography")
        text = "; ".join(parts)
        return f"[{text}]({link})" if role == "cite:t" else f"([{text}]({link}))"


def glued_values(nb: dict) -> tuple[dict, dict]:
    """``{name: bundle}`` of every glued value, and ``{name: cell index}`` of the cell that glued it."""
    values, cells = {}, {}
    for index, cell in enumerate(nb["cells"]):
        for output in cell.get("outputs", []):
            record = output.get("metadata", {}).get("scrapbook")
            if output.get("output_type") == "display_data" and record:
                prefix = record.get("mime_prefix", "")
                values[record["name"]] = {k[len(prefix) :]: v for k, v in output["data"].items()}
                cells[record["name"]] = index
    return values, cells


def glue_text(values: dict, text: str) -> str:
    from myst_nb.core.variables import format_plain_text

    name, _, spec = text.partition(":")
    if name not in values or "text/plain" not in values[name]:
        raise CopyError(f"glued value {name!r} is missing (no cell glued it)")
    plain = values[name]["text/plain"]
    return format_plain_text(plain if isinstance(plain, str) else "".join(plain), spec)


def literal_include(arg: str, options: dict, source_dir: Path) -> str:
    from sphinx.directives.code import LiteralIncludeReader

    path = (source_dir / arg.strip()).resolve()
    config = SimpleNamespace(source_encoding="utf-8-sig")
    text, _ = LiteralIncludeReader(str(path), options, config).read()
    language = options.get("language", "python")
    return f"```{language}\n{text.rstrip()}\n```\n"


def convert_directives(text: str, source_dir: Path, figure_caption) -> str:
    """Replace every MyST directive of a Markdown cell by what plain Markdown shows."""
    out, position = [], 0
    for match in DIRECTIVE.finditer(text):
        if match.start() < position:
            continue
        fence, name, arg = match.group("fence"), match.group("name"), match.group("arg").strip()
        end = re.compile(rf"^{re.escape(fence)}[ \t]*$", re.MULTILINE).search(text, match.end())
        if end is None:
            raise CopyError(f"directive {{{name}}} is not closed")
        body = text[match.end() : end.start()]
        options, lines = {}, body.splitlines()
        while lines and lines[0].startswith(":"):
            key, _, value = lines.pop(0)[1:].partition(":")
            value = value.strip().strip('"')
            options[key.strip()] = int(value) if value.isdigit() else value
        content = "\n".join(lines).strip("\n")
        if name == "glue:figure":
            replacement = figure_caption(arg, content)
        elif name == "literalinclude":
            replacement = literal_include(arg, options, source_dir)
        elif name in ("admonition", "note", "tip", "warning", "important"):
            title = arg or name.capitalize()
            if "dropdown" in options.get("class", ""):
                replacement = f"<details><summary><b>{title}</b></summary>\n\n{content}\n\n</details>\n"
            else:
                quoted = "\n".join(f"> {line}" if line else ">" for line in content.splitlines())
                replacement = f"> **{title}**\n>\n{quoted}\n"
        else:
            raise CopyError(f"no plain-Markdown form for the directive {{{name}}}")
        out.append(text[position : match.start()] + replacement)
        position = end.end() + (1 if text[end.end() : end.end() + 1] == "\n" else 0)
    out.append(text[position:])
    return "".join(out)


# The cells whose code the book hides or removes but whose outputs it shows: in a copy they are in
# Colab's form view, which shows a cell's "# @title" line and its outputs and hides its code behind a
# "Show code" link (Colab writes "cellView": "form" into a cell's metadata for it: AnswerDotAI/nbdev#229;
# it shows "Show code" under every cell in form view: googlecolab/colabtools#2154); JupyterLab reads
# "jupyter": {"source_hidden": true} for the same (its nbformat ICodeCellJupyterMetadata).
COLLAPSED_TAGS = {"hide-input", "hide-cell", "remove-input"}
BOOKKEEPING = re.compile(r"(?<![\w.])(?:glue|claim)\(")
# How much taller than the book page a copy may be (issue 40: 12_parity_paper's was 1.7 times)
MAX_HEIGHT_RATIO = 1.3


def collapse(cell: dict) -> None:
    """Put a code cell in Colab's form view, titled by its first comment line or by what it shows."""
    lines = cell["source"].splitlines()
    if lines and re.match(r"#\s+\S", lines[0]) and not lines[0].startswith("# @"):
        title, lines = lines[0].lstrip("# ").strip(), lines[1:]
    elif any(t in o.get("data", {}) for o in cell["outputs"] for t in IMAGE_TYPES):
        title = "The code of the figure below"
    elif any("text/html" in o.get("data", {}) for o in cell["outputs"]):
        title = "The code of the table below"
    else:
        title = "The numbers the text quotes, computed from the runs"
    title = title.replace('"', "'")
    cell["source"] = "\n".join([f'# @title {title} {{ display-mode: "form" }}', *lines])
    cell["metadata"]["cellView"] = "form"
    cell["metadata"].setdefault("jupyter", {})["source_hidden"] = True


FOLDED = "<details><summary>"


def fold_outputs(cell: dict) -> None:
    """Fold the outputs the book hides into one HTML ``<details>`` block, which Colab shows shut (it
    honours no metadata that hides outputs); JupyterLab reads "outputs_hidden" for the same."""
    import html

    parts = []
    for output in cell["outputs"]:
        data = output.get("data", {})
        if "text/html" in data:
            parts.append("".join(data["text/html"]))
        elif "image/svg+xml" in data:
            parts.append("".join(data["image/svg+xml"]))
        elif "image/png" in data:
            parts.append(f'<img src="data:image/png;base64,{"".join(data["image/png"]).strip()}">')
        else:
            text = "".join(output.get("text", data.get("text/plain", output.get("traceback", ""))))
            parts.append(f"<pre>{html.escape(text)}</pre>")
    body = "\n".join(parts)
    cell["outputs"] = [
        {
            "output_type": "display_data",
            "data": {"text/html": f"{FOLDED}Output (click to show)</summary>\n{body}\n</details>"},
            "metadata": {},
        }
    ]
    cell["metadata"].setdefault("jupyter", {})["outputs_hidden"] = True


def collapsed(cell: dict) -> bool:
    return cell["metadata"].get("cellView") == "form" and cell["source"].startswith("# @title")


def names(source: str) -> tuple[set, set]:
    """The names a cell binds and the names it reads (IPython's %magics and !commands left out)."""
    import ast

    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set(), set()
    bound, read = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return bound, read


def dropped_names_used(dropped: list, kept: list) -> list:
    """A fault for each name that a dropped cell alone binds and a kept cell reads: the copy would
    raise a NameError where the book's notebook runs."""
    faults, kept_code = [], [c["source"] for c in kept if c["cell_type"] == "code"]
    bound_by_kept = set().union(*(names(s)[0] for s in kept_code))
    read_by_kept = set().union(*(names(s)[1] for s in kept_code))
    for index, source in dropped:
        for name in sorted((names(source)[0] - bound_by_kept) & read_by_kept):
            faults.append(
                f"cell {index} is dropped (remove-cell), but a kept cell reads {name}, which it binds"
            )
    return faults


def bookkeeping_shown(copy: dict) -> list:
    """A fault for each cell the book removes that the copy shows (but a collapsed one that draws a
    figure the book shows), and each glue(/claim( line that a reader sees (in a code cell not in
    form view, or in Markdown)."""
    faults = []
    for index, cell in enumerate(copy["cells"]):
        tags = set(cell.get("metadata", {}).get("tags", []))
        hidden = cell["cell_type"] == "code" and collapsed(cell)
        draws = any(t in o.get("data", {}) for o in cell.get("outputs", []) for t in IMAGE_TYPES)
        if "remove-cell" in tags and not (hidden and draws):  # kept only for a figure the book shows
            faults.append(f"cell {index} shows a cell the book removes (remove-cell)")
        elif tags & COLLAPSED_TAGS and not hidden:
            faults.append(f"cell {index} shows the code the book hides ({', '.join(sorted(tags))})")
        elif not hidden:
            for line in "".join(cell["source"]).splitlines():
                if BOOKKEEPING.search(line):
                    faults.append(f"cell {index} shows the book's bookkeeping: {line.strip()!r}")
    return faults


# A proxy for a page's height in pixels, applied alike to the book page (the executed notebook under
# the book's tags) and to the copy (under Colab's form view), so that their ratio is what the issue
# measured in headless Chromium (12_parity_paper: 10,700 px in the book, 17,900 px in the old copy).
LINE_PX = {"markdown": 26, "code": 19, "output": 18, "row": 30}
CHARS_PER_LINE, COLUMN_PX, TOGGLE_PX, FORM_PX, CELL_PX = 90, 720, 40, 56, 24


def image_px(data: dict) -> float:
    """An image's height at the column's width (at most its own width)."""
    import base64

    if "image/png" in data:
        try:
            head = base64.b64decode("".join(data["image/png"])[:44])
        except ValueError:  # not base64: a size unknown
            head = b""
        if not head.startswith(b"\x89PNG"):
            return 400.0
        width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    elif "image/svg+xml" in data:
        svg = "".join(data["image/svg+xml"])[:2000]
        size = [re.search(rf'\b{k}="([\d.]+)(pt|px)?"', svg) for k in ("width", "height")]
        if not all(size):
            return 400.0
        width, height = (float(m.group(1)) * (4 / 3 if m.group(2) == "pt" else 1) for m in size)
    else:
        return 400.0
    return height * min(1.0, COLUMN_PX / width) if width else 400.0


def outputs_px(outputs: list) -> float:
    px = 0.0
    for output in outputs:
        data = output.get("data", {})
        if any(t in data for t in IMAGE_TYPES):
            px += image_px(data)
        elif "".join(data.get("text/html", "")).startswith(FOLDED):
            px += TOGGLE_PX
        elif "text/html" in data:
            px += LINE_PX["row"] * max(1, "".join(data["text/html"]).count("<tr")) + CELL_PX
        else:
            text = "".join(output.get("text", data.get("text/plain", "")))
            px += LINE_PX["output"] * len(text.splitlines())
    return px


def markdown_px(text: str) -> float:
    px = 0.0
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link shows its text, not its address
    for line in text.splitlines():
        if line.startswith("#"):
            px += 2 * LINE_PX["markdown"]
        elif line.strip():
            px += LINE_PX["markdown"] * -(-len(line) // CHARS_PER_LINE)
        else:
            px += LINE_PX["markdown"] / 2
    return px


def code_px(source: str) -> float:
    return LINE_PX["code"] * len(source.splitlines()) + CELL_PX


def book_height(executed: dict, glued_by: dict) -> float:
    """The book page under its tags: removed cells and outputs absent, hidden code one toggle line, a
    glued figure where its directive stands."""
    px = 0.0
    for cell in executed["cells"]:
        tags, source = set(cell.get("metadata", {}).get("tags", [])), "".join(cell["source"])
        if "remove-cell" in tags:
            continue
        if cell["cell_type"] == "markdown":
            for match in DIRECTIVE.finditer(source):
                if match.group("name") == "glue:figure":
                    name = match.group("arg").strip()
                    cell_index = glued_by.get(name)
                    for output in executed["cells"][cell_index]["outputs"] if cell_index is not None else []:
                        record = output.get("metadata", {}).get("scrapbook", {})
                        if record.get("name") == name:
                            prefix = record.get("mime_prefix", "")
                            px += image_px({k[len(prefix) :]: v for k, v in output["data"].items()})
            px += markdown_px(TARGET.sub("", DIRECTIVE.sub("", source)))
            continue
        if "remove-input" not in tags:
            px += TOGGLE_PX if tags & {"hide-input", "hide-cell"} else code_px(source)
        if not tags & {"remove-output", "hide-cell", "hide-output"}:
            px += outputs_px(
                [o for o in cell.get("outputs", []) if not o.get("metadata", {}).get("scrapbook")]
            )
        elif "hide-output" in tags:
            px += TOGGLE_PX
    return px


def colab_height(copy: dict) -> float:
    """The copy in Colab: a cell in form view is its title and its outputs."""
    px = 0.0
    for cell in copy["cells"]:
        if cell["cell_type"] == "markdown":
            px += markdown_px(cell["source"])
        else:
            px += (FORM_PX if collapsed(cell) else code_px(cell["source"])) + outputs_px(cell["outputs"])
    return px


def colab_copy(
    executed: dict, docname: str, resolver: Resolver, source_dir: Path, commit: str | None = None
) -> tuple[dict, list]:
    """The Colab copy of one executed notebook, and the faults found in it; ``commit``: the commit its
    install line installs (the one the copy was built from)."""
    values, glued_by = glued_values(executed)
    faults = []

    def displays_image(index: int) -> bool:
        for output in executed["cells"][index].get("outputs", []):
            if output.get("metadata", {}).get("scrapbook"):
                continue
            if any(t in output.get("data", {}) for t in IMAGE_TYPES):
                return True
        return False

    def figure_caption(name: str, caption: str) -> str:
        if name not in glued_by:
            raise CopyError(f"glued figure {name!r} is missing (no cell glued it)")
        if not displays_image(glued_by[name]):
            faults.append(f"glued figure {name!r} is not displayed by the cell that glues it (use show())")
        caption = " ".join(caption.split())
        return f"*Figure: {caption}*\n" if caption else ""

    def role(match: re.Match) -> str:
        kind, text = match.group(1), match.group(2)
        try:
            if kind in ("glue:text", "glue"):
                return glue_text(values, text)
            if kind == "doc":
                return resolver.doc(text, docname)
            if kind == "ref":
                return resolver.ref(text)
            return resolver.cite("cite:p" if kind == "cite" else kind, text)
        except CopyError as error:
            unresolved.append(str(error))
            return match.group(0)

    cells, dropped = [], []
    for index, cell in enumerate(executed["cells"]):
        tags = cell.get("metadata", {}).get("tags", [])
        cell = json.loads(json.dumps(cell))
        if cell["cell_type"] == "markdown":
            if "remove-cell" in tags:
                continue
            text = "".join(cell["source"])
            unresolved = []
            try:
                text = TARGET.sub("", text)
                text = convert_directives(text, source_dir, figure_caption)
                text = ROLE.sub(role, text)
            except CopyError as error:
                faults.append(f"cell {index}: {error}")
            faults += [f"cell {index}: {error}" for error in unresolved]
            for leftover in LEFTOVER.finditer(text):
                line = text[: leftover.start()].count("\n")
                faults.append(f"cell {index}: MyST markup left: {text.splitlines()[line].strip()!r}")
            cell["source"] = text.strip("\n")
        elif cell["cell_type"] == "code":
            source = "".join(cell["source"])
            if commit and INSTALL.search(source):
                source = INSTALL.sub(lambda m: f"{m.group(1)}@{commit}", source)
            outputs = [o for o in cell.get("outputs", []) if not o.get("metadata", {}).get("scrapbook")]
            if "remove-output" in tags:  # a figure it draws is the one a {glue:figure} shows below it
                outputs = [o for o in outputs if any(t in o.get("data", {}) for t in IMAGE_TYPES)]
            cell["outputs"], cell["source"] = outputs, source
            if "remove-cell" in tags:
                if not outputs:
                    dropped.append((index, source))
                    continue
                collapse(cell)  # it draws a figure the book shows (a {glue:figure} below)
            elif COLLAPSED_TAGS & set(tags):
                collapse(cell)
            if {"hide-output", "hide-cell"} & set(tags) and outputs:
                fold_outputs(cell)
        cells.append(cell)
    faults += dropped_names_used(dropped, cells)
    copy = dict(executed, cells=cells)
    faults += bookkeeping_shown(copy)
    book, colab = book_height(executed, glued_by), colab_height(copy)
    if colab > MAX_HEIGHT_RATIO * book:
        faults.append(
            f"the copy is about {colab:,.0f} px tall against the book page's {book:,.0f} px "
            f"(more than {MAX_HEIGHT_RATIO} times): collapse or drop what the book hides"
        )
    return copy, faults


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build", type=Path, help="the book's build folder (_build)")
    parser.add_argument("out", type=Path, help="where to write the copies (book/<name>.ipynb)")
    parser.add_argument("--base-url", help="the published book (default: from _config.yml's repository)")
    parser.add_argument("--commit", help="the commit the copies install (default: this checkout's HEAD)")
    args = parser.parse_args(argv)
    try:
        base = args.base_url or book_url(ROOT / "_config.yml")
        resolver = Resolver(
            load_environment(args.build), base.rstrip("/") + "/", ROOT / "book" / "references.bib"
        )
    except CopyError as error:
        print(error, file=sys.stderr)
        return 2
    import subprocess

    import nbformat
    from jupyter_cache import get_cache

    commit = (
        args.commit
        or subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
    )
    if not re.fullmatch(r"[0-9a-f]{7,40}", commit or ""):
        print(f"no commit to pin the install lines to ({commit!r}): pass --commit SHA", file=sys.stderr)
        return 2

    cache = get_cache(str(args.build / ".jupyter_cache"))
    sources = sorted((ROOT / "book").glob("*.ipynb"))
    failed = False
    for source in sources:
        docname = f"book/{source.stem}"
        try:  # the outputs the build used, glued values included (the pages keep only what they show)
            _, executed = cache.merge_match_into_notebook(nbformat.read(source, as_version=4))
        except KeyError:
            print(
                f"{docname}.ipynb: not in {args.build / '.jupyter_cache'}: build the book first",
                file=sys.stderr,
            )
            failed = True
            continue
        executed = json.loads(nbformat.writes(executed))
        copy, faults = colab_copy(executed, docname, resolver, source.parent, commit)
        for fault in faults:
            print(f"{docname}.ipynb: {fault}", file=sys.stderr)
        failed |= bool(faults)
        target = args.out / "book" / source.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(copy, indent=1, ensure_ascii=False) + "\n")
    if failed:
        print("the Colab copies are not what Colab should show (faults above)", file=sys.stderr)
        return 1
    print(f"wrote {len(sources)} Colab copies to {args.out / 'book'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
