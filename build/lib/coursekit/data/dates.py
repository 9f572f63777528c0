"""Human-written dates -> ISO 8601 (``"21st of November 2026"`` -> ``"2026-11-21"``).

The classic alignment task for Bahdanau attention: to write each output character the decoder has
to find one particular part of the input (the year, the month name, the day), and where that part
sits depends on the format. Every example records where its day, month and year are in the source
(``spans``), so a trained model's attention can be scored against the true alignment.

The held-out split is by *calendar date*: a test date never appears in training, in any format.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from coursekit.data.vocab import Vocab

MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]

Piece = tuple[str, str]  # (label, text); label is "day", "month", "year" or "" for filler


def ordinal(n: int) -> str:
    """1 -> '1st', 2 -> '2nd', 11 -> '11th', 22 -> '22nd'."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _y(d: dt.date) -> Piece:
    return ("year", f"{d.year:04d}")


# Each format writes a date as labelled pieces; the labels give the alignment for free.
FORMATS: dict[str, Callable[[dt.date], list[Piece]]] = {
    "ordinal_of": lambda d: [("day", ordinal(d.day)), ("", " of "), ("month", MONTHS[d.month - 1]),
                             ("", " "), _y(d)],                                 # 21st of November 2026
    "day_month": lambda d: [("day", str(d.day)), ("", " "), ("month", MONTHS[d.month - 1]),
                            ("", " "), _y(d)],                                  # 21 November 2026
    "month_day": lambda d: [("month", MONTHS[d.month - 1]), ("", " "), ("day", str(d.day)),
                            ("", ", "), _y(d)],                                 # November 21, 2026
    "short": lambda d: [("day", str(d.day)), ("", " "), ("month", MONTHS[d.month - 1][:3]),
                        ("", " "), _y(d)],                                      # 21 Nov 2026
    "short_lower": lambda d: [("month", MONTHS[d.month - 1][:3].lower()), ("", " "),
                              ("day", f"{d.day:02d}"), ("", " "), _y(d)],       # nov 21 2026
    "weekday": lambda d: [("", WEEKDAYS[d.weekday()] + ", "), ("day", str(d.day)), ("", " "),
                          ("month", MONTHS[d.month - 1]), ("", " "), _y(d)],    # Saturday, 21 November 2026
    "dotted": lambda d: [("day", f"{d.day:02d}"), ("", "."), ("month", f"{d.month:02d}"),
                         ("", "."), _y(d)],                                     # 21.11.2026
    "year_first": lambda d: [_y(d), ("", " "), ("month", MONTHS[d.month - 1]), ("", " "),
                             ("day", str(d.day))],                              # 2026 November 21
}

SOURCE_CHARS = sorted(set("0123456789 ,.") | set("".join(MONTHS + WEEKDAYS))
                      | set("".join(MONTHS).lower()) | set("stndrdth of"))
TARGET_CHARS = list("0123456789-")


@dataclass(frozen=True)
class DateExample:
    """One date in one format. ``spans[label] = (start, end)``: where day/month/year sit in ``source``."""

    date: dt.date
    format: str
    source: str
    target: str
    spans: dict[str, tuple[int, int]]


def render(date: dt.date, fmt: str) -> DateExample:
    """Write ``date`` in format ``fmt`` (a key of :data:`FORMATS`), with its ISO target and spans."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown date format {fmt!r}: choose one of {sorted(FORMATS)}")
    source, spans = "", {}
    for label, text in FORMATS[fmt](date):
        if label:
            spans[label] = (len(source), len(source) + len(text))
        source += text
    return DateExample(date, fmt, source, date.isoformat(), spans)


@dataclass
class DateBatch:
    """src: (B, S) char ids, src_len: (B,), tgt_in: (B, 11) = BOS + ISO date, tgt_out: (B, 11) = ISO + EOS."""

    src: torch.Tensor
    src_len: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    examples: list[DateExample]

    def to(self, device: torch.device | str) -> DateBatch:
        """The same batch with its tensors on ``device``."""
        return DateBatch(self.src.to(device), self.src_len.to(device), self.tgt_in.to(device),
                         self.tgt_out.to(device), self.examples)


class Dates:
    """Dates between ``start`` and ``end`` in the formats of :data:`FORMATS`, split by calendar date.

    A seeded ``test_fraction`` of the calendar days is held out: ``sample(n, rng, "test")`` draws
    only from those days, ``"train"`` only from the others.
    """

    def __init__(self, start: dt.date = dt.date(1950, 1, 1), end: dt.date = dt.date(2049, 12, 31),
                 test_fraction: float = 0.1, seed: int = 0,
                 formats: Sequence[str] = tuple(FORMATS)) -> None:
        if not 0.0 < test_fraction < 1.0:
            raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
        unknown = set(formats) - set(FORMATS)
        if unknown or not formats:
            raise ValueError(f"unknown or no formats {sorted(unknown)}: choose from {sorted(FORMATS)}")
        days = [start + dt.timedelta(days=i) for i in range((end - start).days + 1)]
        random.Random(seed).shuffle(days)
        n_test = max(1, round(test_fraction * len(days)))
        self.test_dates, self.train_dates = sorted(days[:n_test]), sorted(days[n_test:])
        self.formats = list(formats)
        self.src_vocab, self.tgt_vocab = Vocab(SOURCE_CHARS), Vocab(TARGET_CHARS)

    def examples(self, n: int, rng: random.Random, split: str = "train") -> list[DateExample]:
        """``n`` random (date, format) pairs from one split."""
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        pool = self.train_dates if split == "train" else self.test_dates
        return [render(rng.choice(pool), rng.choice(self.formats)) for _ in range(n)]

    def batch(self, examples: Sequence[DateExample]) -> DateBatch:
        """Encode and pad a list of examples."""
        src, src_len = self.src_vocab.pad_batch([e.source for e in examples])
        tgt_in, _ = self.tgt_vocab.pad_batch([e.target for e in examples], bos=True)
        tgt_out, _ = self.tgt_vocab.pad_batch([e.target for e in examples], eos=True)
        return DateBatch(src, src_len, tgt_in, tgt_out, list(examples))

    def sample(self, n: int, rng: random.Random, split: str = "train") -> DateBatch:
        return self.batch(self.examples(n, rng, split))
