"""Concept checks (coursekit.concepts): every key recomputed from the libraries, the answers read
without running anything, the same verdicts in Python and in the page's JavaScript, and every
chapter asking its questions in both editions."""

from __future__ import annotations

import math
import os
import shutil

import nbformat
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from coursekit import concepts
from coursekit.concepts import QUESTIONS, check_concepts, read_answers

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _lstm_output_shape():
    out, _ = nn.LSTM(5, 7, batch_first=True)(torch.randn(3, 11, 5))
    return tuple(out.shape)


def _bidirectional_width():
    out, _ = nn.GRU(4, 16, bidirectional=True, batch_first=True)(torch.randn(2, 3, 4))
    return out.shape[-1]


def _additive_weights_shape():
    from coursekit.attention import AdditiveAttention
    # B = 4 sequences, 9 inputs of width 8, 6 decoder steps: the weights of every step, stacked.
    attention, h = AdditiveAttention(5, 8, 3), torch.randn(4, 9, 8)
    weights = torch.stack([attention(torch.randn(4, 5), h)[1] for _step in range(6)], dim=1)
    assert torch.allclose(weights.sum(-1), torch.ones(4, 6)), "each step's weights sum to 1"
    return tuple(weights.shape)


def _score_std():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(200_000, 64, generator=g), torch.randn(200_000, 64, generator=g)
    std = (q * k).sum(-1).std().item()
    assert abs(std - 8) < 0.1, std
    return 8


def _visible_keys_first_query():
    from coursekit.attention import causal_mask
    book = int(causal_mask(2, 5)[0].sum())
    # torch's is_causal=True aligns to the top-left: the first query sees key 0 only.
    q, k, v = torch.randn(1, 2, 4), torch.randn(1, 5, 4), torch.eye(5).unsqueeze(0)
    top_left = int((F.scaled_dot_product_attention(q, k, v, is_causal=True)[0, 0] > 0).sum())
    assert top_left == 1, "03.C3's wrong-answer text says torch's is_causal gives 1"
    return book


def _mha_weights_shape():
    mha = nn.MultiheadAttention(32, 4, batch_first=True)
    x = torch.randn(2, 7, 32)
    _, w = mha(x, x, x, need_weights=True, average_attn_weights=False)
    _, averaged = mha(x, x, x, need_weights=True)
    assert tuple(averaged.shape) == (2, 7, 7)
    return tuple(w.shape)


def _heads_free():
    one, eight = n_params(nn.MultiheadAttention(64, 1)), n_params(nn.MultiheadAttention(64, 8))
    return "c" if one == eight else "a"


def _rope_rotates():
    from coursekit.positional import apply_rope
    # Rotating queries and keys makes the score depend on the offset only.
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 8, generator=g), torch.randn(1, 8, generator=g)
    s1 = (apply_rope(q, torch.tensor([3])) * apply_rope(k, torch.tensor([1]))).sum()
    s2 = (apply_rope(q, torch.tensor([13])) * apply_rope(k, torch.tensor([11]))).sum()
    assert torch.allclose(s1, s2, atol=1e-5)
    return "a"


def _t5_relative_parameters():
    from transformers import T5Config, T5EncoderModel
    config = T5Config(vocab_size=32, d_model=16, d_kv=4, d_ff=32, num_layers=6, num_heads=8,
                      relative_attention_num_buckets=32)
    model = T5EncoderModel(config)
    return sum(p.numel() for name, p in model.named_parameters() if "relative_attention_bias" in name)


def _dropout_scale():
    drop = nn.Dropout(0.1).train()
    y = drop(torch.ones(10_000))
    kept = y[y != 0]
    return kept[0].item()


def _next_token_targets():
    from coursekit.models.gpt import GPT  # noqa: F401  (the chapter's model; the loss shifts by one)
    logits, tokens = torch.randn(2, 10, 50), torch.randint(50, (2, 10))
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, 50), tokens[:, 1:].reshape(-1),
                           reduction="none")
    return loss.numel()


def _mask_fraction():
    from coursekit.data.bert_inputs import mask_tokens
    ids = torch.full((400, 500), 7)
    inputs, labels = mask_tokens(ids, torch.zeros_like(ids, dtype=torch.bool), mask_id=3,
                                 vocab_size=50, generator=torch.Generator().manual_seed(0))
    picked = labels != -100
    assert abs(picked.float().mean().item() - 0.15) < 0.005
    fraction = (inputs[picked] == 3).float().mean().item()
    assert abs(fraction - 0.8) < 0.01, fraction
    return 0.8


