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

The outputs stay, so that a reader sees the figures and numbers before running anything. The Pages
workflow pushes the copies to the ``colab`` branch, which the Colab badges and launch buttons open;
CI writes them from its own build and fails (exit status 1) on any MyST role, directive or label
left in a Markdown cell, on a glued value that is missing, and on a glued figure that no cell displays.

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

    cells = []
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
                cell["source"] = INSTALL.sub(lambda m: f"{m.group(1)}@{commit}", source)
            cell["outputs"] = [
                o for o in cell.get("outputs", []) if not o.get("metadata", {}).get("scrapbook")
            ]
        cells.append(cell)
    copy = dict(executed, cells=cells)
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
