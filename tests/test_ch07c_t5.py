"""Chapter 7 (T5): coursekit's T5 against ``transformers.T5ForConditionalGeneration`` built from a
small random config (nothing downloaded), with ported weights drawn at std 0.5 so that a missing
or extra 1/√d_head, a LayerNorm where T5 has an RMSNorm, a missing rescaling of the tied head or a
relative bias in the wrong layers moves the logits far past the tolerance; the attention's new
``scale`` and cross-attention cache; span corruption and the instruction data."""

import os

import pytest
import torch
from torch import nn

from coursekit.attention import KVCache, MultiHeadAttention
from coursekit.data import instructions
from coursekit.data.language import SyntheticLanguage
from coursekit.models.t5 import T5, T5Config, from_hf_state_dict, hf_config, shift_right, to_hf_state_dict
from coursekit.transformer import RMSNorm

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import transformers  # noqa: E402  (after HF_HUB_OFFLINE; a broken install fails, never skips)


def wide(model: nn.Module, std: float = 0.5, seed: int = 0) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * std)
    return model.eval()


def pair(config: T5Config):
    ours = wide(T5(config))
    theirs = transformers.T5ForConditionalGeneration(transformers.T5Config(**hf_config(config)))
    theirs.load_state_dict(to_hf_state_dict(ours), strict=True)
    return ours, theirs.eval()


def batch(vocab_size: int, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, vocab_size, (3, 13), generator=g)
    src[1, 8:] = 0  # right padding
    src[2, 11:] = 0
    labels = torch.randint(3, vocab_size, (3, 9), generator=g)
    return src, shift_right(labels)


CONFIGS = {
    "book": T5Config(vocab_size=60, d_model=32, n_heads=4, n_layers=2, d_ff=64, num_buckets=8,
                     max_distance=16),
    "deeper decoder, default buckets": T5Config(vocab_size=50, d_model=24, n_heads=3, n_layers=1,
                                                n_decoder_layers=3, d_ff=40),
}


@pytest.mark.parametrize("name", CONFIGS)
def test_logits_equal_hugging_face(name):
    config = CONFIGS[name]
    ours, theirs = pair(config)
    src, dec = batch(config.vocab_size)
    with torch.no_grad():
        expected = theirs(input_ids=src, attention_mask=(src != 0).long(),
                          decoder_input_ids=dec).logits
        got = ours(src, dec)
    assert expected.std() > 0.1, "weights too small to tell a wrong scale apart"
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4, msg=lambda m: (
        "T5 logits differ from Hugging Face's. Likely: scores scaled by 1/√d_head (T5 uses "
        "scale=1), a LayerNorm instead of RMSNorm (no mean, no bias, ε 1e-6), the relative bias "
        "missing from a layer or given to cross-attention, or the tied head not scaled by "
        f"d_model^-1/2.\n{m}"))