def _perplexity():
    # a model that spreads its probability evenly over 4 tokens, one of them right: loss ln 4
    loss = F.cross_entropy(torch.zeros(1, 4), torch.tensor([0]))
    assert abs(loss.item() - 1.386) < 1e-3
    return math.exp(loss.item())


def _nucleus_size():
    from transformers import TopPLogitsWarper
    logits = torch.tensor([[0.4, 0.3, 0.2, 0.1]]).log()
    kept = TopPLogitsWarper(0.75)(None, logits)
    return int(torch.isfinite(kept).sum())


def _kv_cache_saving():
    from torch.utils.flop_counter import FlopCounterMode

    from coursekit.decoding import greedy
    from coursekit.models.gpt import GPT

    model, n = GPT(11, d_model=8, n_heads=2, n_layers=1, max_len=300).eval(), 255

    def flops(use_cache):
        with FlopCounterMode(display=False) as counter:
            greedy(model, torch.zeros(1, 1, dtype=torch.long), n, use_cache=use_cache)
        return counter.get_total_flops()

    return flops(False) / flops(True)


def _dpo_first_loss():
    from coursekit.preference import dpo_loss
    lp = torch.tensor([-3.0, -7.0])
    return dpo_loss(lp, lp, lp, lp, beta=0.1).item()


def _six_nd():
    # the backward pass of a linear layer costs twice its forward: 2N + 4N per token
    from torch.utils.flop_counter import FlopCounterMode
    layer, x = nn.Linear(32, 16, bias=False), torch.randn(5, 32, requires_grad=True)
    with FlopCounterMode(display=False) as forward:
        y = layer(x)
    with FlopCounterMode(display=False) as backward:
        y.sum().backward()
    n_params = layer.weight.numel()
    assert forward.get_total_flops() == 2 * n_params * 5 and backward.get_total_flops() == 4 * n_params * 5
    return 6 * 1e9 * 2e10


def _shown_share():
    from coursekit.data.incontext import InContextTask
    task = InContextTask()
    _, _, answer_pos = task.prompts(4, 4000, torch.Generator().manual_seed(0))
    share = (answer_pos >= 0).float().mean().item()
    assert abs(share - 4 / task.domain) < 0.03, share   # sampled prompts agree with k / domain
    return 4 / task.domain


def _t5_query_init():
    from transformers import T5Config, T5Model
    config = T5Config(vocab_size=8, d_model=768, d_kv=64, num_heads=12, d_ff=8, num_layers=1,
                      num_decoder_layers=1)
    q = T5Model(config).encoder.block[0].layer[0].SelfAttention.q.weight
    std = (768 * 64) ** -0.5
    assert abs(q.std().item() / std - 1) < 0.02, q.std().item()   # Hugging Face's _init_weights
    return std


def _span_corrupted_length():
    from coursekit.data.instructions import random_spans_noise_mask, span_corruption
    mask = random_spans_noise_mask(14, generator=torch.Generator().manual_seed(0))
    inputs, _ = span_corruption(torch.arange(14), mask, torch.tensor([100, 101, 102]))
    return len(inputs)


def _gpt2_small():
    from transformers import GPT2Config, GPT2LMHeadModel
    with torch.device("meta"):
        model = GPT2LMHeadModel(GPT2Config())  # n_layer 12, n_embd 768, vocab 50257, 1024 positions
    return n_params(model)  # parameters() lists the tied matrix once


def _llama_7b_hidden_width():
    from transformers import LlamaConfig

    from coursekit.models.llama import llama_hidden_width
    config = LlamaConfig()  # the 7B shape
    assert config.hidden_size == 4096
    assert llama_hidden_width(config.hidden_size) == config.intermediate_size
    return config.intermediate_size


def _gqa_cache_numbers():
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaAttention
    with torch.device("meta"):
        attention = LlamaAttention(LlamaConfig(hidden_size=4096, num_attention_heads=32,
                                               num_key_value_heads=8), layer_idx=0)
    assert attention.head_dim == 128
    return attention.k_proj.out_features + attention.v_proj.out_features  # one key, one value


def _rms_norm_constant():
    return F.rms_norm(torch.full((4,), 3.0), (4,), torch.ones(4), eps=0.0)[0].item()


def _vit_tokens():
    from transformers import ViTConfig, ViTModel
    config = ViTConfig(image_size=224, patch_size=16, hidden_size=8, num_hidden_layers=1,
                       num_attention_heads=2, intermediate_size=8)
    out = ViTModel(config)(torch.zeros(1, 3, 224, 224))
    return out.last_hidden_state.shape[1]


