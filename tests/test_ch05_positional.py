"""Chapter 5: coursekit.positional against its authorities, built locally from small configs.

- T5's buckets and bias: Hugging Face ``T5Attention`` (``_relative_position_bucket``, ``compute_bias``);
- RoPE, half-split: Hugging Face Llama (``LlamaRotaryEmbedding`` + ``apply_rotary_pos_emb``, and a
  whole ``LlamaAttention`` layer against ``MultiHeadAttention`` with the RoPE hook);
- RoPE, interleaved: Hugging Face GPT-J (``create_sinusoidal_positions`` + ``apply_rotary_pos_emb``);
- sinusoidal: the paper's formula in float64, and GPT-J's table (the same frequencies, sin|cos);
- ALiBi: Hugging Face BLOOM's ``build_alibi_tensor`` (slopes, and the same softmax).

Nothing is downloaded (HF_HUB_OFFLINE=1); ported weights are drawn with std 0.5.
"""

import math
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from transformers import LlamaConfig, T5Config  # noqa: E402
from transformers.models.bloom.modeling_bloom import build_alibi_tensor  # noqa: E402
from transformers.models.gptj import modeling_gptj  # noqa: E402
from transformers.models.llama import modeling_llama  # noqa: E402
from transformers.models.t5.modeling_t5 import T5Attention  # noqa: E402

from coursekit.attention import MultiHeadAttention, causal_mask, scaled_dot_product_attention  # noqa: E402
from coursekit.hf_compat import t5_compute_bias  # noqa: E402
from coursekit.models.tiny_transformer import TinyTransformer  # noqa: E402
from coursekit.positional import (  # noqa: E402
    KINDS,
    RoPE,
    T5RelativeBias,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    positional_encoding,
    relative_position_bucket,
    rope_frequencies,
    sinusoidal_encoding,
)

TOL = dict(atol=1e-5, rtol=1e-5)
BUCKET_SETTINGS = [(32, 128), (16, 64), (8, 16), (64, 256), (10, 50), (32, 40)]


