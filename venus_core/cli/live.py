"""What `venus run` shows while the pipeline runs: a live stage table on a terminal, plain lines elsewhere.

Both views render a `pipelines.progress.RunProgress` (stage states from kfp.local's task events,
progress from each stage's metrics.jsonl) and are context managers `run_local` enters around the
run (`view=lambda progress: LiveView(progress, sys.stdout)`).

- `LiveView` (stdout is a terminal): a `rich.live.Live` table, one row per stage in pipeline order
  with status, a progress bar of its steps, steps done / planned, elapsed, ETA and its headline
  metric, redrawn a few times a second (metrics files re-read at most once a second). It is
  transient: when the run ends the final stage table of `venus run` takes its place.
- `PlainView` (CI logs, pipes): no animation; one line per stage state change.

Both write to the stream given at construction, never to `sys.stdout` at write time: during the
run `sys.stdout` is kfp.local's stream into the task log.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import TracebackType
from typing import TextIO

from rich import box
from rich.console import Console, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from pipelines.progress import FINAL_STATES, RunProgress, StageRow, StageState

STATE_STYLE = {StageState.PENDING: "dim", StageState.RUNNING: "bold yellow", StageState.DONE: "green",
               StageState.FAILED: "bold red", StageState.CACHED: "cyan", StageState.STOPPED: "magenta"}
BAR_WIDTH = 16
NARROW_BAR_WIDTH = 8


def format_duration(seconds: float | None) -> str:
    """'-', '42s', '3:07', '1:02:03'."""
    if seconds is None:
        return "-"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def count_text(row: StageRow) -> str:
    """'60/120 steps', '7 steps' (no plan), '' (a stage without steps, or none yet and no plan)."""
    if row.unit is None or (not row.done and row.total is None):
        return ""
    done = row.done or 0
    return f"{done}/{row.total} {row.unit}" if row.total is not None else f"{done} {row.unit}"


def _display_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _bar(row: StageRow, width: int) -> RenderableType:
    if row.state is StageState.PENDING:
        return Text("")
    if row.total:
        return ProgressBar(total=row.total, completed=min(row.done or 0, row.total), width=width)
    if row.state is StageState.RUNNING:  # no steps to count (or no plan yet): a pulsing bar
        return ProgressBar(total=None, width=width)
    finished = row.state in (StageState.DONE, StageState.CACHED)
    return ProgressBar(total=1, completed=1 if finished else 0, width=width)


def _status(row: StageRow) -> RenderableType:
    if row.state is StageState.RUNNING:
        return Spinner("dots", text=Text("running", style=STATE_STYLE[row.state]), style="yellow")
    return Text(row.state.value, style=STATE_STYLE[row.state])


def stage_table(rows: list[StageRow], *, title: str | None = None, caption: str | None = None,
                width: int = 120) -> Table:
    """The live table: stage, status, bar, units done / planned, elapsed, ETA, headline metric.

    `width` is the terminal's: below 100 columns the bars are shorter, so that 80 columns hold
    the table; the unit word is left out of the count (the plain lines carry it: steps for the
    trainers, evals for evaluate).
    """
    bar_width = BAR_WIDTH if width >= 100 else NARROW_BAR_WIDTH
    table = Table(title=title, caption=caption, caption_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  collapse_padding=True)
    stage_width = max((len(r.label) for r in rows), default=5)
    table.add_column("stage", no_wrap=True, min_width=stage_width)
    table.add_column("status", no_wrap=True, min_width=9)
    table.add_column("progress", no_wrap=True, min_width=bar_width)
    table.add_column("done", justify="right", no_wrap=True)
    table.add_column("elapsed", justify="right", no_wrap=True)
    table.add_column("ETA", justify="right", no_wrap=True)
    table.add_column("metric", overflow="fold", min_width=12)
    for row in rows:
        steps_left = row.total is None or (row.done or 0) < row.total  # all done: it is in its final part
        eta = format_duration(row.eta) if row.state is StageState.RUNNING and row.eta is not None and steps_left else ""
        elapsed = format_duration(row.elapsed) if row.elapsed is not None else ""
        count = count_text(row).split(" ")[0]
        table.add_row(Text(row.label), _status(row), _bar(row, bar_width), count, elapsed, eta,
                      Text(row.headline or ""))
    return table


class LiveView:
    """The live stage table on a terminal (see the module docstring)."""

    def __init__(self, progress: RunProgress, stream: TextIO, *, title: str = "",
                 refresh_per_second: float = 4) -> None:
        self.progress = progress
        self.title = title
        self.console = Console(file=stream, highlight=False)
        self._live = Live(get_renderable=self.render, console=self.console, refresh_per_second=refresh_per_second,
                          transient=True, redirect_stdout=False, redirect_stderr=False)

    def render(self) -> RenderableType:
        self.progress.refresh()
        rows = self.progress.rows()
        elapsed = format_duration(time.time() - self.progress.started)
        caption = f"logs: {_display_path(self.progress.log_dir)}/<stage>.log  ·  Ctrl-C stops the run"
        return stage_table(rows, title=f"{self.title}  {elapsed}".strip(), caption=caption, width=self.console.width)

    def __enter__(self) -> LiveView:
        self._live.start(refresh=True)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._live.stop()


def plain_line(row: StageRow, *, clock: float | None = None) -> str:
    """One line for a state change: time, stage, state, then what is known (elapsed, steps, metric, log)."""
    stamp = time.strftime("%H:%M:%S", time.localtime(clock if clock is not None else time.time()))
    parts = [stamp, f"{row.label:<21}", f"{row.state.value:<8}"]
    if row.state in FINAL_STATES and row.state is not StageState.CACHED and row.elapsed is not None:
        parts.append(f"{row.elapsed:.1f}s")
    if row.state is not StageState.RUNNING:
        if count := count_text(row):
            parts.append(count)
        if row.headline:
            parts.append(row.headline)
    if row.state in (StageState.RUNNING, StageState.FAILED, StageState.STOPPED):
        parts.append(f"log: {_display_path(row.log)}")
    return "  ".join(parts).rstrip()


class PlainView:
    """One plain line per stage state change, for streams that are not terminals."""

    def __init__(self, progress: RunProgress, stream: TextIO) -> None:
        self.progress = progress
        self.stream = stream

    def on_change(self, row: StageRow) -> None:
        self.stream.write(plain_line(row) + "\n")
        self.stream.flush()

    def __enter__(self) -> PlainView:
        labels = ", ".join(p.label for p in self.progress.plans)
        self.stream.write(f"stages: {labels}\n")
        self.stream.flush()
        self.progress.subscribe(self.on_change)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.progress.unsubscribe(self.on_change)