def _clip_negatives():
    from coursekit.models.clip import clip_loss
    # One image's loss term reaches every text; its own caption pulls, the other 31 push.
    images = torch.randn(32, 6)
    texts = torch.randn(32, 6, requires_grad=True)
    logits = images @ texts.T
    row = F.cross_entropy(logits[:1], torch.tensor([0]))
    (grad,) = torch.autograd.grad(row, texts)
    pushed = [j for j in range(32) if (grad[j] @ images[0]) > 0]  # gradient raises the loss
    assert pushed == list(range(1, 32))
    assert torch.isfinite(clip_loss(images, texts, torch.tensor(0.0)))
    return len(pushed)


def _clip_initial_scale():
    from coursekit.models.clip import CLIP
    model = CLIP(vocab_size=10, eot_id=9)
    return model.logit_scale.exp().item()


def _lora_parameters():
    from peft import LoraConfig, get_peft_model
    model = nn.Sequential()
    model.add_module("proj", nn.Linear(768, 768))
    peft_model = get_peft_model(model, LoraConfig(r=8, target_modules=["proj"]))
    return sum(p.numel() for p in peft_model.parameters() if p.requires_grad)


def _nf4_bits():
    from coursekit import quant
    w = torch.randn(64 * 100)
    indices, absmax = quant.quantize_blockwise(w, quant.nf4_code_book(), blocksize=64)
    packed = quant.pack_4bit(indices)
    bits = packed.numel() * 8 + absmax.numel() * absmax.element_size() * 8
    assert quant.bits_per_parameter(64) == bits / w.numel()
    return bits / w.numel()


def _lora_scale_ratio():
    from peft import LoraConfig, get_peft_model

    def scaling(r):
        model = nn.Sequential()
        model.add_module("proj", nn.Linear(64, 64))
        peft_model = get_peft_model(model, LoraConfig(r=r, lora_alpha=16, target_modules=["proj"]))
        return peft_model.base_model.model.proj.scaling["default"]

    return scaling(32) / scaling(8)


def _merged_same_cost():
    from torch.utils.flop_counter import FlopCounterMode

    from coursekit.lora import LoRALinear, merge_lora

    def flops(module, x):
        with FlopCounterMode(display=False) as counter:
            module(x)
        return counter.get_total_flops()

    x, plain = torch.randn(5, 16), nn.Linear(16, 16)
    model = nn.Sequential(LoRALinear(16, 16, r=4, alpha=8))
    unmerged = flops(model, x)
    merge_lora(model)
    assert flops(model, x) == flops(plain, x) < unmerged
    return "a"


KEYS = {
    "01.C1": _lstm_output_shape,
    "01.C2": lambda: n_params(nn.LSTM(5, 7)),
    "01.C3": lambda: "b",  # clip_grad_norm_ only rescales by min(1, max_norm / norm): checked below
    "02.C1": _bidirectional_width,
    "02.C2": _additive_weights_shape,
    "02.C3": lambda: "a",  # Bahdanau et al. (2015), Eq. 6: e_ij = a(s_{i-1}, h_j)
    "03.C1": lambda: tuple(F.scaled_dot_product_attention(
        torch.randn(2, 5, 8), torch.randn(2, 9, 8), torch.randn(2, 9, 3)).shape),
    "03.C2": _score_std,
    "03.C3": _visible_keys_first_query,
    "04.C1": _mha_weights_shape,
    "04.C2": lambda: n_params(nn.MultiheadAttention(32, 4)),
    "04.C3": _heads_free,
    "05.C1": lambda: 0,  # sinusoidal_encoding is a function of the position: checked below
    "05.C2": _rope_rotates,
    "05.C3": _t5_relative_parameters,
    "06.C1": lambda: n_params(nn.TransformerEncoderLayer(64, 4, 256)),
    "06.C2": lambda: "a",
    "06.C3": _dropout_scale,
    "07.C1": _next_token_targets,
    "07.C2": _perplexity,
    "07.C3": _nucleus_size,
    "07.C4": _kv_cache_saving,
    "07.C5": _dpo_first_loss,
    "07.C6": _shown_share,
    "07.C7": _gpt2_small,
    "07.C8": _six_nd,
    "07.C9": _mask_fraction,
    "07.C10": _t5_query_init,
    "07.C11": _span_corrupted_length,
    "07.C12": _llama_7b_hidden_width,
    "07.C13": _gqa_cache_numbers,
    "07.C14": _rms_norm_constant,
    "08.C1": _vit_tokens,
    "08.C2": _clip_negatives,
    "08.C3": _clip_initial_scale,
    "09.C1": _lora_parameters,
    "09.C2": _merged_same_cost,
    "09.C3": _nf4_bits,
    "09.C4": _lora_scale_ratio,
}


