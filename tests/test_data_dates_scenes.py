"""The generated data sets of Chapter 2: human-written dates and digit scenes."""

import datetime as dt
import random

import numpy as np
import pytest
import torch

from coursekit.data.dates import FORMATS, Dates, ordinal, render
from coursekit.data.scenes import NO_CELL, NUMBER_WORDS, DigitScenes, caption_words

DAY = dt.date(2026, 11, 21)  # a Saturday


@pytest.mark.parametrize("fmt,expected", [
    ("ordinal_of", "21st of November 2026"),
    ("day_month", "21 November 2026"),
    ("month_day", "November 21, 2026"),
    ("short", "21 Nov 2026"),
    ("short_lower", "nov 21 2026"),
    ("weekday", "Saturday, 21 November 2026"),
    ("dotted", "21.11.2026"),
    ("year_first", "2026 November 21"),
])
def test_each_format_and_its_spans(fmt, expected):
    example = render(DAY, fmt)
    assert example.source == expected
    assert example.target == "2026-11-21"
    assert example.source[slice(*example.spans["year"])] == "2026"
    assert example.source[slice(*example.spans["day"])] in ("21", "21st")
    assert example.source[slice(*example.spans["month"])] in ("November", "Nov", "nov", "11")


def test_every_format_is_listed_above():
    assert set(FORMATS) == {"ordinal_of", "day_month", "month_day", "short", "short_lower",
                            "weekday", "dotted", "year_first"}


def test_ordinals():
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 31)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd", "31st"]


def test_targets_are_iso_and_sources_encode_for_a_whole_year():
    data = Dates()
    for i in range(366):
        day = dt.date(2024, 1, 1) + dt.timedelta(days=i)
        for fmt in FORMATS:
            example = render(day, fmt)
            assert dt.date.fromisoformat(example.target) == day
            data.src_vocab.encode(example.source)   # raises if a character is missing
            data.tgt_vocab.encode(example.target)


def test_split_is_by_calendar_date_seeded_and_disjoint():
    data = Dates(test_fraction=0.1, seed=0)
    train, test = set(data.train_dates), set(data.test_dates)
    assert not train & test
    assert len(train) + len(test) == (dt.date(2049, 12, 31) - dt.date(1950, 1, 1)).days + 1
    assert abs(len(test) / (len(train) + len(test)) - 0.1) < 0.001
    assert Dates(seed=0).test_dates == data.test_dates
    assert Dates(seed=1).test_dates != data.test_dates
    rng = random.Random(0)
    assert all(e.date in test for e in data.examples(200, rng, "test"))
    assert all(e.date in train for e in data.examples(200, rng, "train"))
    with pytest.raises(ValueError, match="split"):
        data.examples(1, rng, "valid")


def test_date_batches():
    data = Dates(formats=["dotted", "weekday"])
    batch = data.sample(16, random.Random(0))
    assert {e.format for e in batch.examples} <= {"dotted", "weekday"}
    assert batch.tgt_in.shape == batch.tgt_out.shape == (16, 11)
    assert batch.tgt_in[:, 0].eq(data.tgt_vocab.bos_id).all()
    assert batch.tgt_out[:, -1].eq(data.tgt_vocab.eos_id).all()
    assert batch.src.shape == (16, int(batch.src_len.max()))
    for row, example in enumerate(batch.examples):
        assert data.src_vocab.decode(batch.src[row]) == example.source
        assert data.tgt_vocab.decode(batch.tgt_out[row]) == example.target
        assert batch.src_len[row] == len(example.source)
    with pytest.raises(ValueError, match="unknown"):
        Dates(formats=["roman"])


def test_caption_words():
    assert caption_words([7]) == ["seven"]
    assert caption_words([7, 2]) == ["seven", "and", "two"]
    assert caption_words([7, 2, 1]) == ["seven", ",", "two", "and", "one"]


def test_scenes_place_the_captioned_digits_in_their_cells():
    scenes = DigitScenes(grid=3, cell=10, min_digits=1, max_digits=3)
    batch = scenes.sample(40, random.Random(0))
    assert batch.images.shape == (40, 1, 30, 30) and batch.images.dtype == torch.float32
    assert 0.0 <= batch.images.min() and batch.images.max() <= 1.0
    for b, (layout, words) in enumerate(zip(batch.layouts, batch.captions, strict=True)):
        assert 1 <= len(layout) <= 3
        assert [cell for cell, _ in layout] == sorted(cell for cell, _ in layout)  # reading order
        assert [w for w in words if w in NUMBER_WORDS] == [NUMBER_WORDS[label] for _, label in layout]
        assert scenes.vocab.decode(batch.tgt_out[b], " ") == " ".join(words)
        named = [c for c in batch.cells[b].tolist() if c != NO_CELL]
        assert named == [cell for cell, _ in layout]
        for t, word in enumerate(words):
            assert (batch.cells[b, t] != NO_CELL) == (word in NUMBER_WORDS)
        ink = batch.images[b, 0].reshape(3, 10, 3, 10).sum(dim=(1, 3)).flatten()  # per cell
        occupied = {cell for cell, _ in layout}
        for cell in range(9):
            assert (ink[cell] > 0) == (cell in occupied)


def test_scene_digits_are_the_named_digits():
    scenes = DigitScenes(min_digits=1, max_digits=1)
    batch = scenes.sample(30, random.Random(1), split="test")
    test_images = scenes.images[scenes.split_index["test"]]
    for b, [(cell, label)] in enumerate(batch.layouts):
        row, col = divmod(cell, 3)
        patch = batch.images[b, 0, row * 10:(row + 1) * 10, col * 10:(col + 1) * 10].numpy()
        # the 8x8 digit sits somewhere inside its 10x10 cell and comes from the test split
        found = [(dy, dx) for dy in range(3) for dx in range(3)
                 if any(np.array_equal(patch[dy:dy + 8, dx:dx + 8], img) for img in test_images)]
        assert found, "the placed digit is not a test-split image"
        assert batch.captions[b] == [NUMBER_WORDS[label]]


def test_scene_splits_are_disjoint_and_seeded():
    a, b = DigitScenes(seed=0), DigitScenes(seed=0)
    assert np.array_equal(a.split_index["test"], b.split_index["test"])
    assert not set(a.split_index["test"]) & set(a.split_index["train"])
    assert len(a.split_index["test"]) + len(a.split_index["train"]) == 1797
    with pytest.raises(ValueError):
        DigitScenes(cell=6)
    with pytest.raises(ValueError):
        DigitScenes(grid=2, max_digits=5)
    with pytest.raises(ValueError, match="split"):
        a.sample(1, random.Random(0), split="val")