def test_hugging_face_weights_load_back():
    config = CONFIGS["deeper decoder, default buckets"]
    ours, theirs = pair(config)
    back = T5(config).eval()
    back.load_state_dict(from_hf_state_dict(theirs.state_dict(), config))
    for (name, a), b in zip(ours.state_dict().items(), back.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_every_parameter_matters():
    """Each coursekit parameter lands in Hugging Face's model: changing it changes HF's logits."""
    config = CONFIGS["book"]
    ours, theirs = pair(config)
    src, dec = batch(config.vocab_size)
    with torch.no_grad():
        base = theirs(input_ids=src, attention_mask=(src != 0).long(), decoder_input_ids=dec).logits
        g = torch.Generator().manual_seed(2)
        for name, p in ours.named_parameters():
            change = 0.3 * torch.randn(p.shape, generator=g)  # random: a constant bias is no change
            p.add_(change)
            moved = transformers.T5ForConditionalGeneration(
                transformers.T5Config(**hf_config(config))).eval()
            moved.load_state_dict(to_hf_state_dict(ours))
            p.sub_(change)
            logits = moved(input_ids=src, attention_mask=(src != 0).long(),
                           decoder_input_ids=dec).logits
            assert (logits - base).abs().max() > 1e-3, f"{name} does not reach Hugging Face's model"


def test_greedy_generation_equals_hugging_face_generate():
    config = T5Config(vocab_size=40, d_model=32, n_heads=4, n_layers=2, d_ff=48, num_buckets=8,
                      max_distance=20)
    ours, theirs = pair(config)
    src, _ = batch(config.vocab_size)
    expected = theirs.generate(input_ids=src, attention_mask=(src != 0).long(),
                               max_new_tokens=12, do_sample=False, num_beams=1)
    cached = ours.generate(src, max_new_tokens=12)
    torch.testing.assert_close(cached, expected[:, 1:], msg=lambda m: (
        "cached greedy decoding differs from HF generate: check the relative bias of the new "
        f"query (positions N_past..N_past+N_new) and the cross-attention cache.\n{m}"))
    assert torch.equal(ours.generate(src, max_new_tokens=12, use_cache=False), cached)


def test_generation_stops_at_eos_and_pads_after_it():
    # with these weights id 16 is a likely token: as <eos>, rows end at different steps
    config = T5Config(vocab_size=30, d_model=16, n_heads=2, n_layers=1, d_ff=32, eos_id=16)
    model = wide(T5(config), std=0.3, seed=3)
    src = torch.randint(3, 30, (8, 5), generator=torch.Generator().manual_seed(0))
    out = model.generate(src, max_new_tokens=15)
    ended = 0
    for row in out:
        eos = (row == config.eos_id).nonzero()
        if len(eos):
            ended += 1
            assert (row[int(eos[0]) + 1:] == config.pad_id).all()
    assert 0 < ended and out.shape[1] < 15


def test_rms_norm_equals_t5_layer_norm_and_torch():
    x = torch.randn(2, 5, 16) * 3
    ours = wide(RMSNorm(16))
    hf = transformers.models.t5.modeling_t5.T5LayerNorm(16, eps=1e-6)
    torch_norm = nn.RMSNorm(16, eps=1e-6)
    hf.weight.data.copy_(ours.weight)
    torch_norm.weight.data.copy_(ours.weight)
    torch.testing.assert_close(ours(x), hf(x))
    torch.testing.assert_close(ours(x), torch_norm(x))


def test_attention_scale_default_unchanged_and_one_means_no_scaling():
    torch.manual_seed(0)
    x = torch.randn(2, 6, 16)
    default, explicit, unscaled = (MultiHeadAttention(16, 4, bias=False, scale=s)
                                  for s in (None, 0.5, 1.0))
    explicit.load_state_dict(default.state_dict())
    unscaled.load_state_dict(default.state_dict())
    for need_weights in (False, True):
        a = default(x, need_weights=need_weights)[0]
        torch.testing.assert_close(explicit(x, need_weights=need_weights)[0], a)  # 1/√4 = 0.5
        with torch.no_grad():  # scale 1 = the default with W^Q multiplied by √d_head
            folded = MultiHeadAttention(16, 4, bias=False)
            folded.load_state_dict(default.state_dict())
            folded.in_proj.weight[:16] *= 2.0
        torch.testing.assert_close(unscaled(x, need_weights=need_weights)[0],
                                   folded(x, need_weights=need_weights)[0])


def test_cross_attention_cache_projects_memory_once():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).eval()
    memory, y = torch.randn(2, 7, 16), torch.randn(2, 3, 16)
    cache = KVCache()
    first = mha(y[:, :1], memory, cache=cache)[0]
    assert len(cache) == 7
    second = mha(y[:, 1:], memory * 0 + 1e6, cache=cache)[0]  # memory ignored: cached K, V used
    torch.testing.assert_close(torch.cat([first, second], 1), mha(y, memory)[0])
    assert len(cache) == 7


SPAN_EXAMPLES = [  # (text, noise words, inputs, targets)
    # Raffel et al. (2020), Figure 2
    ("thank you for inviting me to your party last week .", ("for", "inviting", "last"),
     "thank you <extra_id_0> me to your party <extra_id_1> week .",
     "<extra_id_0> for inviting <extra_id_1> last <extra_id_2>"),
    # the T5 page of the Hugging Face documentation (its training example)
    ("the cute dog walks in the park", ("cute", "dog", "the@5"),
     "the <extra_id_0> walks in <extra_id_1> park",
     "<extra_id_0> cute dog <extra_id_1> the <extra_id_2>"),
]


@pytest.mark.parametrize("implementation", ["coursekit", "grading reference"])
@pytest.mark.parametrize("example", SPAN_EXAMPLES, ids=["paper", "hf docs"])
def test_span_corruption_published_examples(example, implementation):
    """The book's span corruption and the grader's reference (a transcription of Hugging Face's
    T5 pre-training example) both give the published input/target pairs."""
    from coursekit.grading.suites.ch07g import t5_span_corruption

    fn = {"coursekit": instructions.span_corruption,
          "grading reference": t5_span_corruption}[implementation]
    text, noise, want_inputs, want_targets = example
    words = text.split()
    vocab = instructions.instruction_vocab().__class__([*dict.fromkeys(words),
                                                        *instructions.SENTINELS])
    ids = torch.tensor(vocab.encode(words))
    mask = torch.tensor([w in noise or f"{w}@{i}" in noise for i, w in enumerate(words)])
    inputs, targets = fn(ids, mask, torch.tensor(vocab.encode(instructions.SENTINELS)))
    assert vocab.decode(inputs, " ") == want_inputs
    assert vocab.decode(targets, " ") == want_targets