def test_every_question_has_a_recomputed_key():
    assert set(KEYS) == set(QUESTIONS)


@pytest.mark.parametrize("qid", sorted(QUESTIONS))
def test_the_key_is_what_the_libraries_compute(qid):
    q = QUESTIONS[qid]
    computed = KEYS[qid]()
    assert q.is_right(computed), f"{qid}: the bank says {q.answer!r}, the libraries give {computed!r}"
    for wrong in q.wrong:
        assert not q.is_right(wrong), f"{qid}: the foreseen wrong answer {wrong!r} is accepted"
        assert q.verdict(wrong)[1].startswith("not quite:"), f"{qid}: {wrong!r} gets no explanation"


def test_facts_the_explanations_state():
    # 01.C3: clipping never enlarges a gradient.
    p = nn.Parameter(torch.zeros(3))
    p.grad = torch.full((3,), 1e-8)
    nn.utils.clip_grad_norm_(p, max_norm=1.0)
    assert torch.equal(p.grad, torch.full((3,), 1e-8))
    # 05.C1: the sinusoids have no parameters.
    from coursekit.positional import LearnedPE, SinusoidalPE
    assert n_params(SinusoidalPE(512)) == 0
    assert n_params(LearnedPE(1024, 512)) == 524288, "05.C1's wrong answer names this table"
    # 06.C2: Pre-LN's identity path: a block whose sublayers output zero returns its input.
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, norm_first=True)
    for lin in (layer.self_attn.out_proj, layer.linear2):
        nn.init.zeros_(lin.weight), nn.init.zeros_(lin.bias)
    x = torch.randn(3, 8)
    assert torch.allclose(layer(x), x)
    post = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, norm_first=False)
    for lin in (post.self_attn.out_proj, post.linear2):
        nn.init.zeros_(lin.weight), nn.init.zeros_(lin.bias)
    assert not torch.allclose(post(x), x)
    # 07.C7: the untied count the wrong answer names.
    assert _gpt2_small() + 768 * 50257 == 163037184
    # 09.C1: the frozen matrix.
    assert 768 * 768 == 589824


# ---- reading answers ------------------------------------------------------------------------

def test_answers_are_read_as_values_never_run():
    source = 'answers = {"09.C1": 2 * 8 * 768, "04.C1": (2, 4, 7, 7), "01.C3": "b", "03.C2": None}\n'
    assert read_answers(source + "check_concepts(answers)\n") == {
        "09.C1": 12288, "04.C1": (2, 4, 7, 7), "01.C3": "b", "03.C2": None}
    for hostile in ['answers = {"01.C2": __import__("os").system("echo hi")}',
                    'answers = {"01.C2": open("/etc/passwd").read()}',
                    'answers = {"01.C2": x}', 'answers = {"01.C2": (lambda: 1)()}',
                    'answers = {"01.C2": 9 ** 9 ** 9 ** 9}'.replace("9 ** 9 ** 9 ** 9", "[].append")]:
        with pytest.raises(ValueError, match="plain values"):
            read_answers(hostile)
    with pytest.raises(ValueError, match="no `answers"):
        read_answers("x = 1")
    with pytest.raises(ValueError, match="not valid Python"):
        read_answers("answers = {")


def test_verdicts_name_what_a_foreseen_wrong_answer_is():
    checks = check_concepts({"04.C1": (2, 7, 7), "04.C2": "4,224", "04.C3": None, "01.C1": "3x11x7"})
    verdicts = {q.id: (right, message) for q, _g, right, message in checks.rows}
    assert verdicts["04.C1"][0] is False and "heads averaged" in verdicts["04.C1"][1]
    assert verdicts["04.C2"][0] is True
    assert verdicts["04.C3"] == (None, "not answered yet")
    assert verdicts["01.C1"][0] is True
    assert "2 of 4 right (3 answered)" in repr(checks)
    assert check_concepts({"01.C3": "z"}).rows[0][3].startswith("'z' is not one of a, b, c")
    with pytest.raises(KeyError, match="no concept check '99.C1'"):
        check_concepts({"99.C1": 1})
    with pytest.raises(TypeError, match="dictionary"):
        check_concepts([1, 2])


