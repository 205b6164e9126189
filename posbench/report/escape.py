"""Text copied from a run folder into a generated page, made inert: one helper per output format.

Rows, ``env.json`` and ``run.json`` are data anyone can write, so a method name may hold
``<script>``, a code fence, a newline and ``# heading``, or ``| forged | row |``. Every place a
page takes text from data goes through one of these (docs/reliability.md).
"""

from __future__ import annotations

import html
import re

# Line breaks of any kind (and other control characters) would start a new Markdown block: a
# forged heading, table row or fence. Inside one line they become spaces.
_BREAKS = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")
# Markdown punctuation that could open a code span, emphasis or a table cell, the ``]`` that
# would make a link or image (``](``, ``][``; an interval ``[11, 60]`` stays as it reads; ``_`` is
# left too: names hold it, and inside a word it emphasises nothing), and a backslash that would
# escape the punctuation after it (before a space or a letter it is literal: ``method \ seq_len``).
_MD_PUNCT = re.compile(r"\\(?=[!-/:-@\[-`{-~]|$)|[`*|~]|\](?=[(\[])")
_TICKS = re.compile(r"`+")
_GE = re.compile(r"&gt;=")


def one_line(text) -> str:
    """``text`` with every line break or control character as a space."""
    return _BREAKS.sub(" ", str(text))


def md_text(text) -> str:
    """Running Markdown text or a table cell that shows ``text`` literally: one line, HTML
    characters as entities, Markdown punctuation backslash-escaped."""
    text = _MD_PUNCT.sub(lambda m: "\\" + m.group(0), html.escape(one_line(text), quote=False))
    # A comparison reads as written ("accuracy >= 90%"): with every < an entity no tag can close,
    # and inside a line > starts no quote (at the start it is escaped).
    return text[:4] + _GE.sub(">=", text[4:]) if text.startswith("&gt;") else _GE.sub(">=", text)


def _fence_for(text: str, least: int) -> str:
    return "`" * max(least, max((len(t) for t in _TICKS.findall(text)), default=0) + 1)


def md_code(text) -> str:
    """An inline code span showing ``text`` literally: a backtick run longer than any inside."""
    text = one_line(text)
    fence = _fence_for(text, 1)
    pad = " " if text.startswith(("`", " ")) or text.endswith(("`", " ")) else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_fence(text, info: str = "") -> str:
    """A fenced block holding ``text``'s lines literally: its fence is longer than any backtick
    run inside, so no line of ``text`` can close it."""
    lines = [one_line(line) for line in str(text).splitlines()] or [""]
    fence = _fence_for("\n".join(lines), 3)
    return "\n".join([fence + info, *lines, fence])


def html_text(text) -> str:
    """Text or an attribute value in HTML: ``& < > " '`` as entities."""
    return html.escape(str(text), quote=True)
