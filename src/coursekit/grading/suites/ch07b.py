"""Chapter 7, BERT (``07b_bert.ipynb``) — ``mask_tokens``, the masked-language-model inputs.

The authority is Hugging Face's ``DataCollatorForLanguageModeling.torch_mask_tokens`` (BERT's
15 % and 80/10/10 rule), driven by a stand-in tokenizer that knows only the [MASK] id and the
vocabulary size.

A random function cannot be compared element by element with a reference, so the ``call``
adapter turns what the submission returns into statistics over a large batch (each with the
count it is a share of), and ``judge`` compares them with the reference's:

    0  the share of non-special positions picked (labels ≠ -100)        ≈ p (0.15)
    1  the share of special positions picked                              = 0
    2  among picked positions, the share whose input is [MASK]            ≈ 0.80
    3  among picked positions, the share whose input is unchanged         ≈ 0.10
    4  among picked positions, the share whose input is another token     ≈ 0.10
    5  among picked positions, the share whose label is not the original  = 0
    6  among unpicked positions, the share whose input was changed        = 0
    7  the share of inputs outside the vocabulary [0, vocab_size)          = 0

Rates 0, 2, 3 and 4 are random: each is compared with the reference's by a two-sample test of
proportions (pooled z), failing beyond |z| = 4.89, a false-alarm rate of 10⁻⁶ per rate. At the
cases' sizes (about 10⁴ picked positions) a systematic error of 2 points in the 10 % shares, and
of 1 point in the 15 %, fails. Rates 1, 5, 6 and 7 are exactly 0 for a right implementation. Then
three verdicts (1 yes, 0 no) on what it draws, not only how often:

    8  called twice with generators seeded alike, it returns the same (inputs, labels)
    9  called with a generator seeded otherwise, it returns something else (its draws come
       from ``generator``, not from a seed of its own)
   10  its random replacements are spread uniformly over [0, vocab_size): a χ² test over
       ten equal bins of ids, false-alarm rate 10⁻⁶ (one replacement id for the whole batch,
       or ids drawn from a narrower range, fail it)
"""

from __future__ import annotations

import torch
from scipy.stats import chi2, norm

from coursekit.data import bert_inputs
from coursekit.grading.suite import Case, Comparison, Mutant, OutputError, Suite

IGNORE = -100


class _Tokenizer:
    """What ``torch_mask_tokens`` asks of a tokenizer: the [MASK] token, its id, and a length."""

    mask_token = "[MASK]"

    def __init__(self, mask_id: int, vocab_size: int) -> None:
        self.mask_id, self.vocab_size = mask_id, vocab_size

    def convert_tokens_to_ids(self, token: str) -> int:
        return self.mask_id

    def __len__(self) -> int:
        return self.vocab_size


def hf_mask_tokens(ids, special, mask_id, vocab_size, generator=None, p=0.15):
    """The authority: ``transformers.DataCollatorForLanguageModeling`` with BERT's settings
    (``mlm_probability=p``, ``mask_replace_prob=0.8``, ``random_replace_prob=0.1``), its
    ``torch_mask_tokens`` on a copy of ``ids`` (it writes into its argument)."""
    from transformers import DataCollatorForLanguageModeling

    collator = DataCollatorForLanguageModeling(
        _Tokenizer(mask_id, vocab_size), mlm_probability=p, mask_replace_prob=0.8,
        random_replace_prob=0.1)
    collator.generator = generator
    return collator.torch_mask_tokens(ids.clone(), special_tokens_mask=special.clone())


def statistics(result, ids, special, mask_id, vocab_size) -> torch.Tensor:
    """(inputs, labels) -> the eight rates of the module docstring, then the eight counts they
    are shares of, float64 (16,)."""
    if not isinstance(result, tuple) or len(result) != 2:
        raise OutputError(f"returned a {type(result).__name__}; it should return the tuple "
                          "(inputs, labels)")
    for what, t in zip(("inputs", "labels"), result, strict=True):
        if type(t) is not torch.Tensor:
            raise OutputError(f"{what} is a {type(t).__name__}, expected a torch.Tensor")
        if t.dtype != torch.long or tuple(t.shape) != tuple(ids.shape):
            raise OutputError(f"{what} has dtype {t.dtype} and shape {tuple(t.shape)}; expected "
                              f"torch.int64 and {tuple(ids.shape)}, like ids")
    inputs, labels = result
    picked = labels != IGNORE
    is_mask, unchanged = inputs == mask_id, inputs == ids

    pairs = [(picked, ~special), (picked, special), (is_mask, picked),
             (unchanged & ~is_mask, picked), (~unchanged & ~is_mask, picked), (labels != ids, picked),
             (~unchanged, ~picked), ((inputs < 0) | (inputs >= vocab_size), torch.ones_like(picked))]
    counts = [int(among.sum()) for _, among in pairs]
    rates = [float((where & among).sum()) / n if n else 0.0
             for (where, among), n in zip(pairs, counts, strict=True)]
    return torch.tensor(rates + counts, dtype=torch.float64)


