"""Renderers as views: one interface (a report's JSON form and a context in, text out) and
one registry, so the CLI never picks a renderer with if/elif and every format is golden-tested
the same way (tests/test_views.py)."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from omni_host.report.formats import Timelines


@dataclass(frozen=True)
class ViewContext:
    """What a view may need besides the report: the check layers (HTML), the history of
    each check (HTML timelines), the terminal width (table)."""

    layers: dict[str, str] = field(default_factory=dict)
    timelines: Timelines = field(default_factory=dict)
    width: int = 100
    color: bool = False


def _table(doc: dict[str, Any], ctx: ViewContext) -> str:
    from rich.console import Console

    from omni_host.report.text import render_table

    buf = io.StringIO()
    render_table(doc, Console(file=buf, width=ctx.width, no_color=not ctx.color,
                              force_terminal=ctx.color, soft_wrap=False))
    return buf.getvalue()


def _json(doc: dict[str, Any], ctx: ViewContext) -> str:
    return json.dumps(doc, indent=2) + "\n"


def _markdown(doc: dict[str, Any], ctx: ViewContext) -> str:
    from omni_host.report.text import render_markdown

    buf = io.StringIO()
    render_markdown(doc, buf)
    return buf.getvalue()


def _html(doc: dict[str, Any], ctx: ViewContext) -> str:
    from omni_host.report.formats import render_html

    return render_html(doc, ctx.layers, ctx.timelines)


def _junit(doc: dict[str, Any], ctx: ViewContext) -> str:
    from omni_host.report.formats import render_junit

    return render_junit(doc)


def _prometheus(doc: dict[str, Any], ctx: ViewContext) -> str:
    from omni_host.report.formats import render_prometheus

    return render_prometheus(doc)


VIEWS: dict[str, Callable[[dict[str, Any], ViewContext], str]] = {
    "table": _table, "json": _json, "markdown": _markdown, "html": _html, "junit": _junit,
    "prometheus": _prometheus,
}
NEEDS_HISTORY = frozenset({"html"})


def render(fmt: str, doc: dict[str, Any], ctx: ViewContext) -> str:
    return VIEWS[fmt](doc, ctx)
