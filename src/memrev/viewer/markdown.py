"""Markdown of a stored file rendered safely (markdown-it-py, CommonMark and tables).

Raw HTML is off (it shows as text), links markdown-it refuses (``javascript:``,
``vbscript:``, ``file:``, ``data:``) stay text, every link gets
``rel="noopener noreferrer nofollow"``, a relative link opens that path's page
in the viewer at the same revision, and an image is shown only when it is a
file of the store (a relative path, served by ``/raw``); any other image is
its alt text. The page's CSP (``img-src 'self'``) backs this up. Which files
are Markdown is declared by the name (``.md``, ``.markdown``), never guessed.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlencode, urlsplit

from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict

from .render import visible

SUFFIXES = (".md", ".markdown")
MAX_CHARS = 1_000_000  # a larger file is shown as source only: rendering is linear, but a page must stay small


def is_markdown(path: str) -> bool:
    return path.lower().endswith(SUFFIXES)


def _in_store(target: str, base: str) -> str | None:
    """The store path a relative link or image names (from the file's folder), else ``None``."""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not parts.path:
        return None
    joined = posixpath.normpath(posixpath.join(base, parts.path))
    return joined if joined.startswith("/") and not joined.startswith("//") else None


def _link(target: str, base: str, rev: str | None, route: str) -> str | None:
    inside = _in_store(target, base)
    if inside is None:
        return None
    query = {"path": inside} | ({"rev": rev} if rev else {})
    return f"{route}?{urlencode(query)}"


def render(text: str, path: str, rev: str | None) -> str:
    """``text`` (the file ``path`` at ``rev``) as HTML that is safe to put in a page."""
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    base = posixpath.dirname(path)

    def link_open(self: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType) -> str:
        token = tokens[idx]
        href = str(token.attrGet("href") or "")
        fragment = urlsplit(href).fragment
        if href.startswith("#"):
            token.attrSet("href", href)
        else:
            inside = _link(href, base, rev, "/file")
            if inside is not None:
                token.attrSet("href", inside + (f"#{fragment}" if fragment else ""))
            else:
                token.attrSet("rel", "noopener noreferrer nofollow")
        return self.renderToken(tokens, idx, options, env)

    def image(self: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType) -> str:
        token = tokens[idx]
        src = _link(str(token.attrGet("src") or ""), base, rev, "/raw")
        alt = self.renderInlineAsText(token.children or [], options, env)
        if src is None:  # only the store's own files: nothing is fetched from elsewhere
            return f'<span class="img-alt">[image: {_escape(alt)}]</span>'
        token.attrSet("src", src)
        return self.image(tokens, idx, options, env)

    md.add_render_rule("link_open", link_open)
    md.add_render_rule("image", image)
    env: EnvType = {}
    tokens = md.parse(visible(text), env)  # control characters drawn as symbols, as on every page
    _mark_lines(tokens, path, rev)
    return md.renderer.render(tokens, md.options, env)


def _mark_lines(tokens: list[Token], path: str, rev: str | None) -> None:
    """Each heading and paragraph gets the id ``L<n>`` of its first source line (so a line's
    permalink lands on its block) and a "why" link to that line, as the source view's lines have."""
    for i, token in enumerate(tokens):
        if token.type not in ("heading_open", "paragraph_open") or not token.map or i + 1 >= len(tokens):
            continue
        inline = tokens[i + 1]
        if inline.type != "inline" or inline.children is None:
            continue
        n = token.map[0] + 1
        token.attrSet("id", f"L{n}")
        query = {"path": path, "line": n} | ({"rev": rev} if rev else {})
        link = Token("html_inline", "", 0)
        link.content = (f'<a class="why-md" href="{_escape("/why?" + urlencode(query))}" '
                        f'title="why is line {n} here?">why</a> ')
        inline.children.insert(0, link)


def _escape(text: Any) -> str:
    from markdown_it.common.utils import escapeHtml

    return escapeHtml(str(text))
