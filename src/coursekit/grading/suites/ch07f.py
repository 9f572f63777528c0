"""Chapter 7, BERT (``07f_bert.ipynb``) — ``mask_tokens``, the masked-language-model inputs;
``mlm_loss``, the loss over the picked positions; ``ClsHead``, the [CLS] head of
fine-tuning.

``mask_tokens`` (07.5). The authority is Hugging Face's
``DataCollatorForLanguageModeling.torch_mask_tokens`` (BERT's 15 % and 80/10/10 rule), driven by
a stand-in tokenizer that knows only the [MASK] id and the vocabulary size.

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

``mlm_loss`` (07.6). The authority is ``transformers.BertForMaskedLM.forward`` itself, run on
the case's logits: its encoder is replaced by a stand-in that hands ``inputs_embeds`` on as the
last hidden state and its prediction head by ``nn.Identity``, so the loss it returns is its own
``CrossEntropyLoss()(prediction_scores.view(-1, vocab_size), labels.view(-1))`` (ignore index
-100) on those logits, and its gradient is that loss's. The book trains through the loss, so
the gradient with respect to the logits is compared too.

``ClsHead`` (07.7). The authority is ``transformers.BertForSequenceClassification.forward``
run on the case's hidden states, with its ``BertModel`` replaced by a stand-in that hands
``inputs_embeds`` on as the last hidden state and computes ``pooler_output`` with the model's own
``BertPooler`` (the [CLS] vector, a dense layer, tanh); Hugging Face's dropout and classifier do
the rest. The submission's ``pooler`` and ``classifier`` parameters are loaded into the pooler's
dense layer and the classifier; outputs and the gradients of the hidden states and of the four
parameters are compared. coursekit's version (the ``solution`` the chapter continues with) is
:class:`coursekit.models.bert.ClsHead`, the pooler of :meth:`Bert.pooled` (which
``tests/test_ch07b_bert.py`` holds to ``BertModel``'s ``pooler_output``) with dropout and a linear
layer.
"""

from __future__ import annotations

from functools import cache

import torch
import torch.nn.functional as F
from torch import nn

from coursekit.data import bert_inputs
from coursekit.grading.suite import (
    Case,
    Comparison,
    Mutant,
    OutputError,
    Suite,
    backward,
    load_parameters,
)
from coursekit.grading.suites.ch07_readings import (
    MASKED_LM_READINGS,
    capitalised,
    masked_lm_observation,
)
from coursekit.models import bert
from coursekit.models.bert import ClsHead

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


@cache
def bounds() -> tuple[float, float]:
    """χ²'s critical value with 9 degrees of freedom and the two-sided z bound (4.89), each at a
    false-alarm rate of 10⁻⁶. Computed on first use: scipy.stats takes about 2 s to import, which
    every check() of every chapter would otherwise pay when the registry imports this module."""
    from scipy.stats import chi2, norm

    return float(chi2.isf(1e-6, BINS - 1)), float(norm.isf(1e-6 / 2))


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
    return float(((counts - expected) ** 2 / expected).sum()) < bounds()[0]


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
            if abs(z) > (bound := bounds()[1]):
                return i, (f"{NAMES[i]} is {a:.3f}; the reference's is {b:.3f} (z = {z:.1f}, "
                           f"beyond ±{bound:.2f}, a false-alarm rate of 10⁻⁶)")
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
            split_all=False, mask_id_fixed=None, one_id=False, below=None, global_rng=False,
            independent=False):
    """A wrong ``mask_tokens``; the defaults give a right one."""

    def mask_tokens(ids, special, mask_id, vocab_size, generator=None, p=0.15):
        generator = None if global_rng else generator
        mask_id = mask_id if mask_id_fixed is None else mask_id_fixed
        picked = torch.rand(ids.shape, generator=generator) < (p if rate is None else rate)
        if not specials:
            picked &= ~special
        scope = ~special if split_all else picked
        to_mask = scope & (torch.rand(ids.shape, generator=generator) < mask_share)
        to_random = scope & (torch.rand(ids.shape, generator=generator) < random_of_rest)
        if not independent:
            to_random &= ~to_mask
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
    Mutant("random draw independent of the [MASK] draw", _mutant(random_of_rest=0.1,
                                                                  independent=True),
           "About 72 % of the picked positions became [MASK] and 18 % stayed unchanged: your "
           "10 % random draw is independent of the [MASK] draw, so it overwrites some [MASK] "
           "positions. Draw the random tokens among the picked positions that did NOT become "
           "[MASK] (half of those), or split one uniform draw into [0, 0.8), [0.8, 0.9) and "
           "[0.9, 1)."),
]