def interleave_permutation(d: int) -> torch.Tensor:
    """Feature order that turns a half-split layout (a_0..a_{d/2-1}, b_0..) into (a_0, b_0, a_1, b_1, ...)."""
    return torch.stack([torch.arange(d // 2), torch.arange(d // 2) + d // 2], dim=-1).flatten()


# ----------------------------------------------------------------------------- sinusoidal


def test_sinusoidal_matches_the_paper_formula_in_float64():
    n, d = 200, 48
    expected = torch.empty(n, d, dtype=torch.float64)
    for pos in range(n):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            expected[pos, 2 * i], expected[pos, 2 * i + 1] = math.sin(angle), math.cos(angle)
    pe = sinusoidal_encoding(n, d)
    assert pe.dtype == torch.float32 and pe.shape == (n, d)
    torch.testing.assert_close(pe.double(), expected, atol=5e-5, rtol=0)


@pytest.mark.parametrize("d", [8, 32, 64])
def test_sinusoidal_matches_gptj_table_after_interleaving(d):
    theirs = modeling_gptj.create_sinusoidal_positions(300, d)  # (N, d): sin | cos
    torch.testing.assert_close(sinusoidal_encoding(300, d), theirs[:, interleave_permutation(d)], **TOL)


@pytest.mark.parametrize("k", [1, 5, 37])
def test_sinusoidal_shift_is_a_fixed_rotation_per_frequency(k):
    """PE(pos + k) = M_k PE(pos) with M_k block-diagonal, a 2×2 rotation by kω_i per pair."""
    d = 32
    pe = sinusoidal_encoding(200, d).double()
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    M = torch.zeros(d, d, dtype=torch.float64)
    for i, w in enumerate(omega.tolist()):
        c, s = math.cos(k * w), math.sin(k * w)
        M[2 * i:2 * i + 2, 2 * i:2 * i + 2] = torch.tensor([[c, s], [-s, c]])
    torch.testing.assert_close(pe[k:], pe[:-k] @ M.T, atol=1e-4, rtol=0)  # every pos, one M_k
    torch.testing.assert_close(M @ M.T, torch.eye(d, dtype=torch.float64))  # a rotation
    assert (pe[k:] - pe[:-k]).abs().max() > 0.1  # and not the identity


@pytest.mark.parametrize("d", [64, 128])
def test_sinusoidal_dot_product_depends_on_distance_and_falls_with_it(d):
    pe = sinusoidal_encoding(640, d)
    dots = pe[:512] @ pe[:512].T
    k = 9
    torch.testing.assert_close(dots.diagonal(k), torch.full((512 - k,), dots[0, k].item()), atol=2e-3, rtol=0)
    row = pe[:512] @ pe[0]
    assert row.argmax() == 0 and row[0] == pytest.approx(d / 2)
    assert bool((row[1:5] < row[:4]).all())  # the first steps each lower it
    octave_means = [row[lo:hi].mean().item() for lo, hi in [(0, 8), (8, 32), (32, 128), (128, 512)]]
    assert octave_means == sorted(octave_means, reverse=True), octave_means


# ----------------------------------------------------------------------------- T5 buckets


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets,max_distance", BUCKET_SETTINGS)
def test_t5_buckets_match_hugging_face_on_every_offset(num_buckets, max_distance, bidirectional):
    offsets = torch.arange(-300, 301)
    expected = T5Attention._relative_position_bucket(offsets, bidirectional=bidirectional,
                                                     num_buckets=num_buckets, max_distance=max_distance)
    got = relative_position_bucket(offsets, bidirectional, num_buckets, max_distance)
    assert got.dtype == expected.dtype
    assert torch.equal(got, expected)
    assert 0 <= got.min() and got.max() < num_buckets
    if not bidirectional:  # the future shares the bucket of offset 0
        assert bool((got[offsets > 0] == 0).all())


@pytest.mark.parametrize("is_decoder", [False, True])
@pytest.mark.parametrize("n_q,n_k", [(7, 7), (1, 9), (3, 40)])
def test_t5_relative_bias_matches_compute_bias(is_decoder, n_q, n_k):
    config = T5Config(d_model=16, d_kv=4, num_heads=4, relative_attention_num_buckets=16,
                      relative_attention_max_distance=24, is_decoder=is_decoder)
    torch.manual_seed(0)
    theirs = T5Attention(config, has_relative_attention_bias=True, layer_idx=0).eval()
    ours = T5RelativeBias(4, bidirectional=not is_decoder, num_buckets=16, max_distance=24)
    with torch.no_grad():
        theirs.relative_attention_bias.weight.normal_(0.0, 0.5)
        ours.relative_attention_bias.weight.copy_(theirs.relative_attention_bias.weight)
        expected = t5_compute_bias(theirs, n_q, n_k, offset=n_k - n_q)  # (1, H, N_q, N_k)
        got = ours.score_bias(n_q, n_k)
    assert got.shape == (4, n_q, n_k)
    torch.testing.assert_close(got, expected[0], rtol=0, atol=0)


# ----------------------------------------------------------------------------- RoPE


def llama_rotary(head_dim: int, base: float):
    config = LlamaConfig(hidden_size=4 * head_dim, num_attention_heads=4, num_key_value_heads=4,
                         head_dim=head_dim, max_position_embeddings=4096,
                         rope_theta=base)  # Transformers 5 moves it into rope_parameters
    return config, modeling_llama.LlamaRotaryEmbedding(config)


@pytest.mark.parametrize("head_dim,base", [(8, 10000.0), (16, 500.0), (64, 10000.0)])
def test_rope_half_split_matches_llama(head_dim, base):
    _, rotary = llama_rotary(head_dim, base)
    torch.manual_seed(0)
    q, k = torch.randn(2, 4, 11, head_dim), torch.randn(2, 4, 11, head_dim)
    positions = torch.tensor([0, 1, 2, 3, 7, 31, 100, 257, 1000, 2047, 4095])
    cos, sin = rotary(q, positions[None].expand(2, -1))
    expected_q, expected_k = modeling_llama.apply_rotary_pos_emb(q, k, cos, sin)
    torch.testing.assert_close(apply_rope(q, positions, base), expected_q, **TOL)
    torch.testing.assert_close(apply_rope(k, positions, base), expected_k, **TOL)
    torch.testing.assert_close(rope_frequencies(head_dim, base), rotary.inv_freq, rtol=0, atol=0)


@pytest.mark.parametrize("head_dim", [8, 32])
def test_rope_interleaved_matches_gptj(head_dim):
    torch.manual_seed(0)
    x = torch.randn(2, 13, 3, head_dim)  # GPT-J's layout: (B, N, H, d_head)
    positions = torch.arange(13) * 37
    sincos = modeling_gptj.create_sinusoidal_positions(int(positions.max()) + 1, head_dim)[positions]
    sin, cos = sincos[None].expand(2, -1, -1).chunk(2, dim=-1)
    expected = modeling_gptj.apply_rotary_pos_emb(x, sin, cos)
    got = apply_rope(x.transpose(1, 2), positions, interleaved=True).transpose(1, 2)
    torch.testing.assert_close(got, expected, **TOL)


def test_rope_conventions_agree_after_the_matching_permutation():
    d = 16
    perm = interleave_permutation(d)  # half-split feature order -> interleaved order
    torch.manual_seed(0)
    x = torch.randn(3, 20, d)
    positions = torch.arange(20) * 5
    half = apply_rope(x, positions)
    interleaved = apply_rope(x[..., perm], positions, interleaved=True)
    torch.testing.assert_close(interleaved, half[..., perm], **TOL)
    assert (interleaved - half).abs().max() > 0.1  # without the permutation they differ


def test_rope_scores_depend_only_on_the_offset():
    torch.manual_seed(0)
    q, k = torch.randn(32), torch.randn(32)

    def score(m, n):
        qm = apply_rope(q[None], torch.tensor([m]))[0]
        kn = apply_rope(k[None], torch.tensor([n]))[0]
        return (qm @ kn).item()

    for m, n in [(3, 0), (10, 10), (0, 9), (50, 20)]:
        for shift in (1, 17, 400):
            assert score(m + shift, n + shift) == pytest.approx(score(m, n), abs=1e-3)
    assert abs(score(3, 0) - score(0, 3)) > 1e-2  # the sign of the offset matters
    # a rotation keeps norms
    x = torch.randn(5, 32)
    torch.testing.assert_close(apply_rope(x, torch.arange(5) * 11).norm(dim=-1), x.norm(dim=-1), **TOL)


def test_rope_module_reuses_its_angles_only_where_they_are_the_same():
    """RoPE.rotate keeps the last cos/sin it computed (every layer of a forward pass reuses them):
    a call at another start, length, width, dtype or inference mode must not get stale angles."""
    rope, torch_gen = RoPE(), torch.Generator().manual_seed(0)
    calls = [(0, 7, 16, torch.float32), (0, 7, 16, torch.float32), (3, 7, 16, torch.float32),
             (3, 1, 16, torch.float32), (3, 1, 8, torch.float32), (3, 1, 8, torch.float64)]
    for start, n, d, dtype in calls:
        q = torch.randn(2, 4, n, d, generator=torch_gen, dtype=dtype)
        k = torch.randn(2, 2, n, d, generator=torch_gen, dtype=dtype)
        positions = torch.arange(start, start + n)
        got_q, got_k = rope.rotate(q, k, start)
        assert got_q.dtype == dtype
        torch.testing.assert_close(got_q, apply_rope(q, positions), rtol=0, atol=0)
        torch.testing.assert_close(got_k, apply_rope(k, positions), rtol=0, atol=0)
    with torch.inference_mode():  # angles made here cannot be saved for a later backward
        rope.rotate(q, k, 5)
    q.requires_grad_(True)
    rope.rotate(q, k, 5)[0].sum().backward()
    assert q.grad is not None


def test_multi_head_attention_with_rope_matches_llama_attention():
    head_dim, n_heads = 8, 4
    config, rotary = llama_rotary(head_dim, 10000.0)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    theirs = modeling_llama.LlamaAttention(config, layer_idx=0).eval()
    ours = MultiHeadAttention(n_heads * head_dim, n_heads, bias=False).eval()
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_(0.0, 0.5)
        ours.in_proj.weight.copy_(torch.cat([theirs.q_proj.weight, theirs.k_proj.weight,
                                             theirs.v_proj.weight]))
        ours.out_proj.weight.copy_(theirs.o_proj.weight)
    x = torch.randn(2, 9, n_heads * head_dim)
    positions = torch.arange(9)
    blocked = torch.zeros(9, 9).masked_fill(~causal_mask(9), float("-inf"))
    with torch.no_grad():
        expected, _ = theirs(x, position_embeddings=rotary(x, positions[None].expand(2, -1)),
                             attention_mask=blocked[None, None])
        for need_weights in (False, True):
            got, _ = ours(x, is_causal=True, need_weights=need_weights,
                          qk_transform=RoPE().rotate)
            torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


# ----------------------------------------------------------------------------- ALiBi


@pytest.mark.parametrize("n_heads", [1, 2, 3, 4, 5, 6, 8, 12, 16, 24])
def test_alibi_slopes_match_bloom(n_heads):
    N = 6
    alibi = build_alibi_tensor(torch.ones(1, N), n_heads, torch.float32)  # (H, 1, N): m_h · j
    torch.testing.assert_close(alibi_slopes(n_heads), alibi[:, 0, 1], rtol=1e-6, atol=0)
    # BLOOM adds m_h · j; we add −m_h (i − j): per query row they differ by a constant, so a
    # causal softmax is the same
    scores = torch.randn(n_heads, N, N)
    ours = torch.softmax((scores + alibi_bias(alibi_slopes(n_heads), N, N))
                         .masked_fill(~causal_mask(N), float("-inf")), dim=-1)
    bloom = torch.softmax((scores + alibi).masked_fill(~causal_mask(N), float("-inf")), dim=-1)
    torch.testing.assert_close(ours, bloom, **TOL)


def test_alibi_slopes_follow_the_paper():
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0 ** -(h + 1) for h in range(8)]))
    torch.testing.assert_close(alibi_slopes(2), torch.tensor([2.0 ** -4, 2.0 ** -8]))
    bias = alibi_bias(alibi_slopes(2), 3, 5)  # queries are the last 3 of 5 positions
    torch.testing.assert_close(bias[0, 0], torch.tensor([2.0, 1.0, 0.0, 1.0, 2.0]) / -16)


