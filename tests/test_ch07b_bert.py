"""Chapter 7, BERT: coursekit.models.bert against Hugging Face, the MLM inputs, the grader.

Fidelity: ``transformers.BertForPreTraining``, ``BertModel`` and ``BertForMaskedLM`` built from
a small random config (nothing downloaded), holding coursekit's weights redrawn with a large
spread (std 0.5, LayerNorm gains 1 ± 0.5), so that a wrong activation (tanh-GELU), a wrong ε, a
missing embedding LayerNorm or segment-0 vector, or an untied decoder moves the logits far past
the tolerance. Padding enters through both sides' key masks.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import nbformat
import pytest
import torch
import transformers

from coursekit.data import bert_inputs
from coursekit.data.bert_inputs import (
    CLS_ID,
    IGNORE,
    MASK_ID,
    SEP_ID,
    VOCAB,
    VOCAB_SIZE,
    acceptability,
    corrupt,
    encode,
    mask_tokens,
)
from coursekit.data.language import SyntheticLanguage
from coursekit.models.bert import Bert, BertClassifier, BertConfig, from_hf, hf_config, to_hf

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
TOL = dict(atol=1e-4, rtol=1e-4)
CONFIG = BertConfig(vocab_size=50, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_len=16)


def spread_(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Redraw every parameter: LayerNorm gains 1 + 0.5·N(0, 1), everything else 0.5·N(0, 1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            gain = "norm" in name and name.endswith("weight")
            p.copy_((1.0 if gain else 0.0) + 0.5 * torch.randn(p.shape, generator=g))
    return model.eval()


@pytest.fixture(scope="module")
def pair():
    """A coursekit Bert with spread weights and the BertForPreTraining holding the same."""
    ours = spread_(Bert(CONFIG))
    theirs = transformers.BertForPreTraining(hf_config(CONFIG)).eval()
    theirs.load_state_dict(to_hf(ours), strict=True)
    return ours, theirs


def batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, CONFIG.vocab_size, (3, 11), generator=g)
    ids[1, 7:] = 0  # right padding
    ids[2, 4:] = 0
    segments = torch.zeros_like(ids)
    segments[:, 5:] = 1
    return ids, segments, ids != 0


def test_pretraining_logits_match_hugging_face(pair):
    ours, theirs = pair
    ids, segments, key_mask = batch()
    with torch.no_grad():
        mlm, nsp = ours(ids, segments, key_mask)
        out = theirs(input_ids=ids, token_type_ids=segments, attention_mask=key_mask.long())
    assert mlm.abs().max() > 1.0  # the spread makes the logits large: errors cannot hide
    real = key_mask  # HF computes padded rows too, but only real rows mean anything
    torch.testing.assert_close(mlm[real], out.prediction_logits[real], **TOL,
                               msg="MLM logits differ: check the exact (erf) GELU, ε = 1e-12, "
                                   "the Post-LN order and the head tied to the word table")
    torch.testing.assert_close(nsp, out.seq_relationship_logits, **TOL,
                               msg="NSP logits differ: the pooler is tanh(W [CLS] + b)")


def test_segment_zero_is_added_when_segments_are_omitted(pair):
    ours, theirs = pair
    ids = batch(1)[0][:1, :6].clamp_min(1)
    with torch.no_grad():
        mlm, _ = ours(ids)
        expected = theirs(input_ids=ids).prediction_logits
    torch.testing.assert_close(mlm, expected, **TOL,
                               msg="without segment ids, BERT still adds the segment-0 vector")


def test_bert_model_and_masked_lm_match(pair):
    ours, _ = pair
    state = to_hf(ours)
    base = transformers.BertModel(hf_config(CONFIG)).eval()
    base.load_state_dict({k.removeprefix("bert."): v for k, v in state.items()
                          if k.startswith("bert.")}, strict=True)
    mlm = transformers.BertForMaskedLM(hf_config(CONFIG)).eval()
    missing, unexpected = mlm.load_state_dict(
        {k: v for k, v in state.items() if not k.startswith(("bert.pooler", "cls.seq"))},
        strict=False)
    assert not missing and not unexpected
    ids, segments, key_mask = batch(2)
    with torch.no_grad():
        hidden, _ = ours.encode(ids, segments, key_mask)
        out = base(input_ids=ids, token_type_ids=segments, attention_mask=key_mask.long())
        logits = mlm(input_ids=ids, token_type_ids=segments,
                     attention_mask=key_mask.long()).logits
    torch.testing.assert_close(hidden[key_mask], out.last_hidden_state[key_mask], **TOL,
                               msg="BertModel's last hidden state differs from Bert.encode")
    torch.testing.assert_close(ours.pooled(hidden), out.pooler_output, **TOL)
    torch.testing.assert_close(ours.mlm_logits(hidden)[key_mask], logits[key_mask], **TOL)


def test_weights_port_back_from_hugging_face(pair):
    ours, theirs = pair
    back = from_hf(theirs.state_dict(), CONFIG).eval()
    ids, segments, key_mask = batch(3)
    with torch.no_grad():
        for a, b in zip(back(ids, segments, key_mask), ours(ids, segments, key_mask),
                        strict=True):
            torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_attention_ignores_padding(pair):
    ours, _ = pair
    ids, segments, key_mask = batch(4)
    longer = torch.cat([ids, torch.zeros(3, 4, dtype=torch.long)], dim=1)
    with torch.no_grad():
        a, _ = ours.encode(ids, segments)
        b, _ = ours.encode(longer, torch.cat([segments, torch.ones(3, 4, dtype=torch.long)], 1))
    torch.testing.assert_close(a[key_mask], b[:, :11][key_mask], atol=1e-5, rtol=1e-5)


def test_classifier_and_weights_per_layer():
    model = BertClassifier(Bert(CONFIG)).eval()
    ids = batch(5)[0]
    assert model(ids).shape == (3, 2)
    _, weights = model.bert.encode(ids, need_weights=True)
    assert len(weights) == CONFIG.n_layers and weights[0].shape == (3, 4, 11, 11)
    torch.testing.assert_close(weights[0].sum(-1), torch.ones(3, 4, 11))
    assert (weights[0][1, :, :, 7:] == 0).all()  # padding gets no attention


# ----------------------------------------------------------------------------- inputs


def test_encode_lays_out_cls_sep_and_segments():
    ids, segments, special = encode([["the", "dog"]], pairs=[["its", "tail", "."]])
    assert ids[0].tolist() == [CLS_ID, *VOCAB.encode(["the", "dog"]), SEP_ID,
                               *VOCAB.encode(["its", "tail", "."]), SEP_ID]
    assert segments[0].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert special[0].tolist() == [True, False, False, True, False, False, False, True]
    ids, _, special = encode([["the"], ["the", "dog", "."]])
    assert ids[0].tolist() == [CLS_ID, VOCAB.stoi["the"], SEP_ID, 0, 0]
    assert special[0, 3:].all()


def test_mask_tokens_follows_the_80_10_10_rule():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(bert_inputs.N_SPECIAL, VOCAB_SIZE, (2000, 40), generator=g)
    special = torch.rand(ids.shape, generator=g) < 0.3
    before = ids.clone()
    inputs, labels = mask_tokens(ids, special, MASK_ID, VOCAB_SIZE, g)
    assert torch.equal(ids, before), "mask_tokens must not modify ids"
    picked = labels != IGNORE
    assert not picked[special].any()
    assert torch.equal(labels[picked], ids[picked])
    assert torch.equal(inputs[~picked], ids[~picked])
    assert abs(picked[~special].float().mean().item() - 0.15) < 0.01
    masked = (inputs[picked] == MASK_ID).float().mean().item()
    kept = (inputs[picked] == ids[picked]).float().mean().item()
    assert abs(masked - 0.8) < 0.015 and abs(kept - 0.1) < 0.015
    again = mask_tokens(ids, special, MASK_ID, VOCAB_SIZE, torch.Generator().manual_seed(1))
    same = mask_tokens(ids, special, MASK_ID, VOCAB_SIZE, torch.Generator().manual_seed(1))
    assert all(torch.equal(a, b) for a, b in zip(again, same, strict=True))


def test_corruptions_flip_one_word_and_break_the_grammar():
    lang = SyntheticLanguage()
    for s in lang.sample(200, seed=0):
        for kind in bert_inputs.CORRUPTIONS:
            bad = corrupt(s, kind)
            assert sum(a != b for a, b in zip(bad, s.tokens, strict=True)) == 1
    data = acceptability(lang.sample(2000, seed=1), seed=1)
    assert 0.45 < data.labels.float().mean().item() < 0.55
    ids, segments, labels = data.tensors()
    assert ids.shape[0] == labels.shape[0] == 2000 and (ids[:, 0] == CLS_ID).all()
    assert (segments == 0).all()


# ----------------------------------------------------------------------------- grading


BUGGY = '''def mask_tokens(ids, special, mask_id, vocab_size, generator=None, p=0.15):
    picked = (torch.rand(ids.shape, generator=generator) < p) & ~special
    return torch.where(picked, mask_id, ids), torch.where(picked, ids, -100)
'''


def test_the_batch_grader_grades_07b_on_its_own_exercise(tmp_path):
    from coursekit.grading.batch import Limits, grade
    from coursekit.grading.registry import all_suites

    subs = tmp_path / "subs"
    subs.mkdir()
    shutil.copy(ROOT / "solutions" / "07f_bert.ipynb", subs / "right_07f_bert.ipynb")
    shutil.copy(ROOT / "notebooks" / "07f_bert.ipynb", subs / "todo_07f_bert.ipynb")
    nb = nbformat.read(ROOT / "notebooks" / "07f_bert.ipynb", as_version=4)
    for cell in nb.cells:
        if "exercise" in cell.metadata.get("tags", []):
            cell.source = BUGGY
    nbformat.write(nb, subs / "buggy_07f_bert.ipynb")
    batch = grade([subs], tmp_path / "out", jobs=1, stream=None,
                  limits=Limits(timeout=60, case_timeout=20, memory_mib=1536))
    records = {r["extra_data"]["coursekit"]["submission"]: r for r in batch.records}
    suite = all_suites()["mask_tokens"]
    own = sum(s.points for s in all_suites().values() if s.key == "07f")
    for name, score in (("right_07f_bert", own), ("todo_07f_bert", 0), ("buggy_07f_bert", 0)):
        record = records[name]
        assert record["max_score"] == own, "07f is graded on its own exercises only"
        assert record["score"] == pytest.approx(score), (name, record["tests"])
        assert not record["extra_data"]["coursekit"]["harness_errors"]
    outputs = " ".join(t["output"] for t in records["buggy_07f_bert"]["tests"])
    assert suite.mutants[0].hint in outputs, "the batch grader names the bug as check() does"


def _draws(*, one_id=False, below=None, global_rng=False, own_seed=False):
    """Right rates, wrong draws: what 8 rate statistics alone would pass."""

    def mask_tokens(ids, special, mask_id, vocab_size, generator=None, p=0.15):
        if global_rng:
            generator = None
        if own_seed:  # reproducible, but deaf to the generator it is given
            generator = torch.Generator().manual_seed(0)
        picked = (torch.rand(ids.shape, generator=generator) < p) & ~special
        draw = torch.rand(ids.shape, generator=generator)
        shape = (1,) if one_id else ids.shape
        random_ids = torch.randint(below or vocab_size, shape, generator=generator).expand(ids.shape)
        inputs = torch.where(picked & (draw < 0.8), mask_id, ids)
        inputs = torch.where(picked & (draw >= 0.8) & (draw < 0.9), random_ids, inputs)
        return inputs, torch.where(picked, ids, -100)

    return mask_tokens


@pytest.mark.parametrize("wrong, observed", [
    (_draws(one_id=True), "not spread uniformly over all `vocab_size` ids"),
    (_draws(below=MASK_ID), "not spread uniformly over all `vocab_size` ids"),
    (_draws(below=VOCAB_SIZE // 2), "not spread uniformly over all `vocab_size` ids"),
    (_draws(global_rng=True), "returned different results"),
    (_draws(own_seed=True), "seeded differently, your function returned exactly the same"),
])
def test_what_a_random_exercise_draws_is_graded_not_only_how_often(wrong, observed):
    """Class 5 of the bug classes: one replacement id for the batch, ids from a narrower range,
    the generator ignored or replaced by a seed of its own. Each passes the eight rates; each
    fails on what it draws, and the hint says what was observed, not a guessed cause."""
    from coursekit.grading.registry import get_suite
    from coursekit.grading.suite import run_suite

    result = run_suite(get_suite("07.5"), wrong)
    assert result.status == "failed" and observed in result.hint, result.hint
    rates_only = [c.outputs[0][:8] for c in result.cases]
    references = [get_suite("07.5").run(get_suite("07.5").reference, get_suite("07.5").inputs(i))[:8]
                  for i in range(len(result.cases))]
    assert all(torch.allclose(a, b, atol=0.02) for a, b in zip(rates_only, references, strict=True)), \
        "the eight rates alone would have passed it"


def test_the_draw_checks_have_no_false_alarms_on_right_implementations():
    from coursekit.grading.registry import get_suite
    from coursekit.grading.suite import run_suite

    suite = get_suite("07.5")
    for right in (suite.reference, suite.solution, _draws()):
        assert run_suite(suite, right).status == "passed"


def test_check_leaves_the_global_random_stream_alone():
    """The suite forks the global RNG, so a chapter's later results do not depend on check()."""
    from coursekit.grading.registry import get_suite
    from coursekit.grading.suite import run_suite

    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    assert run_suite(get_suite("07.5"), mask_tokens).status == "passed"
    torch.testing.assert_close(torch.rand(3), expected)


