"""A tiny document model written twice: as Markdown (next to its PNGs) and as one self-contained HTML page.

The report is headings, paragraphs, tables and images; building it once as
blocks and rendering each block to both formats keeps the two in step
without a Markdown library.  Inline markup is limited to ``code`` and
``**bold**``.  The HTML embeds every image as a ``data:`` URI, links only to
its own headings, and carries a small script that writes
``data-images-loaded="ok/total"`` on ``<body>`` once the page has loaded, so
a headless browser can prove that every image decoded.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field
from pathlib import Path

_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*([^*]+)\*\*")
_IMAGES_SCRIPT = """
window.addEventListener("load", function () {
  var images = document.images, ok = 0;
  for (var i = 0; i < images.length; i++) {
    if (images[i].complete && images[i].naturalWidth > 0) { ok++; }
  }
  document.body.setAttribute("data-images-loaded", ok + "/" + images.length);
});
"""
_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 72rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.6rem; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f3f3f3; }
img { max-width: 100%; border: 1px solid #eee; }
code { background: #f5f5f5; padding: 0 0.2rem; }
nav ul { columns: 2; }
"""


def slug(text: str) -> str:
    """An HTML id for a heading."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


def _inline_html(text: str) -> str:
    escaped = html.escape(text, quote=False)
    escaped = _CODE.sub(lambda m: f"<code>{m.group(1)}</code>", escaped)
    return _BOLD.sub(lambda m: f"<strong>{m.group(1)}</strong>", escaped)


def _cell_markdown(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _numeric(text: str) -> bool:
    return bool(re.fullmatch(r"[-+]?[\d.,]+\s*(%|[kMGTPE]?\w*)?", text.strip()))


@dataclass
class Document:
    """Blocks in order; :meth:`markdown` and :meth:`html` render them."""

    title: str
    blocks: list[tuple] = field(default_factory=list)

    def heading(self, text: str) -> None:
        self.blocks.append(("heading", text))

    def paragraph(self, text: str) -> None:
        self.blocks.append(("paragraph", text))

    def bullets(self, items: list[str]) -> None:
        self.blocks.append(("bullets", list(items)))

    def table(self, header: list[str], rows: list[list[str]]) -> None:
        self.blocks.append(("table", list(header), [list(map(str, row)) for row in rows]))

    def image(self, path: Path, alt: str) -> None:
        self.blocks.append(("image", Path(path), alt))

    def markdown(self, relative_to: Path) -> str:
        """Markdown; images as paths relative to the Markdown file's folder."""
        out = [f"# {self.title}", ""]
        for block in self.blocks:
            kind = block[0]
            if kind == "heading":
                out += [f"## {block[1]}", ""]
            elif kind == "paragraph":
                out += [block[1], ""]
            elif kind == "bullets":
                out += [f"- {item}" for item in block[1]] + [""]
            elif kind == "table":
                header, rows = block[1], block[2]
                out.append("| " + " | ".join(map(_cell_markdown, header)) + " |")
                out.append("|" + "|".join("---" for _ in header) + "|")
                out += ["| " + " | ".join(map(_cell_markdown, row)) + " |" for row in rows]
                out.append("")
            elif kind == "image":
                out += [f"![{block[2]}]({Path(block[1]).relative_to(relative_to).as_posix()})", ""]
        return "\n".join(out).rstrip() + "\n"

    def html(self) -> str:
        """One page: images embedded as data: URIs, links only to its own headings."""
        headings = [block[1] for block in self.blocks if block[0] == "heading"]
        out = [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{html.escape(self.title)}</title>",
            f"<style>{_STYLE}</style>",
            f"<script>{_IMAGES_SCRIPT}</script>",
            "</head><body>",
            f"<h1>{_inline_html(self.title)}</h1>",
            "<nav><ul>" + "".join(f'<li><a href="#{slug(h)}">{_inline_html(h)}</a></li>' for h in headings)
            + "</ul></nav>",
        ]
        for block in self.blocks:
            kind = block[0]
            if kind == "heading":
                out.append(f'<h2 id="{slug(block[1])}">{_inline_html(block[1])}</h2>')
            elif kind == "paragraph":
                out.append(f"<p>{_inline_html(block[1])}</p>")
            elif kind == "bullets":
                out.append("<ul>" + "".join(f"<li>{_inline_html(item)}</li>" for item in block[1]) + "</ul>")
            elif kind == "table":
                header, rows = block[1], block[2]
                heads = "".join(f"<th>{_inline_html(h)}</th>" for h in header)
                out.append(f"<table><thead><tr>{heads}</tr></thead><tbody>")
                for row in rows:
                    cells = "".join(
                        f'<td class="num">{_inline_html(c)}</td>' if _numeric(c) else f"<td>{_inline_html(c)}</td>"
                        for c in row
                    )
                    out.append(f"<tr>{cells}</tr>")
                out.append("</tbody></table>")
            elif kind == "image":
                data = base64.b64encode(Path(block[1]).read_bytes()).decode("ascii")
                out.append(f'<p><img src="data:image/png;base64,{data}" alt="{html.escape(block[2])}"></p>')
        out.append("</body></html>")
        return "\n".join(out) + "\n"