BINS = 10
CRITICAL = float(chi2.isf(1e-6, BINS - 1))  # χ² with 9 degrees of freedom, false alarms 10⁻⁶
Z = float(norm.isf(1e-6 / 2))  # two-sided z bound, false alarms 10⁻⁶: 4.89
RANDOM, EXACT, RATES = (0, 2, 3, 4), (1, 5, 6, 7), 8
NAMES = ["the share of non-special positions picked", "the share of special positions picked",
         "among picked positions, the share that became [MASK]",
         "among picked positions, the share left unchanged",
         "among picked positions, the share given another token",
         "among picked positions, the share whose label is not the original id",
         "among positions not picked, the share whose input was changed",
         "the share of inputs outside [0, vocab_size)"]


def uniform_replacements(result, ids, mask_id, vocab_size) -> bool:
    """Whether the replacement ids (picked positions neither [MASK] nor unchanged) pass a χ²
    test of uniformity over ten equal bins of [0, vocab_size)."""
    inputs, labels = result
    replaced = inputs[(labels != IGNORE) & (inputs != mask_id) & (inputs != ids)]
    replaced = replaced[(replaced >= 0) & (replaced < vocab_size)]
    if len(replaced) < 20 * BINS:
        return False
    counts = torch.bincount(replaced * BINS // vocab_size, minlength=BINS).double()
    expected = len(replaced) / BINS
    return float(((counts - expected) ** 2 / expected).sum()) < CRITICAL


def run_mask_tokens(fn, args):
    """Call the submission with generators seeded 1, 1 and 2 (a generator reaches the batch
    grader's worker as a copy of its state); reduce what it returned to the eleven numbers of
    the module docstring."""
    ids, special, mask_id, vocab_size, p = args

    def call(seed):
        return fn(ids, special, mask_id, vocab_size, generator=torch.Generator().manual_seed(seed),
                  p=p)

    with torch.random.fork_rng(devices=[]):  # whatever it does, the caller's stream is kept
        torch.manual_seed(0)
        result, again, other = call(1), call(1), call(2)
    rates = statistics(result, ids, special, mask_id, vocab_size)

    def equal(x, y):
        return all(torch.equal(a, b) for a, b in zip(x, y, strict=True))

    verdicts = [equal(result, again), not equal(result, other),
                uniform_replacements(result, ids, mask_id, vocab_size)]
    return torch.cat([rates, torch.tensor(verdicts, dtype=torch.float64)])


def z_score(a: float, n_a: float, b: float, n_b: float) -> float:
    """The pooled two-sample z of proportions a (of n_a) and b (of n_b)."""
    if n_a == 0 or n_b == 0:
        return 0.0 if n_a == n_b else float("inf")
    pooled = (a * n_a + b * n_b) / (n_a + n_b)
    se = (pooled * (1 - pooled) * (1 / n_a + 1 / n_b)) ** 0.5
    return (a - b) / se if se > 0 else (0.0 if a == b else float("inf"))


def offending(want: torch.Tensor, have: torch.Tensor) -> tuple[int, str] | None:
    """The first rate that differs beyond chance (random rates) or at all (exact ones: 0 for a
    right implementation; compared with a wrong one's, which is random, they are tested too)."""
    for i in range(RATES):
        a, b = float(have[i]), float(want[i])
        if i in RANDOM or b != 0:
            z = z_score(a, float(have[RATES + i]), b, float(want[RATES + i]))
            if abs(z) > Z:
                return i, (f"{NAMES[i]} is {a:.3f}; the reference's is {b:.3f} (z = {z:.1f}, "
                           f"beyond ±{Z:.2f}, a false-alarm rate of 10⁻⁶)")
        elif a != b:
            return i, f"{NAMES[i]} is {a:.3f}; it should be {b:.3f}"
    return None


def judge(expected, got, atol, rtol) -> Comparison:
    """The verdict on one case: the shapes, the rates (:func:`offending`), the three verdicts."""
    if len(got) != 1 or got[0].shape != expected[0].shape or got[0].dtype != expected[0].dtype:
        return Comparison(False, "the statistics of your output could not be computed")
    want, have = expected[0], got[0]
    found = offending(want, have)
    if found is not None:
        return Comparison(False, found[1])
    checks = ["the same generator seed gives the same result",
              "another generator seed gives another result",
              "replacement ids spread uniformly over [0, vocab_size)"]
    failed = [c for k, c in enumerate(checks) if have[2 * RATES + k] != want[2 * RATES + k]]
    if failed:
        return Comparison(False, f"fails: {failed[0]}")
    return Comparison(True, "rates within chance of the reference's; draws reproducible and "
                            "uniform")


def observe(expected, got) -> str:
    """What the eleven numbers show, without guessing why."""
    want, have = expected[0], got[0]
    if have[2 * RATES] < want[2 * RATES]:
        return ("Called twice with generators seeded alike, your function returned different "
                "results: its output depends on something besides `generator` (such as the "
                "global random state)")
    if have[2 * RATES + 1] < want[2 * RATES + 1]:
        return ("Called with a generator seeded differently, your function returned exactly the "
                "same result: what it draws does not depend on `generator`")
    found = offending(want, have)
    if found is not None:
        return found[1]
    if have[2 * RATES + 2] < want[2 * RATES + 2]:
        return ("The ids that replace picked tokens are not spread uniformly over all "
                "`vocab_size` ids (a χ² test over ten bins rejects it at a false-alarm rate of "
                "10⁻⁶): each replaced position should get its own draw from [0, vocab_size)")
    return ""


# ----------------------------------------------------------------------------- cases


def _case(B, N, *, mask_id=bert_inputs.MASK_ID, vocab_size=bert_inputs.VOCAB_SIZE,
          n_special=bert_inputs.N_SPECIAL, special_share=None, p=0.15):
    def make(g):
        ids = torch.randint(n_special, vocab_size, (B, N), generator=g)
        if special_share is not None:  # specials scattered anywhere
            special = torch.rand(B, N, generator=g) < special_share
            ids = torch.where(special, torch.randint(n_special, (B, N), generator=g), ids)
            return ids, special, mask_id, vocab_size, p
        # sentences: [CLS] words [SEP], then [PAD] up to N
        lengths = torch.randint(N // 2, N + 1, (B, 1), generator=g)
        position = torch.arange(N)
        ids[:, 0] = bert_inputs.CLS_ID
        ids = torch.where(position == lengths - 1, bert_inputs.SEP_ID, ids)
        ids = torch.where(position >= lengths, 0, ids)
        return ids, ids < n_special, mask_id, vocab_size, p

    return make


CASES = [
    Case("16384 sentences: [CLS] words [SEP] [PAD]…, N=24", _case(16384, 24)),
    Case("60 % of the positions special, scattered", _case(16384, 24, special_share=0.6),
         hint="Never pick a special position ([CLS], [SEP], [PAD]: where `special` is True); "
              "15 % of the other positions are picked."),
    Case("BERT-base's ids: mask_id=103, vocab_size=30522", _case(
        16384, 24, mask_id=103, vocab_size=30522, n_special=999),
         hint="Use the `mask_id` and `vocab_size` arguments: [MASK] is `mask_id`, and a random "
              "replacement is drawn from all `vocab_size` ids."),
    Case("no special position, N=64", _case(8192, 64, special_share=0.0)),
    Case("p = 0.4: the rate is an argument", _case(16384, 24, p=0.4),
         hint="Pick positions with probability `p` (the argument; BERT's 0.15 is only its "
              "default)."),
]

# ----------------------------------------------------------------------------- mutants


def _mutant(*, rate=None, mask_share=0.8, random_of_rest=0.5, labels="picked", specials=False,
            split_all=False, mask_id_fixed=None, one_id=False, below=None, global_rng=False):
    """A wrong ``mask_tokens``; the defaults give a right one."""

    def mask_tokens(ids, special, mask_id, vocab_size, generator=None, p=0.15):
        generator = None if global_rng else generator
        mask_id = mask_id if mask_id_fixed is None else mask_id_fixed
        picked = torch.rand(ids.shape, generator=generator) < (p if rate is None else rate)
        if not specials:
            picked &= ~special
        scope = ~special if split_all else picked
        to_mask = scope & (torch.rand(ids.shape, generator=generator) < mask_share)
        to_random = scope & ~to_mask & (torch.rand(ids.shape, generator=generator) < random_of_rest)
        random_ids = torch.randint(below or vocab_size, (1,) if one_id else ids.shape,
                                   generator=generator).expand(ids.shape)
        inputs = torch.where(to_mask, mask_id, ids)
        inputs = torch.where(to_random, random_ids, inputs)
        label = {"picked": torch.where(picked, ids, IGNORE),
                 "everywhere": ids.clone(),
                 "inputs": torch.where(picked, inputs, IGNORE),
                 "inverted": torch.where(picked, IGNORE, ids)}[labels]
        return inputs, label

    return mask_tokens


MUTANTS = [
    Mutant("every picked position becomes [MASK]", _mutant(mask_share=1.0),
           "Every picked position became [MASK]. The 80/10/10 rule: of the picked positions, 80 % "
           "become [MASK], 10 % a random token, and 10 % keep their token (the model must not "
           "learn that only [MASK] positions matter)."),
    Mutant("labels everywhere", _mutant(labels="everywhere"),
           "Your labels hold the original id at every position, so the loss is computed on the "
           "unpicked ones too, where the answer is in plain sight. Put -100 (ignored by the loss) "
           "wherever a position was not picked."),
    Mutant("labels inverted", _mutant(labels="inverted"),
           "Your labels are the wrong way round: the original id belongs at the picked positions "
           "and -100 at all the others."),
    Mutant("labels are the corrupted inputs", _mutant(labels="inputs"),
           "Your labels hold the corrupted inputs ([MASK], random tokens). The label at a picked "
           "position is the ORIGINAL id, the one the model must recover: take it from `ids` "
           "before replacing anything."),
    Mutant("special positions can be picked", _mutant(specials=True),
           "Special positions ([CLS], [SEP], [PAD], where `special` is True) are picked too. "
           "Never pick them: their probability of being picked is 0."),
    Mutant("the 15 % used where the 80 % belongs", _mutant(mask_share=0.15),
           "Only about 15 % of the picked positions became [MASK]: you used p where the 80 % "
           "belongs. First pick 15 % of the positions; then, of those, 80 % become [MASK]."),
    Mutant("10 % random of all picked, not of the rest", _mutant(random_of_rest=0.1),
           "Too few random tokens and too many unchanged ones: you drew the 10 % random share "
           "among the positions that are not [MASK], but those are only 20 % of the picked ones. "
           "Of the picked positions left after the [MASK] draw, HALF get a random token "
           "(0.1 / 0.2)."),
    Mutant("80/10/10 over every position", _mutant(split_all=True),
           "You replaced tokens at positions that were not picked: the 80/10/10 split applies "
           "to the picked 15 % only; every other position keeps its token."),
    Mutant("p hard-coded", _mutant(rate=0.15),
           "Your rate is hard-coded at 0.15: pick each position with probability `p`, the "
           "argument."),
    Mutant("[MASK] id hard-coded", _mutant(mask_id_fixed=bert_inputs.MASK_ID),
           "Your [MASK] id is hard-coded: use the `mask_id` argument (BERT-base's is 103)."),
]

SUITES = [
    Suite(
        exercise="07.3",
        name="mask_tokens",
        points=3,
        reference=hf_mask_tokens,
        solution=bert_inputs.mask_tokens,
        call=run_mask_tokens,
        arg_names=("ids", "special", "mask_id", "vocab_size", "p"),
        cases=CASES,
        mutants=MUTANTS,
        judge=judge,
        observe=observe,
        hint="Pick each non-special position with probability p (labels: the original id "
             "there, -100 elsewhere); of the picked ones, 80 % become [MASK], 10 % a random id "
             "in [0, vocab_size), 10 % stay unchanged.",
    ),
]