# ---- every chapter asks its questions ---------------------------------------------------------

def _concept_cells(path):
    nb = nbformat.read(path, as_version=4)
    return [c for c in nb.cells if concepts.CONCEPTS_TAG in c.get("metadata", {}).get("tags", [])]


@pytest.mark.parametrize("chapter", [f"{n:02d}" for n in range(1, 10)])
def test_every_chapter_asks_its_concept_checks_in_both_editions(chapter):
    """The chapter's questions, in order, over its notebooks (at most one cell each); the
    answers start empty in both editions."""
    wanted = [q.id for q in concepts.chapter_questions(chapter)]
    assert len(wanted) >= 3
    for edition in ("solutions", "notebooks"):
        asked = []
        for path in sorted((ROOT / edition).glob(f"{chapter}*.ipynb")):
            cells = _concept_cells(path)
            assert len(cells) <= 1, f"{path.name}: more than one cell tagged 'concepts'"
            here = list(read_answers(cells[0].source)) if cells else []
            if cells:
                answers = read_answers(cells[0].source)
                assert all(v is None for v in answers.values()), f"{path.name}: answers not empty"
                asked += list(answers)
            # what the grader asks of this notebook with --concept-points
            assert concepts.asked_in(path.name.split("_")[0]) == here, path.name
        assert asked == wanted, f"{edition}: chapter {chapter} asks {asked}, the bank has {wanted}"


# ---- the page's JavaScript agrees with Python ---------------------------------------------------

def _chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(_chromium() is None and os.environ.get("COURSEKIT_REQUIRE_BROWSER") != "1",
                    reason="Chromium is not installed (sudo apt-get install chromium)")
def test_the_static_form_gives_the_same_verdicts_as_python():
    from playwright.sync_api import sync_playwright

    html = check_concepts({qid: None for qid in QUESTIONS})._repr_html_()
    tries = []  # (question, typed, expected state, expected message start)
    for q in QUESTIONS.values():
        right = q.answer if q.kind != "shape" else "x".join(map(str, q.answer))
        tries.append((q, right, "right", "\u2713 Right. " + q.why))
        for wrong, meaning in q.wrong.items():
            tries.append((q, wrong, "wrong", "\u2717 Not quite: " + meaning))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), headless=True,
                                    args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.set_content(f"<html><body>{html}</body></html>")
        for q, typed, state, message in tries:
            box = page.locator(f'.ck-concept[data-id="{q.id}"]')
            if q.kind == "choice":
                box.locator(f'input[value="{q.key(typed)}"]').check()
            else:
                box.locator("input[type=text]").fill(str(typed))
            box.locator("button").click()
            assert box.get_attribute("data-state") == state, (q.id, typed)
            assert box.locator(".ck-concept-feedback").text_content() == message, (q.id, typed)
        empty = page.locator('.ck-concept[data-id="01.C2"]')
        empty.locator("input[type=text]").fill("")
        empty.locator("button").click()
        assert empty.get_attribute("data-state") == "empty"
        browser.close()
    assert not errors, errors
    assert math.isclose(QUESTIONS["06.C3"].answer, 1 / 0.9)


# ---- the batch grader records them -------------------------------------------------------------

def test_the_batch_grader_records_concept_checks_ungraded(tmp_path):
    from coursekit.grading.batch import grade
    from coursekit.grading.worker_pool import Limits

    subs = tmp_path / "subs"
    subs.mkdir()
    student = nbformat.read(ROOT / "notebooks" / "04_multi_head_attention.ipynb", as_version=4)
    [cell] = _concept_cells(ROOT / "notebooks" / "04_multi_head_attention.ipynb")
    index = next(i for i, c in enumerate(student.cells) if c.source == cell.source)
    for name, first in [("alice", "(2, 7, 7)"), ("bob", "(2, 4, 7, 7)"), ("carol", 'open("x")')]:
        student.cells[index].source = ('from coursekit.concepts import check_concepts\n'
                                       f'answers = {{"04.C1": {first}, "04.C2": 4 * 32 * 32 + 4 * 32, '
                                       '"04.C3": None}\ncheck_concepts(answers)\n')
        nbformat.write(student, subs / f"04_{name}.ipynb")
    batch = grade([subs], tmp_path / "out", jobs=1, stream=None, limits=Limits(timeout=60))
    by_id = {meta["submission"]: meta for meta in
             (r["extra_data"]["coursekit"] for r in batch.records)}
    alice = {c["id"]: c for c in by_id["04_alice"]["concepts"]}
    assert alice["04.C1"]["right"] is False and "heads averaged" in alice["04.C1"]["message"]
    assert alice["04.C2"]["right"] is True and alice["04.C3"]["right"] is None
    assert all(c["right"] for c in by_id["04_bob"]["concepts"] if c["id"] != "04.C3")
    assert by_id["04_carol"]["concepts"] == []
    assert any("concept checks not read" in n for n in by_id["04_carol"]["notes"])
    assert all(r["score"] == 0 for r in batch.records), "concept checks are ungraded"
    feedback = (tmp_path / "out" / "04_alice" / "feedback.md").read_text()
    assert "Concept checks (ungraded): 1 of 3 right, 2 answered" in feedback
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "| 04.C1 | 2 of 2 | 1 | `(2, 7, 7)` (1) |" in summary, summary  # carol: unread


