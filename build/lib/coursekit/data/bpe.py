"""Byte-pair encoding (Sennrich et al. 2016): learn merges from a corpus.

Start from the corpus's characters. Count every pair of adjacent symbols in the corpus, merge the
most frequent pair into one new symbol everywhere, and repeat: each merge adds one symbol to the
vocabulary and shortens the text. Which pieces a word is cut into follows the counts of symbol
pairs in the corpus, not the word's own frequency alone.

The base alphabet is the characters the corpus contains, so text with any other character
(a ``z`` this corpus never uses, a capital letter) cannot be encoded: ``encode`` raises a
``KeyError`` naming the character. GPT-2's BPE (Radford et al. 2019, section 2.2) starts
instead from the 256 values of a byte and runs on the text's UTF-8 bytes, so that every string
can be encoded with a base vocabulary of 256 symbols, where one symbol per Unicode character
would need over 130,000.

As in GPT-2, a word carries the space before it (written ``▁``): ``"the dog"`` is the words
``"the"`` and ``"▁dog"``, so merges never cross a word boundary and decoding is concatenation.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

SPACE = "▁"


def merge_pair(ids: Sequence[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """Replace every occurrence of ``pair`` in ``ids`` by ``new_id``, scanning left to right.

    Occurrences do not overlap: (a, a, a) with pair (a, a) becomes (new, a).
    """
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def pair_counts(words: dict[tuple[int, ...], int]) -> Counter[tuple[int, int]]:
    """How often each pair of adjacent symbols occurs, over words weighted by their count."""
    counts: Counter[tuple[int, int]] = Counter()
    for word, n in words.items():
        for pair in zip(word, word[1:], strict=False):
            counts[pair] += n
    return counts


def pre_tokenize(text: str) -> list[str]:
    """Split on spaces; every word but the first carries the space before it (``▁dog``)."""
    return [w if i == 0 else SPACE + w for i, w in enumerate(text.split(" ")) if w or i == 0]


class BPE:
    """A byte-pair-encoding tokenizer: ``BPE.train(corpus, n_merges)``, ``encode``, ``decode``.

    ``itos``: the special tokens, then the characters of the corpus (the base alphabet), then one
    symbol per merge;
    ``merges``: the learned pairs in order, merge r making symbol ``n_base + r``.
    """

    specials = ("<pad>", "<bos>", "<eos>")
    pad_id, bos_id, eos_id = 0, 1, 2

    def __init__(self, chars: Iterable[str], merges: Sequence[tuple[int, int]] = ()) -> None:
        self.itos = [*self.specials, *sorted(set(chars))]
        self.n_base = len(self.itos)
        self.merges: list[tuple[int, int]] = []
        self._cache: dict[str, list[int]] = {}  # word -> ids
        for pair in merges:
            self._add(pair)

    def _add(self, pair: tuple[int, int]) -> int:
        self.merges.append(pair)
        self._cache.clear()
        self.itos.append(self.itos[pair[0]] + self.itos[pair[1]])
        return len(self.itos) - 1

    @property
    def stoi(self) -> dict[str, int]:
        return {s: i for i, s in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    def __repr__(self) -> str:
        return f"BPE({len(self)} symbols: {self.n_base} specials and characters, {len(self.merges)} merges)"

    @classmethod
    def train(cls, corpus: Iterable[str], n_merges: int) -> BPE:
        """Learn up to ``n_merges`` merges from lines of text; ties go to the pair seen first."""
        word_counts = Counter(w for line in corpus for w in pre_tokenize(line))
        bpe = cls(c for w in word_counts for c in w)
        stoi = bpe.stoi
        words = {tuple(stoi[c] for c in w): n for w, n in word_counts.items()}
        for _ in range(n_merges):
            counts = pair_counts(words)
            if not counts:
                break
            pair = max(counts, key=counts.__getitem__)  # the first of the most frequent
            new_id = bpe._add(pair)
            words = {tuple(merge_pair(w, pair, new_id)): n for w, n in words.items()}
        return bpe

    def encode_word(self, word: str) -> list[int]:
        """One pre-tokenized word -> ids, applying the merges in the order they were learned."""
        stoi = self.stoi
        unknown = [c for c in word if c not in stoi]
        if unknown:
            raise KeyError(f"{unknown[0]!r} is not in the base alphabet: this BPE starts from "
                           "the characters of its training corpus (GPT-2's starts from 256 bytes)")
        ids = [stoi[c] for c in word]
        for rank, pair in enumerate(self.merges):
            if len(ids) < 2:
                break
            ids = merge_pair(ids, pair, self.n_base + rank)
        return ids

    def encode(self, text: str, bos: bool = False, eos: bool = False) -> list[int]:
        ids = [self.bos_id] if bos else []
        for word in pre_tokenize(text):
            if word not in self._cache:
                self._cache[word] = self.encode_word(word)
            ids += self._cache[word]
        return ids + ([self.eos_id] if eos else [])

    def decode(self, ids: Iterable[int]) -> str:
        """Ids back to text, stopping at ``<eos>`` and skipping ``<pad>``/``<bos>``."""
        out = []
        for i in ids:
            i = int(i)
            if i == self.eos_id:
                break
            if i >= len(self.specials):
                out.append(self.itos[i])
        return "".join(out).replace(SPACE, " ")

    def tokens(self, text: str) -> list[str]:
        """The pieces ``text`` is cut into (for display)."""
        return [self.itos[i] for i in self.encode(text)]
