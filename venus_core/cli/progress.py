"""The progress bar of the long commands (`venus bootstrap`, `data import`, `data score`, `data synth`,
`merge`, `eval …`): one kind of display for all of them, shown only on a terminal.

Why a callback: the loops live in the library (`venus_core.data.importers.run_import`,
`scoring.policy.score_dataset`, `data.synth.synthesize`, `merge.merge_checkpoints`, the
`eval` evaluators, `train.tracker.ProgressTracker` for the trainer), which must not import rich
or the CLI. Each takes an optional `progress(done, total)` callable: `done` units finished so far
(never decreasing), `total` the planned number or None when the loop cannot know it in advance
(an importer's scan, navigation steps unrolled from trajectories). `progress_bar` hands the
command such a callable that draws a rich bar — description, bar, done/total and unit, elapsed,
ETA — on stderr, or None when stderr is not a terminal, so pipes, CI logs and `--json` output
stay exactly what they were. The bar is transient: the command's own summary replaces it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from venus_core.cli._common import err_console

ProgressFn = Callable[[int, int | None], None]
"""progress(done, total): what the library loops call (module docstring)."""


class EtaColumn(TimeRemainingColumn):
    """'ETA 0:01:23'; nothing while the total is unknown."""

    def render(self, task: Task) -> Text:
        if task.total is None:
            return Text("")
        return Text.assemble("ETA ", super().render(task))


def bar_columns(unit: str) -> tuple[object, ...]:
    """description, bar, done/total (`n/?` while the total is unknown), unit, elapsed, ETA."""
    return (TextColumn("{task.description}"), BarColumn(bar_width=30), MofNCompleteColumn(),
            TextColumn(unit), TimeElapsedColumn(), EtaColumn())


@contextmanager
def progress_bar(description: str, unit: str, *, console: Console | None = None) -> Iterator[ProgressFn | None]:
    """A `progress(done, total)` callable drawing a bar on `console` (default: stderr) while the
    block runs, or None when that console is not a terminal."""
    if not unit.strip():
        raise ValueError("progress_bar: unit must name what is counted (records, tensors, samples...)")
    console = console or err_console
    if not console.is_terminal:
        yield None
        return
    # stdout stays the command's: rich would otherwise route it through this (stderr) console
    with Progress(*bar_columns(unit), console=console, transient=True, redirect_stdout=False) as bar:  # type: ignore[arg-type]
        task = bar.add_task(description, total=None)

        def update(done: int, total: int | None) -> None:
            bar.update(task, completed=done, total=total)

        yield update