def test_concept_points_grade_the_questions_each_notebook_asks(tmp_path):
    """--concept-points P: every question the notebook asks is worth P (all or nothing), a
    missing or unreadable answer earns 0, and the points reach every output."""
    import csv

    from coursekit.grading.batch import grade
    from coursekit.grading.worker_pool import Limits

    subs = tmp_path / "subs"
    subs.mkdir()
    path = ROOT / "notebooks" / "04_multi_head_attention.ipynb"
    student = nbformat.read(path, as_version=4)
    [cell] = _concept_cells(path)
    index = next(i for i, c in enumerate(student.cells) if c.source == cell.source)
    for name, first in [("alice", "(2, 7, 7)"), ("bob", "(2, 4, 7, 7)"), ("carol", 'open("x")')]:
        student.cells[index].source = ('from coursekit.concepts import check_concepts\n'
                                       f'answers = {{"04.C1": {first}, "04.C2": 4 * 32 * 32 + 4 * 32, '
                                       '"04.C3": None}\ncheck_concepts(answers)\n')
        nbformat.write(student, subs / f"04_{name}.ipynb")
    bert = nbformat.read(ROOT / "notebooks" / "07f_bert.ipynb", as_version=4)
    [cell] = [c for c in bert.cells if concepts.CONCEPTS_TAG in c.metadata.get("tags", [])]
    cell.source = cell.source.replace('"07.C9": None', f'"07.C9": {QUESTIONS["07.C9"].answer!r}')
    nbformat.write(bert, subs / "07f_dave.ipynb")
    assert concepts.asked_in("07f") == ["07.C9"] and concepts.asked_in("07c") == ["07.C5"]
    assert concepts.asked_in("04") == ["04.C1", "04.C2", "04.C3"]

    batch = grade([subs], tmp_path / "out", jobs=1, stream=None, limits=Limits(timeout=60),
                  concept_points=2)
    records = {r["extra_data"]["coursekit"]["submission"]: r for r in batch.records}
    exercises = {k: sum(e["max_score"] for e in r["extra_data"]["coursekit"]["exercises"].values())
                 for k, r in records.items()}
    # the student edition's exercises earn 0: the scores are the concept checks alone
    for who, right, asked in [("04_alice", 1, 3), ("04_bob", 2, 3), ("04_carol", 0, 3),
                              ("07f_dave", 1, 1)]:
        r = records[who]
        assert (r["score"], r["max_score"]) == (2 * right, exercises[who] + 2 * asked), who
        concept_tests = [t for t in r["tests"] if t["name"].startswith("concept check")]
        assert len(concept_tests) == asked and sum(t["score"] for t in concept_tests) == 2 * right
        assert sum(t["score"] for t in r["tests"]) == r["score"]
    carol = records["04_carol"]["extra_data"]["coursekit"]["concepts"]
    assert [c["id"] for c in carol] == ["04.C1", "04.C2", "04.C3"]
    assert all(c["earned"] == 0 and c["message"].startswith("not answered") for c in carol)
    feedback = (tmp_path / "out" / "04_alice" / "feedback.md").read_text()
    assert "Concept checks (2 / 6 points): 1 of 3 right, 2 answered" in feedback
    rows = {row["submission"]: row for row in
            csv.DictReader((tmp_path / "out" / "grades.csv").open())}
    assert rows["04_bob"]["concept checks"] == "4.0" and rows["07f_dave"]["concept checks"] == "2.0"
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "## Concept checks (graded, 2 point(s) each)" in summary
    with pytest.raises(ValueError, match="concept-points"):
        grade([subs], tmp_path / "out2", jobs=1, stream=None, concept_points=-1)