def test_bert_parameter_formula_counts_hugging_faces_bert_model():
    from transformers import BertConfig as HFBertConfig
    from transformers import BertModel

    from coursekit.models.bert import BERT_PUBLISHED, bert_parameters

    config = HFBertConfig(vocab_size=97, hidden_size=48, num_hidden_layers=3, num_attention_heads=4,
                          intermediate_size=80, max_position_embeddings=40, type_vocab_size=2)
    hf = sum(p.numel() for p in BertModel(config).parameters())
    assert bert_parameters(3, 48, 80, 97, 40) == hf, "the formula misses a bias or a LayerNorm"
    L, d, d_ff, _ = BERT_PUBLISHED["BERT-base"]
    assert bert_parameters(L, d, d_ff, 30522, 512) == 109_482_240  # bert-base-uncased's count



def test_shipped_long_budget_bert_loads_and_reaches_what_the_notebook_asserts():
    from coursekit.data.bert_pretrained import (
        CHECKPOINT,
        language,
        load_checkpoint,
        masked_word_accuracy,
        nsp_accuracy,
    )

    assert CHECKPOINT.stat().st_size < 1_000_000, "the shipped checkpoint must stay small"
    model, curve = load_checkpoint()
    _, test = language()
    accuracy = {**masked_word_accuracy(model, test), "NSP": nsp_accuracy(model, test)}
    assert accuracy["pronoun"] > 0.9, accuracy  # left to right can reach 0.6
    assert accuracy["state 1"] > 0.25 + 3 * (0.25 / len(test)) ** 0.5, accuracy  # left to right: 1/4
    assert accuracy["NSP"] > 0.85, accuracy  # the one-hop cue is about 0.75
    last_step, stored = curve[-1]
    assert last_step == 4000 and stored == pytest.approx(accuracy, abs=1e-6), "the curve is this model's"
    at = dict(curve)
    assert at[1500]["pronoun"] < 0.7 < 0.9 < at[last_step]["pronoun"], "learned after step 1,500"


def test_the_long_budget_recipe_runs_and_records_its_curve():
    from coursekit.data.bert_pretrained import pretrain

    model, curve = pretrain(steps=4, batch_size=8, every=2)
    assert [step for step, _ in curve] == [2, 4]
    assert set(curve[0][1]) == {*bert_inputs.WORD_TYPES, "NSP"} and not model.training