# What a share of 1 or of 0 picked means (statistic 0 is read from the labels); what a changed
# unpicked position means
MASK_READINGS = (
    (r"positions not picked, the share whose input was changed",
     "Only the picked positions change: a position whose label is −100 (not picked, the "
     "special positions included) keeps its token. Draw [MASK] and the random tokens among the "
     "picked positions only, with the same mask that sets the labels."),
    (r"share of non-special positions picked is 1\.000",
     "Every non-special position counts as picked: its label is not −100. A position that was "
     "not picked must have the label −100 (the loss ignores it); only the picked ones hold "
     "their original id."),
    (r"share of non-special positions picked is 0\.000",
     "No non-special position counts as picked (every label there is −100): pick among the "
     "positions where `special` is False (~special), each with probability p, and put their "
     "original id in the labels."),
    (r"share of non-special positions picked is",
     "Pick each non-special position on its own, with probability p (the argument): "
     "(torch.rand(ids.shape, generator=generator) < p) & ~special. Not a fixed number per "
     "sentence (Google's script picks round(0.15 · length)), not a count over the whole batch, "
     "and not another rate."),
)


# ----------------------------------------------------------------------------- 07.6 mlm_loss


class _Encoder(nn.Module):
    """Stands in for ``BertModel``: ``inputs_embeds`` is the last hidden state, and the pooled
    output, when there is a pooler, is that pooler's (Hugging Face's own ``BertPooler``)."""

    def __init__(self, pooler: nn.Module | None = None) -> None:
        super().__init__()
        self.pooler = pooler

    def forward(self, input_ids=None, inputs_embeds=None, **kwargs):
        from transformers.modeling_outputs import BaseModelOutputWithPoolingAndCrossAttentions

        pooled = None if self.pooler is None else self.pooler(inputs_embeds)
        return BaseModelOutputWithPoolingAndCrossAttentions(last_hidden_state=inputs_embeds,
                                                            pooler_output=pooled)


def _hf_config(**sizes):
    """A tiny ``transformers.BertConfig``: no encoder layer, the sizes the head needs."""
    from transformers import BertConfig

    base = dict(vocab_size=2, hidden_size=4, num_hidden_layers=0, num_attention_heads=1,
                intermediate_size=4, max_position_embeddings=2, type_vocab_size=1,
                pad_token_id=0)
    return BertConfig(**(base | sizes))


@cache
def _masked_lm(vocab_size: int):
    """``BertForMaskedLM`` whose encoder and prediction head pass the logits through."""
    from transformers import BertForMaskedLM

    model = BertForMaskedLM(_hf_config(vocab_size=vocab_size)).eval()
    model.bert, model.cls = _Encoder(), nn.Identity()
    return model


def hf_mlm_loss(logits, labels):
    """The authority: ``BertForMaskedLM``'s loss on these logits (see the module docstring)."""
    return _masked_lm(logits.shape[-1])(inputs_embeds=logits, labels=labels).loss


def _mlm_case(B, N, V, *, share=0.15, empty_rows=(), one=None, scale=3.0, low=None):
    """logits (B, N, V) of spread ``scale``; labels: a word id (from ``low`` up, the words by
    default: a special id is never picked) at the picked positions, -100 elsewhere."""
    def make(g):
        logits = scale * torch.randn(B, N, V, generator=g)
        ids = torch.randint(bert_inputs.N_SPECIAL if low is None else low, V, (B, N), generator=g)
        if one is not None:  # a single picked position in the whole batch
            picked = torch.zeros(B, N, dtype=torch.bool)
            picked[one] = True
        else:
            picked = torch.rand(B, N, generator=g) < share
            picked[:, 0] |= share >= 1.0
        picked[list(empty_rows)] = False
        assert picked.any()
        return logits, torch.where(picked, ids, IGNORE)

    return make


def _zero_labels(B, N, V):
    """Half the positions picked, labels drawn from every id, 0 included (picked at least
    twice)."""
    base = _mlm_case(B, N, V, share=0.5, low=0)

    def make(g):
        logits, labels = base(g)
        labels[0, 1], labels[-1, -2] = 0, 0
        return logits, labels

    return make