# ----------------------------------------------------------------------------- the attention hooks


@pytest.mark.parametrize("need_weights", [False, True])
def test_score_bias_is_a_float_mask_of_torch_sdpa(need_weights):
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 6, 16)
    bias = torch.randn(4, 6, 6) * 0.5
    key_mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    with torch.no_grad():
        got, _ = mha(x, key_mask=key_mask, is_causal=True, need_weights=need_weights, attn_bias=bias)
        q, k, v = (t.view(2, 6, 4, 4).transpose(1, 2) for t in mha.in_proj(x).chunk(3, -1))
        allowed = causal_mask(6) & key_mask[:, None, None, :]
        float_mask = torch.where(allowed, bias, float("-inf"))
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=float_mask)
        expected = mha.out_proj(ref.transpose(1, 2).reshape(2, 6, 16))
    torch.testing.assert_close(got, expected, **TOL)


def test_a_fully_masked_row_gets_zero_weights_with_a_bias():
    q, k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    mask = torch.tensor([[True, True, False], [False, False, False], [True, False, True]])
    out, weights = scaled_dot_product_attention(q, k, v, mask, bias=torch.randn(2, 3, 3))
    assert torch.isfinite(out).all() and weights[:, :, 1].abs().max() == 0
    assert weights.masked_select(~mask).abs().max() == 0


