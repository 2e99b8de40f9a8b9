"""Every chapter title in the table of contents is a topic of at most eight words: a {doc} link shows
the whole title, and a title that states a finding pastes it into every sentence that cites the
chapter. The finding belongs in the chapter's first paragraph."""

import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
MAX_WORDS = 8


def toc_files():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    files = [toc["root"]]
    for part in toc["parts"]:
        files += [chapter["file"] for chapter in part["chapters"]]
    return files


def title(stem: str) -> str:
    for suffix in (".md", ".ipynb"):
        path = ROOT / f"{stem}{suffix}"
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            if suffix == ".ipynb":
                text = "\n".join(
                    "".join(cell["source"])
                    for cell in json.loads(text)["cells"]
                    if cell["cell_type"] == "markdown"
                )
            return re.search(r"^# (.+)$", text, re.M).group(1).strip()
    raise FileNotFoundError(stem)


def test_every_chapter_title_is_a_short_topic():
    files = toc_files()
    assert len(files) > 20
    long = {f: title(f) for f in files if len(title(f).split()) > MAX_WORDS}
    assert not long, f"titles of more than {MAX_WORDS} words: {long}"