MLM_CASES = [
    Case("B=4, N=12, |V|=20, about 15 % picked", _mlm_case(4, 12, 20)),
    Case("sentences with no picked position", _mlm_case(6, 10, 16, share=0.3, empty_rows=(1, 4)),
         hint="Average over every picked position of the batch at once: a sentence with no "
              "picked position adds nothing, to the sum or to the count, and the mean is not "
              "taken sentence by sentence."),
    Case("one picked position in the whole batch", _mlm_case(3, 8, 11, one=(1, 5)),
         hint="With a single picked position, the loss is that position's cross-entropy, "
              "−log softmax(logits)[label]: the positions labelled −100 count neither in the sum "
              "nor in the count."),
    Case("logits of magnitude about 300", _mlm_case(2, 9, 12, share=0.4, scale=100.0),
         hint="With logits this large, exp overflows and the softmax of a wrong word underflows "
              "to 0, whose log is −∞: take log-probabilities with F.log_softmax (or use "
              "F.cross_entropy), which subtracts the largest logit first."),
    Case("B=1, N=7, |V|=9, every position picked", _mlm_case(1, 7, 9, share=1.0)),
    Case("picked labels include the id 0", _zero_labels(3, 6, 8),
         hint="Only the label −100 marks a position to skip: 0 is an id like any other, and a "
              "picked position whose label is 0 counts."),
]


def _first(*observations):
    """The first of ``observations`` that sees something."""
    def observe(expected, got) -> str:
        return next((text for o in observations if (text := o(expected, got))), "")

    return observe


def shape_observe(what: str):
    """``observe`` for a suite whose first output has a fixed shape: a wrong shape, said as
    what the output should hold."""

    def observe(expected, got) -> str:
        e, a = expected[0], got[0]
        if tuple(a.shape) == tuple(e.shape):
            return ""
        return f"Your output has shape {tuple(a.shape)}, expected {tuple(e.shape)}: {what}"

    return observe


def _mlm_variant(*, reduce="picked", labels_fill=None, log_softmax=True):
    """A wrong ``mlm_loss``, one bug switched on by the arguments."""

    def mlm_loss(logits, labels):
        z, y = logits.flatten(0, 1), labels.flatten()
        if labels_fill is not None:
            y = torch.where(y == IGNORE, labels_fill, y)
        if not log_softmax:
            return F.nll_loss(z, y)
        ce = F.cross_entropy(z, y, reduction="none")  # 0 where the label is -100
        picked = (y != IGNORE).float()
        if reduce == "all":
            return ce.sum() / y.numel()
        if reduce == "sum":
            return ce.sum()
        if reduce == "sentence":
            per = ce.view(labels.shape).sum(1)
            count = picked.view(labels.shape).sum(1)
            return (per[count > 0] / count[count > 0]).mean()
        return ce.sum() / picked.sum()

    return mlm_loss


MLM_MUTANTS = [
    Mutant("mean over every position", _mlm_variant(reduce="all"),
           "You divide by the number of all positions. The mean is over the picked positions "
           "only (label ≠ −100): the others count neither in the sum nor in the count."),
    Mutant("sum over the picked positions", _mlm_variant(reduce="sum"),
           "Your loss is the sum of the picked positions' cross-entropies; it is their mean (a "
           "sum would make the step size depend on how many positions were picked)."),
    Mutant("mean per sentence, then over sentences", _mlm_variant(reduce="sentence"),
           "You average within each sentence and then over the sentences, which weighs a "
           "sentence with one picked position as much as one with five. BertForMaskedLM "
           "flattens (B, N) and takes one mean over every picked position of the batch."),
    Mutant("-100 replaced by 0", _mlm_variant(labels_fill=0),
           "Your loss counts the positions that were not picked, as if their label were 0. "
           "Leave them out: the label −100 means 'no loss here' (F.cross_entropy's "
           "ignore_index=-100)."),
    Mutant("no log-softmax", _mlm_variant(log_softmax=False),
           "Your loss is −logits[label], without the log-softmax (F.nll_loss expects "
           "log-probabilities). The cross-entropy is −log softmax(logits)[label] = "
           "logsumexp(logits) − logits[label]: F.cross_entropy takes the logits themselves."),
]

# ----------------------------------------------------------------------------- 07.7 ClsHead

HEAD_NAMES = ("pooler.weight", "pooler.bias", "classifier.weight", "classifier.bias")


class HFClsHead(nn.Module):
    """The authority: ``BertForSequenceClassification`` on the hidden states (see the module
    docstring), behind the exercise's interface and parameter names."""

    def __init__(self, d_model, n_classes=2, dropout=0.1):
        super().__init__()
        from transformers import BertForSequenceClassification

        model = BertForSequenceClassification(_hf_config(
            hidden_size=d_model, num_labels=n_classes, classifier_dropout=dropout))
        # registered first, so that the parameters are named as the exercise names them
        self.pooler, self.classifier = model.bert.pooler.dense, model.classifier
        model.bert = _Encoder(model.bert.pooler)
        self.model = model

    def forward(self, hidden):
        return self.model(inputs_embeds=hidden).logits