# ----------------------------------------------------------------------------- the model


def make_model(kind: str, causal: bool = True, max_len: int = 16, seed: int = 0) -> TinyTransformer:
    torch.manual_seed(seed)
    model = TinyTransformer(13, d_model=16, n_heads=4, n_layers=2, max_len=max_len, causal=causal,
                            positional=kind).eval()
    if kind == "t5":
        with torch.no_grad():
            model.pos.relative_attention_bias.weight.normal_(0.0, 0.5)
    return model


def test_without_positions_a_bidirectional_stack_is_permutation_equivariant():
    ids = torch.tensor([[3, 4, 5, 6, 7, 8, 9]])  # "the dog bit the man" with every word distinct
    perm = torch.tensor([4, 2, 0, 6, 1, 5, 3])
    nope = make_model("none", causal=False)
    with torch.no_grad():
        torch.testing.assert_close(nope(ids[:, perm])[0], nope(ids)[0][:, perm], **TOL)
        for kind in KINDS[1:]:
            model = make_model(kind, causal=False)
            moved = (model(ids[:, perm])[0] - model(ids)[0][:, perm]).abs().max()
            assert moved > 1e-2, f"{kind} should see the order"


@pytest.mark.parametrize("kind", KINDS)
def test_generation_with_a_kv_cache_matches_the_full_forward(kind):
    model = make_model(kind)
    ids = torch.randint(1, 13, (2, 10))
    from coursekit.attention import KVCache

    with torch.no_grad():
        full, _ = model(ids)
        caches = [KVCache() for _ in model.blocks]
        steps = [model(ids[:, :4], caches=caches)[0]]
        steps += [model(ids[:, t:t + 1], caches=caches)[0] for t in range(4, 10)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, **TOL)


@pytest.mark.parametrize("kind", KINDS)
def test_only_the_learned_table_stops_at_max_len(kind):
    model = make_model(kind, max_len=8)
    ids = torch.randint(1, 13, (1, 12))
    if kind == "learned":
        with pytest.raises(ValueError, match="max_len"):
            model(ids)
    else:
        assert torch.isfinite(model(ids)[0]).all()


def test_positional_encoding_by_name():
    for kind in KINDS:
        assert positional_encoding(kind, d_model=8, n_heads=2, max_len=4).kind == kind
    assert positional_encoding("t5", 8, 2, 4, causal=True).bidirectional is False
    with pytest.raises(ValueError, match="unknown positional"):
        positional_encoding("absolute", 8, 2, 4)