@pytest.mark.parametrize("length", [2, 5, 12, 17, 60])
def test_noise_mask_density_and_spans(length):
    g = torch.Generator().manual_seed(length)
    for _ in range(50):
        mask = instructions.random_spans_noise_mask(length, 0.15, 3.0, generator=g)
        assert mask.shape == (length,) and mask.dtype == torch.bool
        assert not mask[0] and 1 <= int(mask.sum()) < length
        assert int(mask.sum()) == min(max(round(length * 0.15), 1), length - 1)


def test_instruction_examples_are_in_the_vocabulary_and_correct():
    vocab = instructions.instruction_vocab()
    sentences = SyntheticLanguage().sample(30, seed=0)
    tasks = {t: range(len(instructions.FRAMES)) for t in instructions.TASKS}
    examples = instructions.make_examples(300, tasks, sentences, seed=0)
    assert {e.task for e in examples} == set(instructions.TASKS)
    for e in examples:
        vocab.encode(e.prompt + e.answer)
        assert e.task in e.prompt and len(e.answer) == 1
    verbs = [e for e in examples if e.task == "verb"]
    assert {e.answer for e in verbs} == {("was",), ("were",)}
    x, y = instructions.encode_pairs(vocab, [e.prompt for e in examples[:5]],
                                     [e.answer for e in examples[:5]])
    assert (y[:, 1] == vocab.eos_id).all() and x.shape[0] == 5


def test_t5_parameter_formula_counts_hugging_faces_t5():
    from transformers import T5Config as HFT5Config
    from transformers import T5ForConditionalGeneration

    from coursekit.models.t5 import T5, T5_PUBLISHED, T5Config, t5_parameters

    config = HFT5Config(vocab_size=53, d_model=32, d_kv=16, d_ff=72, num_layers=2, num_heads=3,
                        relative_attention_num_buckets=8, feed_forward_proj="relu",
                        tie_word_embeddings=True)
    hf = sum(p.numel() for p in T5ForConditionalGeneration(config).parameters())
    assert t5_parameters(2, 32, 72, 3, 16, vocab_size=53, num_buckets=8) == hf, \
        "the formula misses a table, a norm or the decoder's cross-attention"
    ours = T5(T5Config(vocab_size=53, d_model=32, n_heads=4, n_layers=2, d_ff=72, num_buckets=8))
    assert sum(p.numel() for p in ours.parameters()) == t5_parameters(2, 32, 72, 4, 8, 53, 8)
    assert t5_parameters(*T5_PUBLISHED["T5-small"][:5]) == 60_506_624  # t5-small's count



def test_book_sentences_get_one_span_of_two_or_three_tokens():
    """07c says so: on the language's sentences of 10 to 17 tokens, 15 % noise is one span."""
    sentences = SyntheticLanguage().sample(2000, seed=0)
    assert {len(s.tokens) for s in sentences} <= set(range(10, 18))
    g = torch.Generator().manual_seed(0)
    for s in sentences:
        mask = instructions.random_spans_noise_mask(len(s.tokens), generator=g)
        assert int((mask[1:] & ~mask[:-1]).sum()) == 1                       # one span
        assert int(mask.sum()) == (3 if len(s.tokens) == 17 else 2)


def test_answer_agrees_with_task_item_and_refuses_what_does_not_apply():
    import random

    sentences = SyntheticLanguage().sample(50, seed=0)
    rng = random.Random(0)
    for task in instructions.TASKS:
        for _ in range(100):
            x, answer = instructions.task_item(task, rng, sentences)
            assert instructions.answer(task, x, sentences) == answer
    assert instructions.answer("plural", ("dogs",)) is None                   # no plural of a plural
    assert instructions.answer("singular", ("dog",)) is None
    assert instructions.answer("category", sentences[0].tokens) is None       # a word task on a sentence
    assert instructions.answer("verb", sentences[0].tokens) is None           # sentence not given
    assert instructions.answer("plural", ("bus",)) == ("buses",)
    with pytest.raises(ValueError):
        instructions.answer("colour", ("dog",))