def run_classifier_head(cls, args):
    d_model, n_classes, dropout, *weights, hidden = args
    module = cls(d_model, n_classes=n_classes, dropout=dropout)
    load_parameters(module, dict(zip(HEAD_NAMES, weights, strict=True)))
    # training mode only where dropout = 1 (every dropout site zeroes its input, no random
    # draws); with 0 < dropout < 1, eval mode checks that dropout is off
    module.train(dropout == 1)
    # fine-tuning trains through the head: the gradients of the hidden states and of the four
    # parameters are compared too
    return backward(module, (hidden,), {"hidden": 0}, params=True)


def _head_case(B, N, d_model, n_classes=2, dropout=0.0, scale=1.0):
    """The head's sizes, its four parameters (spread 0.5, so that tanh bends) and X^L. Only the
    two dropout cases have dropout: a dropout left on in eval mode fails those alone."""
    def make(g):
        weights = [0.5 * torch.randn(d_model, d_model, generator=g),
                   0.5 * torch.randn(d_model, generator=g),
                   0.5 * torch.randn(n_classes, d_model, generator=g),
                   0.5 * torch.randn(n_classes, generator=g)]
        hidden = scale * torch.randn(B, N, d_model, generator=g)
        return (d_model, n_classes, dropout, *weights, hidden)

    return make


HEAD_CASES = [
    Case("B=4, N=6, d_model=8, two classes", _head_case(4, 6, 8)),
    Case("n_classes = 3", _head_case(3, 5, 8, n_classes=3),
         hint="The classifier maps the pooled vector to `n_classes` logits: "
              "nn.Linear(d_model, n_classes), with n_classes the argument."),
    Case("N = 1: [CLS] alone", _head_case(3, 1, 6)),
    Case("B=1, N=9, d_model=5", _head_case(1, 9, 5)),
    Case("hidden states of magnitude about 20", _head_case(2, 4, 8, scale=20.0),
         hint="The pooled vector is tanh(W_p·h_[CLS] + b_p): each entry stays in (−1, 1) "
              "however large the hidden states are."),
    Case("eval mode, dropout = 0.5: no dropout", _head_case(3, 4, 8, dropout=0.5),
         hint="Dropout acts only in training mode: in eval mode (module.eval(), self.training "
              "False) the head is deterministic. nn.Dropout does this by itself; F.dropout "
              "needs training=self.training."),
    Case("training mode, dropout = 1", _head_case(3, 4, 8, dropout=1.0),
         hint="Dropout acts on the pooled vector, between the pooler and the classifier "
              "(classifier(dropout(pooled))), with the `dropout` argument as its rate: with p = 1 "
              "every pooled feature is dropped in training mode, so the logits are the "
              "classifier's bias."),
]


def _head_variant(*, pool="cls", tanh=True, pooler=True, dropout_at="pooled", act=None,
                  untransposed=False, squash=False):
    """A wrong ``ClsHead``, one bug switched on by the arguments."""

    class Variant(nn.Module):
        def __init__(self, d_model, n_classes=2, dropout=0.1):
            super().__init__()
            self.pooler = nn.Linear(d_model, d_model)
            self.dropout = nn.Dropout(dropout)
            self.classifier = nn.Linear(d_model, n_classes)

        def forward(self, hidden):
            h = {"cls": hidden[:, 0], "mean": hidden.mean(1), "last": hidden[:, -1]}[pool]
            if dropout_at == "hidden":
                h = self.dropout(h)
            if pooler:
                h = h @ self.pooler.weight + self.pooler.bias if untransposed else self.pooler(h)
                h = act(h) if act is not None else torch.tanh(h) if tanh else h
            if dropout_at == "pooled":
                h = self.dropout(h)
            return torch.tanh(self.classifier(h)) if squash else self.classifier(h)

    Variant.__name__ = Variant.__qualname__ = "ClsHead"
    return Variant


NOT_TANH = ("Your pooler's activation is not tanh: BERT's pooler is tanh(W_p·h_[CLS] + b_p), "
            "whose entries stay in (−1, 1) (ReLU and GELU are the feed-forward layers' "
            "activations, not the pooler's).")

