"""The harness audit: two configurations compared on the same items.

:func:`select` picks one configuration's results out of a run (a directory may
hold several: models × policies); :func:`compare` pairs two sets of results
item by item and gives, per task × length and overall, the mean score of each,
the difference B − A with a paired-bootstrap 95% interval, the wins, losses
and ties of B against A, and the mean differences in tokens, cost and time.

Two trials pair when they ran the same item: the same suite, item id, task
and length (an item's id is stable for a suite, seed and length). Items only
one side ran are counted and left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from recursa.errors import UsageError
from recursa.evals.report import length_text
from recursa.evals.stats import Interval, mean, paired_bootstrap
from recursa.evals.trials import TrialResult, iter_groups

if TYPE_CHECKING:
    from rich.console import Console

PairKey = tuple[str, int, str, str, int]
"""suite, seed, item, task, length: an item id alone is the same under every
seed (RULER's ``niah_single_1/4096/0``), so the seed is part of the pairing."""

OVERALL = "all"


def configs(results: Sequence[TrialResult]) -> list[str]:
    """The configurations (``MODEL · POLICY``) present, in first-seen order."""
    return [config for (config,), _ in iter_groups(results, "config")]


def _matches(result: TrialResult, selector: str) -> bool:
    return selector in (
        result.config,
        result.model,
        result.policy,
        f"{result.model}|{result.policy}",
        f"{result.model}/{result.policy}",
    )


def select(results: Sequence[TrialResult], config: str | None) -> list[TrialResult]:
    """One configuration's results. ``config`` names it as ``MODEL · POLICY``,
    ``MODEL|POLICY``, or by its model or its policy label alone when that is
    unambiguous; None takes the only configuration there is. Anything else
    is a one-line :class:`UsageError` listing the configurations present."""
    present = configs(results)
    if not present:
        raise UsageError("no trial results to compare")
    listing = ", ".join(present)
    if config is None:
        if len(present) > 1:
            raise UsageError(f"several configurations here, choose one: {listing}")
        return list(results)
    chosen = [r for r in results if _matches(r, config)]
    found = configs(chosen)
    if not found:
        raise UsageError(f"no configuration {config!r} here; there are: {listing}")
    if len(found) > 1:
        raise UsageError(f"{config!r} names several configurations: {', '.join(found)}")
    return chosen


@dataclass(frozen=True, slots=True)
class PairedRow:
    """The comparison over one task × length (``task`` is :data:`OVERALL`
    and ``length`` 0 for all pairs). Differences are B − A; the token, cost
    and time differences are means over the pairs."""

    task: str
    length: int
    mean_a: float
    mean_b: float
    difference: Interval
    wins: int
    losses: int
    ties: int
    input_tokens: float
    output_tokens: float
    total_tokens: float
    cost: float
    wall_s: float

    @property
    def n(self) -> int:
        return self.difference.n


@dataclass(frozen=True, slots=True)
class Comparison:
    label_a: str
    label_b: str
    rows: tuple[PairedRow, ...]
    """Per task × length, sorted, then the overall row last."""
    only_a: int
    only_b: int

    @property
    def overall(self) -> PairedRow:
        return self.rows[-1]


def _key(result: TrialResult) -> PairKey:
    return (result.suite, result.seed, result.item, result.task, result.length)


def _by_item(results: Sequence[TrialResult], side: str) -> dict[PairKey, TrialResult]:
    indexed: dict[PairKey, TrialResult] = {}
    for result in results:
        key = _key(result)
        if key in indexed:
            raise UsageError(
                f"{side} holds two trials of item {result.item!r} "
                f"({indexed[key].config} and {result.config}): select one configuration"
            )
        indexed[key] = result
    return indexed


def _label(results: Sequence[TrialResult]) -> str:
    return " + ".join(configs(results))


def _row(
    task: str, length: int, pairs: Sequence[tuple[TrialResult, TrialResult]], seed: int
) -> PairedRow:
    a = [x.score for x, _ in pairs]
    b = [y.score for _, y in pairs]

    def delta(attribute: str) -> float:
        return mean([float(getattr(y, attribute)) - float(getattr(x, attribute)) for x, y in pairs])

    return PairedRow(
        task=task,
        length=length,
        mean_a=mean(a),
        mean_b=mean(b),
        difference=paired_bootstrap(a, b, seed=seed),
        wins=sum(y > x for x, y in zip(a, b, strict=True)),
        losses=sum(y < x for x, y in zip(a, b, strict=True)),
        ties=sum(y == x for x, y in zip(a, b, strict=True)),
        input_tokens=delta("input_tokens"),
        output_tokens=delta("output_tokens"),
        total_tokens=delta("total_tokens"),
        cost=delta("cost"),
        wall_s=delta("wall_s"),
    )


def compare(
    results_a: Sequence[TrialResult],
    results_b: Sequence[TrialResult],
    *,
    seed: int = 0,
    labels: tuple[str, str] | None = None,
) -> Comparison:
    """Pair A and B on the items both ran; a :class:`UsageError` when either
    side holds an item twice (several configurations: :func:`select` first)
    or when they share no item. Each side is named by its configuration, or
    by ``labels`` (two runs of one configuration, before and after a change
    to the harness, share a configuration: name them by their directories)."""
    a = _by_item(results_a, "A")
    b = _by_item(results_b, "B")
    common = [key for key in a if key in b]
    if not common:
        raise UsageError("the two sides share no item: were they run on the same suite and seed?")
    pairs = [(a[key], b[key]) for key in common]
    cells: dict[tuple[str, int], list[tuple[TrialResult, TrialResult]]] = {}
    for x, y in pairs:
        cells.setdefault((x.task, x.length), []).append((x, y))
    rows = [_row(task, length, cells[task, length], seed) for task, length in sorted(cells)]
    rows.append(_row(OVERALL, 0, pairs, seed))
    label_a, label_b = labels or (_label(results_a), _label(results_b))
    return Comparison(
        label_a=label_a,
        label_b=label_b,
        rows=tuple(rows),
        only_a=len(a) - len(common),
        only_b=len(b) - len(common),
    )


# -- rendering ---------------------------------------------------------------

SCORE_HEADERS = ("task", "len", "n", "A", "B", "B − A [95% CI]", "B W/L/T")
SPEND_HEADERS = ("task", "len", "n", "output tok", "total tok", "cost", "wall s")


def _signed(value: float, digits: int = 2) -> str:
    return f"{value:+.{digits}f}"


def _signed_count(value: float) -> str:
    """A signed count in a few characters: +950, -12.3k, +4.1M."""
    size = abs(value)
    if size < 1000:
        return f"{value:+.0f}"
    if size < 999_500:
        return f"{value / 1000:+.3g}k"
    return f"{value / 1_000_000:+.3g}M"


def score_cells(row: PairedRow) -> list[str]:
    """The score table's cells: means, the difference and its interval, and
    B's wins, losses and ties against A."""
    d = row.difference
    return [
        row.task,
        length_text(row.length),
        str(row.n),
        f"{row.mean_a:.2f}",
        f"{row.mean_b:.2f}",
        f"{_signed(d.mean)} [{_signed(d.low)}, {_signed(d.high)}]",
        f"{row.wins}/{row.losses}/{row.ties}",
    ]


def spend_cells(row: PairedRow) -> list[str]:
    """The expenditure table's cells: B − A, mean per pair."""
    return [
        row.task,
        length_text(row.length),
        str(row.n),
        _signed_count(row.output_tokens),
        _signed_count(row.total_tokens),
        f"{'-' if row.cost < 0 else '+'}${abs(row.cost):.2g}" if row.cost else "0",
        _signed(row.wall_s, 1),
    ]


def verdict(row: PairedRow) -> str:
    """One sentence on the overall difference: whether its interval excludes 0."""
    d = row.difference
    if d.low > 0:
        return f"B scores higher than A by {d.mean:.3f} (95% interval above 0)."
    if d.high < 0:
        return f"B scores lower than A by {-d.mean:.3f} (95% interval below 0)."
    return f"No clear difference: the 95% interval [{d.low:+.3f}, {d.high:+.3f}] holds 0."


def render_comparison(comparison: Comparison, console: Console) -> None:
    """Print the paired scores, the paired expenditure, what was left
    unpaired, and the verdict; within 80 columns."""
    from rich.table import Table

    def table(headers: Sequence[str]) -> Table:
        grid = Table(
            box=None,
            pad_edge=False,
            padding=(0, 1),
            collapse_padding=True,
            header_style="bold underline",
        )
        for index, header in enumerate(headers):
            if index == 0:
                grid.add_column(header, min_width=13)
            else:
                grid.add_column(header, justify="right", no_wrap=True)
        return grid

    console.print(f"A: {comparison.label_a}")
    console.print(f"B: {comparison.label_b}")
    scores = table(SCORE_HEADERS)
    spend = table(SPEND_HEADERS)
    for row in comparison.rows:
        style = "bold" if row.task == OVERALL else None
        scores.add_row(*score_cells(row), style=style)
        spend.add_row(*spend_cells(row), style=style)
    console.print("Scores on the same items (B − A, paired bootstrap)", style="bold")
    console.print(scores)
    console.print("Expenditure, B − A, mean per pair", style="bold")
    console.print(spend)
    if comparison.only_a or comparison.only_b:
        console.print(
            f"Unpaired, left out: {comparison.only_a} item(s) only in A, "
            f"{comparison.only_b} only in B."
        )
    console.print(verdict(comparison.overall))


def comparison_json(comparison: Comparison) -> dict[str, object]:
    """The comparison as plain JSON values."""
    return {
        "a": comparison.label_a,
        "b": comparison.label_b,
        "only_a": comparison.only_a,
        "only_b": comparison.only_b,
        "rows": [
            {
                "task": row.task,
                "length": row.length,
                "pairs": row.n,
                "mean_a": row.mean_a,
                "mean_b": row.mean_b,
                "difference": row.difference.mean,
                "difference_low": row.difference.low,
                "difference_high": row.difference.high,
                "wins": row.wins,
                "losses": row.losses,
                "ties": row.ties,
                "input_tokens": row.input_tokens,
                "output_tokens": row.output_tokens,
                "total_tokens": row.total_tokens,
                "cost": row.cost,
                "wall_s": row.wall_s,
            }
            for row in comparison.rows
        ],
    }


__all__ = [
    "OVERALL",
    "Comparison",
    "PairedRow",
    "compare",
    "comparison_json",
    "configs",
    "render_comparison",
    "select",
    "verdict",
]