# ----------------------------------------------------------------------------- the suites' references


def test_suite_references_equal_hugging_face_on_every_case():
    """ch05's references are transcriptions (no transformers import in a check): here each is
    compared with the original on every case of its suite, and with coursekit's solution."""
    from coursekit.grading.registry import get_suite

    authorities = {
        "sinusoidal_encoding": lambda n, d: modeling_gptj.create_sinusoidal_positions(n, d)[
            :, interleave_permutation(d)],
        "relative_position_bucket": lambda r, bi, nb, md: T5Attention._relative_position_bucket(
            r, bidirectional=bi, num_buckets=nb, max_distance=md),
    }

    def llama(x, positions, base=10000.0):
        _, rotary = llama_rotary(x.shape[-1], base)
        cos, sin = rotary(x, positions[None])
        return modeling_llama.apply_rotary_pos_emb(x, x, cos, sin)[0]  # x: (B, H, N, d)

    authorities["apply_rope"] = llama
    for name, authority in authorities.items():
        suite = get_suite(name)
        for i in range(len(suite.cases)):
            args = suite.inputs(i)
            expected = authority(*args)
            torch.testing.assert_close(suite.reference(*args), expected, rtol=0, atol=1e-6)
            torch.testing.assert_close(suite.solution(*args), expected, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- the chapter's symbols

_ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
_MATH = __import__("re").compile(r"\$\$(.+?)\$\$|\$(.+?)\$", __import__("re").S)


def chapter_formulas(stem):
    """Every formula in the markdown of solutions/<stem>.ipynb (inline code left out)."""
    import re

    import nbformat

    nb = nbformat.read(_ROOT / "solutions" / f"{stem}.ipynb", as_version=4)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            text = re.sub(r"```.*?```|`[^`\n]*`", "", cell.source, flags=re.S)
            for match in _MATH.finditer(text):
                yield index, match.group(1) or match.group(2)


# Chapter 5's own symbols, beyond book/notation.md's table (tests/test_notation.py): i and j are
# query and key positions, m and n positions whose offset matters, so the sinusoid/rotation pair
# index is f, a shift is Δ, ALiBi's slope s_h, T5's bucket count n_b, the copy length N_copy.
CHAPTER_5_SPELLINGS = [
    (r"\\(?:theta|omega)_i\b|\b2i\b|x_\{i ?\+ ?d/2\}", "the feature-pair index is f, not i"),
    (r"\bm_[h1]\b", "ALiBi's slope is s_h (m is a position)"),
    (r"M_k\b|pos ?\+ ?k\b|\bk ?\\omega", "a shift by some positions is Δ (k is a key)"),
    (r"\\frac\{n\}\{2\}|\bn/2\b", "T5's buckets per direction are n_b"),
    (r"(?<![A-Za-z\\])n_\\text\{train\}", "the copy lengths are N_copy, N_train"),
    (r"(?<![\\\w{])[qkxp]_(?:[ijmn]|\{pos\})(?![\w}])", "vectors are bold"),
]


@pytest.mark.parametrize("pattern, why", CHAPTER_5_SPELLINGS, ids=lambda v: str(v)[:20])
def test_chapter_5_keeps_its_symbols(pattern, why):
    import re

    found = [f"cell {i}: ${f.strip()[:60]}$" for i, f in chapter_formulas("05_positional_encoding")
             if re.search(pattern, f)]
    assert not found, f"{why}:\n" + "\n".join(found)


def test_chapter_5_spelling_rules_catch_what_they_name():
    import re

    caught = [r"\theta_i", r"PE(pos, 2i)", r"m_h", r"M_k", r"\frac{n}{2}", r"2n_\text{train}",
              r"q_i^\top k_j", r"x_{pos} + p_{pos}"]
    fine = [r"\theta_f", r"PE(pos, 2f)", r"s_h", r"\boldsymbol{M}_\Delta", r"\frac{n_\text{b}}{2}",
            r"2N_\text{train}", r"\boldsymbol{q}_i \cdot \boldsymbol{k}_j", r"a_{ij}", r"x_{2f}", r"e_{ij}",
            r"\boldsymbol{x}_{pos} + \boldsymbol{p}_{pos}"]
    for formula in caught:
        assert any(re.search(p, formula) for p, _ in CHAPTER_5_SPELLINGS), formula
    for formula in fine:
        assert not any(re.search(p, formula) for p, _ in CHAPTER_5_SPELLINGS), formula