HEAD_MUTANTS = [
    Mutant("mean over the positions", _head_variant(pool="mean"),
           "You pool by averaging the positions. BERT's head reads the [CLS] vector alone, "
           "hidden[:, 0] (position 0 of every sequence): its final state stands for the whole "
           "input."),
    Mutant("the last position", _head_variant(pool="last"),
           "You read the last position, as a left-to-right model would. BERT's [CLS] is the "
           "first token: hidden[:, 0]."),
    Mutant("no tanh", _head_variant(tanh=False),
           "Your pooler is linear: BERT's pooler ends in tanh, pooled = tanh(W_p·h_[CLS] + b_p)."),
    Mutant("pooler skipped", _head_variant(pooler=False),
           "Your classifier reads the [CLS] vector directly, and the pooler's weights get no "
           "gradient. The [CLS] vector goes through the pooler first: "
           "classifier(dropout(tanh(W_p·h_[CLS] + b_p)))."),
    Mutant("dropout before the pooler", _head_variant(dropout_at="hidden"),
           "Your dropout acts on the [CLS] vector before the pooler. As in "
           "BertForSequenceClassification, it acts on the pooled vector, between the pooler and "
           "the classifier: classifier(dropout(tanh(W_p·h_[CLS] + b_p)))."),
    Mutant("ReLU pooler", _head_variant(act=torch.relu), NOT_TANH.replace("is not tanh",
                                                                           "is ReLU, not tanh")),
    Mutant("GELU pooler", _head_variant(act=F.gelu), NOT_TANH.replace("is not tanh",
                                                                      "is GELU, not tanh")),
    Mutant("pooler weight not transposed", _head_variant(untransposed=True),
           "You multiply by the pooler's weight as it is stored, not transposed, h @ "
           "pooler.weight: nn.Linear stores W as (out, in) and computes h @ W.T + b. Call "
           "self.pooler(h) (or F.linear)."),
    Mutant("tanh on the logits", _head_variant(squash=True),
           "Your logits pass through tanh, so they stay in (−1, 1): tanh belongs to the pooler "
           "alone, and the classifier's output is the logits as they are."),
    Mutant("no dropout", _head_variant(dropout_at="nowhere"),
           "Your head has no dropout (or ignores the `dropout` argument): apply "
           "nn.Dropout(dropout) to the pooled vector, before the classifier. It only acts in "
           "training mode, where fine-tuning uses it."),
]

SUITES = [
    Suite(
        exercise="07.5",
        name="mask_tokens",
        points=3,
        reference=hf_mask_tokens,
        solution=bert_inputs.mask_tokens,
        call=run_mask_tokens,
        arg_names=("ids", "special", "mask_id", "vocab_size", "p"),
        cases=CASES,
        mutants=MUTANTS,
        judge=judge,
        observe=capitalised(observe),
        readings=MASK_READINGS,
        hint="Pick each non-special position with probability p (labels: the original id "
             "there, -100 elsewhere); of the picked ones, 80 % become [MASK], 10 % a random id "
             "in [0, vocab_size), 10 % stay unchanged.",
    ),
    Suite(
        exercise="07.6",
        name="mlm_loss",
        points=2,
        reference=hf_mlm_loss,
        solution=bert.mlm_loss,
        cases=MLM_CASES,
        mutants=MLM_MUTANTS,
        arg_names=("logits", "labels"),
        grad=("logits",),
        observe=_first(shape_observe("the loss is one number (a 0-dimensional tensor), the mean "
                                     "over every picked position of the batch"),
                       capitalised(masked_lm_observation)),
        readings=MASKED_LM_READINGS,
        hint="Flatten the logits to (B·N, |V|) and the labels to (B·N,), and take the mean of "
             "−log softmax(logits)[label] over the picked positions (label ≠ −100) of the whole "
             "batch: F.cross_entropy(..., ignore_index=-100) does exactly this.",
    ),
    Suite(
        exercise="07.7",
        name="ClsHead",
        points=3,
        reference=HFClsHead,
        solution=ClsHead,
        call=run_classifier_head,
        arg_names=("d_model", "n_classes", "dropout", *HEAD_NAMES, "hidden"),
        cases=HEAD_CASES,
        mutants=HEAD_MUTANTS,
        observe=shape_observe("one row of n_classes logits per sequence of the batch, read "
                              "from its [CLS] position (B, n_classes)"),
        hint="Take the [CLS] vector, hidden[:, 0]; pool it, tanh(W_p·h + b_p) with self.pooler "
             "(nn.Linear(d_model, d_model)); apply dropout; then self.classifier "
             "(nn.Linear(d_model, n_classes)).",
    ),
]
