"""Renderers as views: one interface (a typed report and a context in, text out) and
one registry, so the CLI never picks a renderer with if/elif and every format is golden-tested
the same way (tests/test_views.py)."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from omni_host.report.formats import Timelines, Trends
    from omni_host.report.history import History
    from omni_host.reports import Report


@dataclass(frozen=True)
class ViewContext:
    """What a view may need besides the report: the check layers (HTML), each check's
    lesson (table), the history of each check (HTML timelines), the terminal width and
    verbosity (table: -1 quiet, 0 default, 1 verbose)."""

    layers: dict[str, str] = field(default_factory=dict)
    rationale: dict[str, str] = field(default_factory=dict)
    timelines: Timelines = field(default_factory=dict)
    trends: Trends = field(default_factory=dict)  # HTML: tokens/s of each bench test over time
    width: int = 80
    color: bool = False
    verbosity: int = 0


def context(fmt: str, report: Report, history: Callable[[], History], *,
            width: int = 80, color: bool = False, verbosity: int = 0) -> ViewContext:
    """The context ``fmt`` needs: the catalog for the table and HTML, the report store only
    for HTML (other formats never read it)."""
    if fmt not in ("table", "html"):
        return ViewContext(width=width, color=color, verbosity=verbosity)
    from omni_host.evaluate.checks import catalog

    metas = catalog().values()
    timelines: Timelines = {}
    trends: Trends = {}
    if fmt in NEEDS_HISTORY:
        from omni_host.report.history import timelines as history_timelines
        from omni_host.report.history import tokens_series

        stored = history()
        timelines, trends = history_timelines(stored, report), tokens_series(stored, report)
    return ViewContext(layers={m.id: m.layer for m in metas},
                       rationale={m.id: m.rationale for m in metas}, timelines=timelines,
                       trends=trends, width=width, color=color, verbosity=verbosity)


def show_table(report: Report, ctx: ViewContext, console: Console) -> None:
    """The terminal view printed to ``console`` (a live terminal, or a buffer)."""
    from omni_host.report.terminal import show, terminal_lines
    from omni_host.report.text import runnable

    show(terminal_lines(runnable(report), ctx.width, ctx.verbosity, ctx.rationale), console)


def _table(report: Report, ctx: ViewContext) -> str:
    from rich.console import Console

    buf = io.StringIO()
    show_table(report, ctx, Console(file=buf, width=ctx.width, no_color=not ctx.color,
                                 force_terminal=ctx.color))
    return buf.getvalue()


def _json(report: Report, ctx: ViewContext) -> str:
    return json.dumps(report.to_dict(), indent=2) + "\n"


def _markdown(report: Report, ctx: ViewContext) -> str:
    from omni_host.report.text import render_markdown, runnable

    buf = io.StringIO()
    render_markdown(runnable(report), buf)
    return buf.getvalue()


def _html(report: Report, ctx: ViewContext) -> str:
    from omni_host.report.formats import render_html
    from omni_host.report.text import runnable

    return render_html(runnable(report, mark=False), ctx.layers, ctx.timelines, ctx.trends)


def _junit(report: Report, ctx: ViewContext) -> str:
    from omni_host.report.formats import render_junit

    return render_junit(report)


def _prometheus(report: Report, ctx: ViewContext) -> str:
    from omni_host.report.formats import render_prometheus

    return render_prometheus(report)


VIEWS: dict[str, Callable[[Report, ViewContext], str]] = {
    "table": _table, "json": _json, "markdown": _markdown, "html": _html, "junit": _junit,
    "prometheus": _prometheus,
}
NEEDS_HISTORY = frozenset({"html"})
# what each view imports to render: ``ready`` imports it ahead
NEEDS_MODULES = {
    "table": ("rich.console", "rich.text", "omni_host.report.terminal"),
    "markdown": ("omni_host.report.text",), "html": ("omni_host.report.formats",),
    "junit": ("omni_host.report.formats",), "prometheus": ("omni_host.report.formats",),
}


def ready(fmt: str) -> None:
    """Import now what rendering ``fmt`` needs (the terminal view: rich, 15-40 ms), so that a
    run can do it while its host works instead of after (the bench's fixed cost, issue 44)."""
    import importlib

    for name in NEEDS_MODULES.get(fmt, ()):
        importlib.import_module(name)


def render(fmt: str, report: Report, ctx: ViewContext) -> str:
    return VIEWS[fmt](report, ctx)
