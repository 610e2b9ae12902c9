"""MkDocs hooks of the documentation site (``hooks:`` in mkdocs.yml).

- A page line ``<!-- fields: module.ConfigClass -->`` becomes a table of the fields that
  class declares or gives a new default (name, default, doc): the settings ``--set``,
  ``--config`` and Python take, as ``flowrl list ALGO`` prints them.
- Doctest directives (``# doctest: +SKIP``) are for the test runner, not the reader: they
  are dropped from the rendered examples.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from typing import Any

FIELDS = re.compile(r"^<!-- fields: ([\w.]+) -->$", re.M)
DOCTEST_DIRECTIVE = re.compile(r'\s*<span class="c1">#\s*doctest:[^<]*</span>')


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return FIELDS.sub(lambda m: fields_table(m.group(1)), markdown)


def on_page_content(html: str, **kwargs: Any) -> str:
    return DOCTEST_DIRECTIVE.sub("", html)


def fields_table(path: str) -> str:
    """The markdown table of the fields ``path``'s config class declares or re-defaults."""
    module, name = path.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    base = next((b for b in cls.__mro__[1:] if dataclasses.is_dataclass(b)), None)
    inherited = {n: d for n, d, _ in base.docs()} if base is not None else {}
    rows = ["| field | default | what it sets |", "| --- | --- | --- |"]
    for field, default, doc in cls.docs():
        if field in inherited and inherited[field] == default:
            continue
        shown = "required" if default is dataclasses.MISSING else f"`{default!r}`"
        rows.append(f"| `{field}` | {shown} | {doc.replace('|', '&#124;')} |")
    if len(rows) == 2:
        return "All fields as in the base class."
    return "\n".join(rows)
