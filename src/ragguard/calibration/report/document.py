"""The report as a document: blocks (``Heading``, ``Para``, ``Bullets``,
``Table``, ``Figure``) in a ``Report``, rendered to Markdown or to one
self-contained HTML page."""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Para:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    numeric: tuple[bool, ...] = ()


@dataclass(frozen=True)
class Figure:
    name: str
    caption: str
    png: bytes = field(repr=False)


Block = Heading | Para | Bullets | Table | Figure


@dataclass(frozen=True)
class Report:
    """A report as blocks, rendered to Markdown or HTML."""

    title: str
    blocks: tuple[Block, ...]
    plots: bool

    @property
    def figures(self) -> tuple[Figure, ...]:
        """The plots, in order."""
        return tuple(b for b in self.blocks if isinstance(b, Figure))

    def markdown(self, plot_dir: str = "plots") -> str:
        """The report in Markdown; figures point to ``plot_dir/NAME``. Text from the
        data (queries, ids, names) never becomes HTML: ``<`` and ``&`` are written as
        entities everywhere, so a viewer that renders HTML in Markdown shows them."""
        out = [f"# {_md(self.title)}", ""]
        for b in self.blocks:
            if isinstance(b, Heading):
                out += ["#" * (b.level + 1) + " " + _md(b.text), ""]
            elif isinstance(b, Para):
                out += [_md(b.text), ""]
            elif isinstance(b, Bullets):
                out += [f"- {_md(item)}" for item in b.items] + [""]
            elif isinstance(b, Table):
                out.append("| " + " | ".join(_md_cell(c) for c in b.header) + " |")
                aligns = b.numeric or (False,) * len(b.header)
                out.append("|" + "|".join("---:" if a else "---" for a in aligns) + "|")
                out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b.rows]
                out.append("")
            else:
                caption = _md(b.caption)
                out += [f"![{caption}]({plot_dir}/{b.name})", "", f"*{caption}*", ""]
        return "\n".join(out).rstrip() + "\n"

    def html(self) -> str:
        """The report as one self-contained XHTML-compatible page (plots inline)."""
        body: list[str] = [f"<h1>{_inline(self.title)}</h1>"]
        for b in self.blocks:
            if isinstance(b, Heading):
                level = min(b.level + 1, 6)
                anchor = re.sub(r"[^a-z0-9]+", "-", b.text.lower()).strip("-")
                body.append(f'<h{level} id="{anchor}">{_inline(b.text)}</h{level}>')
            elif isinstance(b, Para):
                body.append(f"<p>{_inline(b.text)}</p>")
            elif isinstance(b, Bullets):
                items = "".join(f"<li>{_inline(i)}</li>" for i in b.items)
                body.append(f"<ul>{items}</ul>")
            elif isinstance(b, Table):
                aligns = b.numeric or (False,) * len(b.header)
                head = "".join(f"<th>{_inline(c)}</th>" for c in b.header)
                rows = "".join(
                    "<tr>"
                    + "".join(
                        f'<td class="num">{_inline(c)}</td>' if a else f"<td>{_inline(c)}</td>"
                        for c, a in zip(row, aligns, strict=True)
                    )
                    + "</tr>"
                    for row in b.rows
                )
                body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
            else:
                data = base64.b64encode(b.png).decode("ascii")
                body.append(
                    f'<figure><img src="data:image/png;base64,{data}" '
                    f'alt="{html.escape(b.caption, quote=True)}" data-plot="{b.name}" />'
                    f"<figcaption>{_inline(b.caption)}</figcaption></figure>"
                )
        return (
            "<!DOCTYPE html>\n"
            '<html lang="en">\n<head>\n<meta charset="utf-8" />\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1" />\n'
            f"<title>{html.escape(self.title)}</title>\n<style>{_CSS}</style>\n</head>\n"
            "<body>\n<main>\n" + "\n".join(body) + "\n</main>\n</body>\n</html>\n"
        )


_CSS = """
body{font-family:-apple-system,BlinkMacSystemFont,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;
color:#1f2328;background:#fff;margin:0;line-height:1.5}
main{max-width:1080px;margin:0 auto;padding:24px 32px 64px}
h1{font-size:1.9em;border-bottom:1px solid #d0d7de;padding-bottom:.3em}
h2{font-size:1.4em;margin-top:1.8em;border-bottom:1px solid #d0d7de;padding-bottom:.2em}
h3{font-size:1.1em;margin-top:1.4em}
code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.9em;
background:#f0f2f4;padding:.1em .3em;border-radius:4px}
table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:.92em}
th,td{border:1px solid #d0d7de;padding:4px 10px;vertical-align:top}
th{background:#f6f8fa;text-align:left}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tbody tr:nth-child(even){background:#fafbfc}
figure{margin:1em 0 1.6em}
figure img{max-width:100%;height:auto;border:1px solid #eaeef2}
figcaption{color:#57606a;font-size:.9em;margin-top:.3em}
"""


def _md(text: str) -> str:
    """``text`` safe in Markdown that a viewer may render as HTML: ``&`` and ``<`` as
    entities (everywhere, code spans included: a viewer that reads a code span
    differently from us must still find no tag), so no tag or entity from the data
    reaches the page."""
    return text.replace("&", "&amp;").replace("<", "&lt;")


def _md_cell(text: str) -> str:
    return _md(text).replace("|", "\\|").replace("\n", " ")


def _inline(text: str) -> str:
    """Escape ``text`` and render `code` and **bold** spans."""
    out = html.escape(text, quote=False)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", out)
