"""Concept checks: short questions whose answer is a number, a shape or a choice.

Each chapter ends its main part with one cell tagged ``concepts``::

    answers = {
        "04.C1": None,  # a shape, e.g. (2, 3)
        "04.C2": None,  # a number
    }
    check_concepts(answers)

Run with every answer ``None``, the cell shows the questions with a box (or buttons) each and a
*Check* button that answers at once, in JavaScript: it works in Jupyter and in the static book,
with no kernel. Run with answers filled in, it prints a verdict per question. The batch grader
reads the same dictionary from the cell's source (a literal, never executed) and records the
verdicts: ungraded by default, graded when the instructor gives concept checks points
(``coursekit grade --concept-points``).

Every answer in :data:`QUESTIONS` is recomputed from torch, Hugging Face or peft by
``tests/test_concepts.py``, so the key cannot drift from what the libraries do. A wrong answer
that a question foresees gets its own explanation (``wrong``); it must describe what that answer
*is* (e.g. "that is the shape with the heads averaged"), which is true of anyone who gives it.
"""

from __future__ import annotations

import ast
import html
import json
import math
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

KINDS = ("number", "shape", "choice")
CONCEPTS_TAG = "concepts"


@dataclass(frozen=True)
class Question:
    id: str                      # "04.C1": chapter, then C and a number
    kind: str                    # "number" | "shape" | "choice"
    text: str                    # the question (markdown-free HTML-safe text)
    answer: Any                  # number, tuple of ints, or the right option's letter
    why: str                     # shown once the answer is right
    options: tuple[str, ...] = ()  # for a choice: the options, lettered a, b, c, ...
    tol: float = 0.0             # for a number: absolute tolerance (0: exact up to 1e-9 relative)
    wrong: dict[str, str] = field(default_factory=dict)  # normalised wrong answer -> what it is

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"{self.id}: kind {self.kind!r} is not one of {KINDS}")
        if not re.fullmatch(r"\d\d\.C\d+", self.id):
            raise ValueError(f"{self.id!r}: a concept check's id is NN.C<k>, e.g. 04.C1")
        if self.kind == "choice" and self.key(self.answer) not in _letters(len(self.options)):
            raise ValueError(f"{self.id}: the answer {self.answer!r} is not one of the options")

    # -- answers, normalised the same way here and in the page's JavaScript -------------------
    def key(self, given: Any) -> str | None:
        """The normalised form of an answer ('12288', '2,4,7,7', 'b'), or None if unreadable."""
        if given is None:
            return None
        if self.kind == "number":
            try:
                value = float(str(given)[:MAX_TEXT].replace(",", "").replace("_", "").strip())
            except (ValueError, OverflowError):
                return None
            return repr(value) if math.isfinite(value) else None
        if self.kind == "shape":
            if isinstance(given, str):
                digits = re.findall(r"-?\d{1,18}", given[:MAX_TEXT])
            else:
                try:
                    digits = [str(int(d)) for d in given]
                except (TypeError, ValueError, OverflowError):
                    return None
            return ",".join(str(int(d)) for d in digits) if digits else None
        letter = str(given).strip().lower().rstrip(")").strip()
        return letter if letter in _letters(len(self.options)) else None

    def is_right(self, given: Any) -> bool:
        key = self.key(given)
        if key is None:
            return False
        if self.kind == "number":
            value, answer = float(key), float(self.answer)
            return abs(value - answer) <= max(self.tol, 1e-9 * abs(answer))
        return key == self.key(self.answer)

    def verdict(self, given: Any) -> tuple[bool | None, str]:
        """(right?, the message a student reads). ``None`` when the answer is missing."""
        if given is None:
            return None, "not answered yet"
        key = self.key(given)
        if key is None:
            expected = {"number": "a number", "shape": "a shape such as (2, 3)",
                        "choice": "one of " + ", ".join(_letters(len(self.options)))}[self.kind]
            return False, f"{given!r} is not {expected}"
        if self.is_right(given):
            return True, f"right. {self.why}"
        for wrong, meaning in self.wrong.items():
            if self.kind == "number" and _close(float(key), float(self.key(wrong) or "nan"), self.tol):
                return False, f"not quite: {meaning}"
            if self.kind != "number" and key == self.key(wrong):
                return False, f"not quite: {meaning}"
        return False, "not quite; try again."

    def client(self) -> dict[str, Any]:
        """What the page's JavaScript needs to answer at once."""
        wrong = {self.key(k): v for k, v in self.wrong.items()}
        return {"id": self.id, "kind": self.kind, "answer": self.key(self.answer),
                "tol": self.tol, "why": self.why, "wrong": wrong,
                "options": list(self.options)}


def _letters(n: int) -> list[str]:
    return [chr(ord("a") + i) for i in range(n)]


def _close(a: float, b: float, tol: float) -> bool:
    """A foreseen wrong number matches within 0.5 % (it is recognised, not graded)."""
    return math.isfinite(b) and abs(a - b) <= max(tol, 5e-3 * abs(b))


def _q(*args: Any, **kwargs: Any) -> Question:
    return Question(*args, **kwargs)


# The bank. Each chapter's cell asks its own questions, in order. Answers are recomputed by
# tests/test_concepts.py from the libraries; prose numbers in a `why` are checked there too.
QUESTIONS: dict[str, Question] = {q.id: q for q in [
    # Chapter 1: recurrent networks
    _q("01.C1", "shape", "An nn.LSTM(input_size=5, hidden_size=7, batch_first=True) reads x of "
       "shape (3, 11, 5). What is the shape of its first output (every step's hidden state)?",
       (3, 11, 7), "B = 3 sequences, N = 11 steps, d_h = 7 features each.",
       wrong={"(1, 3, 7)": "that is the shape of h_N, the second output's first tensor "
                           "(layers × batch × d_h).",
              "(3, 11, 5)": "that keeps the input's width D = 5; the states have d_h = 7."}),
    _q("01.C2", "number", "How many parameters does nn.LSTM(input_size=5, hidden_size=7) have "
       "(one layer, one direction, with biases)?", 392,
       "Four gates, each with W_ih (7 × 5), W_hh (7 × 7) and two biases of 7 (PyTorch keeps b_ih "
       "and b_hh): 4 · (35 + 49 + 7 + 7) = 392.",
       wrong={"364": "that counts one bias vector per gate; PyTorch keeps two, b_ih and b_hh.",
              "98": "that is one gate; an LSTM has four (input, forget, cell, output)."}),
    _q("01.C3", "choice", "Gradient clipping by norm (clip_grad_norm_) is a remedy for which "
       "problem?", "b",
       "Clipping rescales a gradient whose norm exceeds a threshold; it can only shrink a "
       "gradient, so it does nothing for one that has vanished.",
       options=("vanishing gradients", "exploding gradients", "both"),
       wrong={"c": "clipping only ever shrinks a gradient, so it cannot restore a vanished one."}),
    # Chapter 2: Bahdanau attention
    _q("02.C1", "number", "A bidirectional GRU encoder has hidden_size=16 in each direction. "
       "How wide is each annotation h_j that the attention reads?", 32,
       "The forward and backward states are concatenated: 2 × 16.",
       wrong={"16": "that is one direction; the annotation concatenates both."}),
    _q("02.C2", "shape", "Additive attention, batch B = 4, an output of 6 steps over an input of 9 "
       "steps: what is the shape of all the attention weights α, batch first?", (4, 6, 9),
       "One distribution over the 9 inputs for each of the 6 output steps of each sequence.",
       wrong={"(4, 9, 6)": "that puts the inputs before the output steps; each row α_i· is a "
                           "distribution over inputs j, so inputs are the last axis."}),
    _q("02.C3", "choice", "In Bahdanau et al. (2015), the score e_ij of input j when the decoder "
       "produces output i is computed from which decoder state?", "a",
       "e_ij = a(s_{i−1}, h_j): the state before emitting y_i, so the context can shape it.",
       options=("s_{i−1}, the state before step i", "s_i, the state after step i",
                "the encoder's last state h_N")),
    # Chapter 3: self-attention
    _q("03.C1", "shape", "F.scaled_dot_product_attention(q, k, v) with q of shape (2, 5, 8), k of "
       "shape (2, 9, 8) and v of shape (2, 9, 3): what is the output's shape?", (2, 5, 3),
       "One output per query (N_q = 5), each a mix of values of width d_v = 3.",
       wrong={"(2, 9, 3)": "that has one row per key; the output has one per query.",
              "(2, 5, 9)": "that is the shape of the attention weights, not of the output."}),
    _q("03.C2", "number", "Queries and keys have d_k = 64 entries, each of mean 0 and variance 1, "
       "independent. What is the standard deviation of a score q·k before scaling?", 8,
       "The variance of a sum of 64 independent unit-variance products is 64: standard "
       "deviation √64 = 8, which is what dividing by √d_k undoes.",
       wrong={"64": "that is the variance; the standard deviation is its square root."}),
    _q("03.C3", "number", "With this book's causal rule (query i may see key j when "
       "j ≤ i + N_k − N_q), N_q = 2 queries and N_k = 5 keys: how many keys may the first query "
       "(i = 0) attend to?", 4,
       "j ≤ 0 + 5 − 2 = 3: keys 0 to 3. The queries are the last two positions of the sequence "
       "(as when decoding with a cache). torch's is_causal=True aligns the mask to the top-left "
       "instead and would give 1.",
       wrong={"1": "that is the top-left alignment of torch's is_causal=True, which treats the "
                   "queries as the first positions; the book aligns them to the end."}),
    # Chapter 4: multi-head attention
    _q("04.C1", "shape", "nn.MultiheadAttention(embed_dim=32, num_heads=4, batch_first=True) on "
       "x of shape (2, 7, 32), with need_weights=True and average_attn_weights=False: what is the "
       "shape of the returned attention weights?", (2, 4, 7, 7),
       "(B, H, N_q, N_k): one N × N pattern per head per sequence.",
       wrong={"(2, 7, 7)": "that is the shape with the heads averaged, the default "
                           "(average_attn_weights=True)."}),
    _q("04.C2", "number", "How many parameters does nn.MultiheadAttention(embed_dim=32, "
       "num_heads=4) have (with its default biases)?", 4224,
       "W^Q, W^K, W^V and W^O are 32 × 32 each, plus four biases of 32: 4 · 1024 + 128 = 4224, "
       "whatever the number of heads.",
       wrong={"4096": "that leaves out the four bias vectors of 32."}),
    _q("04.C3", "choice", "Going from 1 head to 8 heads at the same d_model, what happens to the "
       "number of parameters of a multi-head attention layer?", "c",
       "The heads split the same projections into slices of d_model / H columns; the count "
       "stays 4 d_model² (plus biases).",
       options=("it grows 8-fold", "it grows by a factor √8", "it stays the same")),
    # Chapter 5: positional encoding
    _q("05.C1", "number", "How many trainable parameters do the sinusoidal positional encodings "
       "of Vaswani et al. add to a model with d_model = 512 and 1024 positions?", 0,
       "They are a fixed function of the position; a learned table would add 1024 × 512.",
       wrong={"524288": "that is a learned table of 1024 × 512; the sinusoids are computed, "
                        "not learned."}),
    _q("05.C2", "choice", "Rotary position embeddings (RoPE) rotate which vectors?", "a",
       "The queries and the keys, so that their dot product depends on the offset m − n only; "
       "the values and the residual stream carry no position.",
       options=("the queries and the keys", "the values", "the token embeddings, once, at the "
                "input")),
    _q("05.C3", "number", "A T5 encoder with 8 heads and 32 relative-position buckets shares one "
       "bias table across its 6 layers. How many relative-position parameters does the encoder "
       "have?", 256,
       "One scalar per bucket per head: 32 × 8, kept by the first layer and reused by the others.",
       wrong={"1536": "that is one table per layer; T5 computes the bias once and shares it."}),
    # Chapter 6: transformer blocks
    _q("06.C1", "number", "How many parameters does nn.TransformerEncoderLayer(d_model=64, "
       "nhead=4, dim_feedforward=256) have?", 49984,
       "Attention 4 · 64² + 4 · 64 = 16,640; feed-forward 64 · 256 + 256 + 256 · 64 + 64 = 33,088; "
       "two LayerNorms 2 · 2 · 64 = 256.",
       wrong={"49728": "that leaves out the two LayerNorms' weights and biases (256)."}),
    _q("06.C2", "choice", "In which arrangement does the input reach the block's output through "
       "an identity path, with no normalisation on the way?", "a",
       "Pre-LN: x + Sublayer(LN(x)); Post-LN normalises after every addition, so the residual "
       "stream itself is renormalised at each block.",
       options=("Pre-LN", "Post-LN", "both")),
    _q("06.C3", "number", "nn.Dropout(p=0.1) in training mode: by what factor are the entries it "
       "keeps multiplied?", 1 / 0.9,
       "1 / (1 − p) = 1/0.9 ≈ 1.111, so the expected value of every entry is unchanged and "
       "evaluation needs no rescaling.", tol=1e-3,
       wrong={"0.9": "that is the probability of keeping an entry; the kept ones are divided by it.",
              "1": "nn.Dropout rescales the kept entries during training (inverted dropout)."}),
    # Chapter 7: GPT (07a-07e), BERT (07f), T5 (07g), the modern decoder (07h)
    _q("07.C1", "number", "A causal language model gets a batch of 2 sequences of 10 tokens, no "
       "padding. How many next-token predictions enter the loss?", 18,
       "Each sequence of 10 tokens gives 9 (position t predicts token t + 1; the last has no "
       "target): 2 × 9.",
       wrong={"20": "that counts the last position, which has no next token to predict."}),
    _q("07.C2", "number", "A language model's mean next-token loss on held-out text is 1.386 nats "
       "(that is, ln 4). What is its perplexity?", 4.0,
       "Perplexity is e to the loss: e^1.386 = 4, as uncertain as a fair choice among 4 tokens.",
       tol=0.01, wrong={"1.386": "that is the loss itself; perplexity is its exponential, e^L.",
                        "0.25": "that is the probability of a fair choice among 4; perplexity "
                                "is e^L, the number of choices."}),
    _q("07.C3", "number", "Next-token probabilities (0.4, 0.3, 0.2, 0.1) and top-p with p = 0.75: "
       "how many tokens stay in the nucleus?", 3,
       "The tokens before the third sum to 0.7, under 0.75, so the third is kept; those before "
       "the fourth sum to 0.9, so it is dropped.",
       wrong={"2": "0.4 + 0.3 = 0.7 is still under p = 0.75: the third token is needed to reach it.",
              "4": "the tokens before the fourth already sum to 0.9 ≥ 0.75, so it is dropped."}),
    _q("07.C4", "number", "Generating n = 255 tokens greedily without a KV cache: how many times "
       "the operations of the cached generation do the projections and MLPs take?", 128,
       "Step t runs t positions without the cache and 1 with it: (1 + 2 + ... + n) / n = "
       "(n + 1) / 2 = 128.",
       wrong={"255": "that is the ratio at the last step only; over all steps it is (n + 1) / 2."}),
    _q("07.C5", "number", "DPO with β = 0.1, at its first step (the policy still equals the "
       "reference): what is the loss, in nats?", 0.6931,
       "Both log-ratios are 0, so the margin is 0 and the loss is −log σ(0) = log 2 ≈ 0.693.",
       tol=1e-3, wrong={"0": "the margin is 0, but the loss is −log σ(0) = log 2.",
                        "0.5": "that is σ(0); the loss is −log σ(0) = log 2."}),
    _q("07.C6", "number", "In the chapter's in-context task a sequence's mapping covers 8 input "
       "symbols. A 4-shot prompt shows 4 examples with distinct inputs, then a query drawn from "
       "the same 8 inputs. What share of queries has its input among the examples?", 0.5,
       "4 of the 8 inputs are shown, so a query's input is among them with probability 4/8: the "
       "accuracy of pure retrieval at 4 shots is 0.5 plus a guess on the rest.",
       tol=1e-9, wrong={"0.25": "that is 4/16: the query is drawn from the mapping's 8 inputs, not "
                                "from all 16 input symbols.",
                        "1": "only 4 of the 8 inputs are shown in a 4-shot prompt."}),
    _q("07.C7", "number", "GPT-2 small: 12 layers, d_model = 768, a vocabulary of 50,257, 1024 "
       "positions, the output layer tied to the token embedding. How many parameters?",
       124439808,
       "The formula of the chapter gives 124,439,808, which is what GPT2LMHeadModel counts; the "
       "GPT-2 paper's table says 117M.",
       wrong={"163037184": "that counts an untied output layer (768 × 50,257 more)."}),
    _q("07.C8", "number", "By C ≈ 6ND, about how many floating-point operations does training a "
       "model of N = 10^9 parameters on D = 2 · 10^10 tokens take?", 1.2e20,
       "6 · 10^9 · 2 · 10^10 = 1.2 · 10^20: 2N per token forward and 4N backward.",
       tol=1e17, wrong={"4e+19": "that is 2ND, the forward pass only; the backward pass costs "
                                 "twice as much again.",
                        "2e+19": "that is N·D; each parameter costs 6 operations per token."}),
    _q("07.C9", "number", "BERT selects 15 % of the tokens for its masked-LM loss. What fraction "
       "of the selected tokens is replaced by [MASK]?", 0.8,
       "80 % become [MASK], 10 % a random token, 10 % stay unchanged (Devlin et al., 2019, §3.1).",
       tol=1e-9, wrong={"1": "only 80 % are masked; 10 % get a random token, 10 % stay.",
                        "0.15": "that is the fraction of all tokens selected, not of the "
                                "selected ones that become [MASK]."}),
    _q("07.C10", "number", "T5 drops attention's 1/√d_head and draws W^Q with standard deviation "
       "(d_model · d_head)^(-1/2) instead. For T5-base (d_model = 768, d_head = 64), what is that "
       "standard deviation?", 0.0045105,
       "1/√(768 · 64) = 1/√49152 ≈ 0.00451: the factor 1/√d_head that other transformers apply to "
       "the scores is folded into W^Q's initial scale.",
       tol=5e-5, wrong={"0.0361": "that is d_model^(-1/2), the scale of W^K and W^V; W^Q also "
                                  "carries the 1/√d_head.",
                        "0.125": "that is the factor 1/√d_head alone, not W^Q's standard deviation.",
                        "0.02": "that is BERT's and GPT-2's initializer_range, not T5's rule."}),
    _q("07.C11", "number", "A sentence of 14 tokens is span-corrupted as in the T5 notebook (noise "
       "density 0.15, mean span length 3). How many tokens does the encoder's input hold, "
       "not counting <eos>?", 13,
       "round(14 · 0.15) = 2 tokens are dropped, in round(2 / 3) = 1 span, and one sentinel takes "
       "the span's place: 14 − 2 + 1 = 13.",
       wrong={"12": "the dropped span is replaced by a sentinel token, not removed without trace.",
              "14": "that keeps every token in place, as BERT's masking does; T5 removes the span.",
              "11": "these 2 noise tokens form one span, not two."}),
    _q("07.C12", "number", "Llama 7B has d_model = 4096. What is the hidden width d_ff of its "
       "SwiGLU MLP (2/3 · 4 · d_model, rounded up to a multiple of 256)?", 11008,
       "2/3 · 16384 = 10922.7; int() gives 10922, rounded up to a multiple of 256: 11,008, what "
       "LlamaConfig's default (the 7B shape) holds.",
       wrong={"10922": "that is 2/3 · 4 · d_model before Llama rounds it up to a multiple of 256.",
              "16384": "that is GPT's 4 · d_model; SwiGLU's three matrices shrink it to 2/3."}),
    _q("07.C13", "number", "One attention layer with d_model = 4096, H = 32 query heads of "
       "d_head = 128 and H_kv = 8 key/value heads: how many numbers does its KV cache hold per "
       "token?", 2048,
       "A key and a value of d_head numbers for each of the 8 key/value heads: 2 · 8 · 128, a "
       "quarter of multi-head attention's 2 · d_model.",
       wrong={"8192": "that is multi-head attention's 2 · d_model; only the 8 key/value heads "
                      "are cached.",
              "1024": "that counts the keys only; the values are cached too."}),
    _q("07.C14", "number", "RMSNorm with γ = 1 and ε = 0 applied to the token (3, 3, 3, 3): what "
       "is its first output?", 1,
       "The root mean square of (3, 3, 3, 3) is 3, so every feature becomes 3 / 3 = 1; nothing "
       "is subtracted.",
       wrong={"0": "that is LayerNorm's output: it subtracts the mean, RMSNorm does not.",
              "3": "that is the input; RMSNorm divides it by its root mean square, 3."}),
    # Chapter 8: ViT and CLIP
    _q("08.C1", "number", "ViT-B/16 on a 224 × 224 image: how many tokens does the encoder "
       "read, [CLS] included?", 197,
       "(224 / 16)² = 196 patches, plus [CLS].",
       wrong={"196": "that is the patches alone; the [CLS] token makes 197."}),
    _q("08.C2", "number", "CLIP's loss over a batch of 32 image–text pairs: for one image, how "
       "many of the batch's texts act as negatives?", 31,
       "Every other caption in the batch: the softmax runs over the 32 texts, one of them right.",
       wrong={"32": "one of the 32 texts is the image's own caption, the positive.",
              "62": "that counts both directions' negatives; one image's row has 31."}),
    _q("08.C3", "number", "CLIP starts its temperature at τ = 0.07 and learns "
       "logit_scale = log(1/τ). By what factor are the cosine similarities multiplied at the "
       "start of training (two decimals)?", 1 / 0.07,
       "exp(logit_scale) = 1/τ ≈ 14.29: the logits are cosines (between −1 and 1) scaled up so "
       "that the softmax can be sharp; Radford et al. (2021) learn logit_scale and clip the "
       "scale at 100.", tol=0.006,
       wrong={"0.07": "that is τ itself; the similarities are divided by τ, i.e. multiplied by 1/τ.",
              "2.66": "that is logit_scale = log(1/τ); the factor is exp(logit_scale)."}),
    # Chapter 9: LoRA and QLoRA
    _q("09.C1", "number", "LoRA with rank r = 8 on one 768 × 768 linear layer: how many trainable "
       "parameters does it add?", 12288,
       "A is r × 768 and B is 768 × r: 2 · 8 · 768 = 12,288, against 589,824 in the frozen W.",
       wrong={"6144": "that is one of the two factors; LoRA trains both A and B.",
              "589824": "that is the frozen matrix itself."}),
    _q("09.C3", "number", "NF4 weights in blocks of 64, one float32 absmax constant per block and "
       "no double quantisation: how many bits of storage per weight?", 4.5,
       "4 bits per code plus 32 bits shared by 64 weights: 4 + 0.5.", tol=1e-9,
       wrong={"4": "that forgets the absmax constant each block of 64 stores."}),
    _q("09.C4", "number", "LoRA multiplies its update BA by γ = α/r. With α fixed at 16, the "
       "rank goes from r = 8 to r = 32: by what factor does γ change?", 0.25,
       "γ goes from 16/8 = 2 to 16/32 = 0.5, a quarter: at fixed α a larger rank scales its "
       "update down, as LoRA intends, so that α can stay fixed when r changes; rsLoRA argues "
       "this over-corrects and divides by √r instead.",
       tol=1e-9,
       wrong={"4": "that is how r changes; γ = α/r shrinks as r grows.",
              "0.5": "that is how rsLoRA's factor α/√r would change, √(8/32); LoRA divides by r "
                     "itself."}),
    _q("09.C2", "choice", "After merging a LoRA adapter into its layer (W ← W + (α/r)·BA), "
       "inference costs…", "a",
       "The merged layer is an ordinary W of the same shape: no extra matrix multiplication, "
       "unlike adapter layers that stay in the forward pass.",
       options=("the same as the base model", "r extra multiplications per token per layer",
                "twice the base model's")),
]}


def chapter_questions(chapter: str) -> list[Question]:
    """The questions of chapter ``"04"``, in order."""
    return sorted((q for qid, q in QUESTIONS.items() if qid.split(".")[0] == chapter),
                  key=lambda q: int(q.id.split(".C")[1]))


# Where a split chapter asks its questions (tests/test_concepts.py reads the notebooks to check
# it). A notebook key not listed here asks none (02b, 06b); a chapter key ("04", or "07"
# for a whole split chapter) asks all of its chapter's questions.
NOTEBOOK_QUESTIONS = {
    "02a": ("02.C1", "02.C2", "02.C3"), "06a": ("06.C1", "06.C2", "06.C3"),
    "07a": ("07.C1", "07.C2"), "07b": ("07.C3", "07.C4"), "07c": ("07.C5",), "07d": ("07.C6",),
    "07e": ("07.C7", "07.C8"), "07f": ("07.C9",), "07g": ("07.C10", "07.C11"),
    "07h": ("07.C12", "07.C13", "07.C14"),
    "08a": ("08.C1",), "08b": ("08.C2", "08.C3"),
    "09a": ("09.C1", "09.C2"), "09b": ("09.C3", "09.C4"),
}


def asked_in(key: str | None) -> list[str]:
    """The ids of the questions a submission graded as ``key`` ("04", "07b", "02") is asked."""
    if not key:
        return []
    if len(key) > 2:
        return list(NOTEBOOK_QUESTIONS.get(key, ()))
    return [q.id for q in chapter_questions(key)]


def question(qid: str) -> Question:
    try:
        return QUESTIONS[qid]
    except KeyError:
        raise KeyError(f"no concept check {qid!r}; known: {', '.join(QUESTIONS)}") from None


# -- reading a submission's answers without running it ---------------------------------------
#
# The batch grader reads answers in its own process, from files students wrote, so the reader is
# a small interpreter of its own with every cost bounded: the cell's size, the number of syntax
# nodes, the nesting, the size of every number and string, and what arithmetic may do. Nothing
# is evaluated by Python's eval; an answer outside these limits is a note on that submission.

MAX_CELL = 64 << 10  # characters of a concept-check cell that the grader will read
MAX_NODES = 2_000  # syntax nodes in the answers dictionary
MAX_DEPTH = 8  # nesting of the answers dictionary (a shape inside it is depth 2)
MAX_ITEMS = 64  # entries of the dictionary, elements of a shape
MAX_TEXT = 200  # characters of a string answer (a letter, "4,224", "(2, 3)")
MAX_NUMBER = 10**15  # magnitude of a number, written or computed
MAX_CELLS = 8  # concept-check cells read from one submission

_BINARY = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
           ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b,
           ast.Pow: lambda a, b: a ** b}


def _number(value: Any) -> int | float:
    """A number within the reader's limits, or ValueError."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("a number is not finite")
    if abs(value) > MAX_NUMBER:
        raise ValueError(f"a number is larger than {MAX_NUMBER:.0e}")
    return value


def _literal(node: ast.AST, depth: int = 0) -> Any:
    """The value of one answer's syntax, within the limits above."""
    if depth > MAX_DEPTH:
        raise ValueError(f"the answers are nested more than {MAX_DEPTH} levels deep")
    if isinstance(node, ast.Constant):
        value = node.value
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, (int, float)):
            return _number(value)
        if isinstance(value, str):
            if len(value) > MAX_TEXT:
                raise ValueError(f"a string answer is longer than {MAX_TEXT} characters")
            return value
        raise ValueError(f"{type(value).__name__} is not an answer (numbers, shapes, letters)")
    if isinstance(node, (ast.Tuple, ast.List)):
        if len(node.elts) > MAX_ITEMS:
            raise ValueError(f"a shape has more than {MAX_ITEMS} entries")
        items = [_literal(e, depth + 1) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _literal(node.operand, depth + 1)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError("a sign stands before something that is not a number")
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _literal(node.left, depth + 1), _literal(node.right, depth + 1)
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in (left, right)):
            raise ValueError("arithmetic is allowed on numbers only")
        if isinstance(node.op, ast.Pow) and not (isinstance(right, int) and abs(right) <= 64):
            raise ValueError("a power's exponent must be a whole number between -64 and 64")
        if isinstance(node.op, ast.Div) and right == 0:
            raise ValueError("a division by zero")
        try:
            value = _BINARY[type(node.op)](left, right)
        except (OverflowError, ZeroDivisionError, ArithmeticError):
            raise ValueError("an arithmetic expression overflows") from None
        if isinstance(value, complex):
            raise ValueError("an arithmetic expression is not a real number")
        return _number(value)
    raise ValueError(f"answers must be written as plain values (numbers, tuples, letters); "
                     f"line {getattr(node, 'lineno', '?')} has {type(node).__name__}")


def read_answers(source: str) -> dict[str, Any]:
    """The ``answers = {...}`` dictionary of a concepts cell, read as data: numbers, strings,
    ``None``, tuples and lists of those, and arithmetic on numbers (``2 * 8 * 768``), all within
    the limits above; never executed. Raises ValueError naming what it could not read."""
    if not isinstance(source, str):
        raise ValueError("the concept-check cell is not text")
    if len(source) > MAX_CELL:
        raise ValueError(f"the concept-check cell is longer than {MAX_CELL >> 10} KiB, so it "
                         "was not read")
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        raise ValueError(f"the concept-check cell is not valid Python: {err.msg} "
                         f"(line {err.lineno})") from None
    except (RecursionError, MemoryError, ValueError, OverflowError) as err:
        raise ValueError(f"the concept-check cell could not be parsed "
                         f"({type(err).__name__})") from None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "answers"):
            if sum(1 for _ in ast.walk(node.value)) > MAX_NODES:
                raise ValueError(f"the answers are longer than {MAX_NODES} syntax elements")
            if not isinstance(node.value, ast.Dict):
                raise ValueError("answers must be a dictionary {question id: answer}")
            if len(node.value.keys) > MAX_ITEMS:
                raise ValueError(f"answers has more than {MAX_ITEMS} entries")
            answers: dict[str, Any] = {}
            for key, value in zip(node.value.keys, node.value.values, strict=True):
                if not (isinstance(key, ast.Constant) and isinstance(key.value, str)
                        and len(key.value) <= 20):
                    raise ValueError("every key of answers must be a question id such as "
                                     "\"04.C1\"")
                answers[key.value] = _literal(value, 1)
            return answers
    raise ValueError("the concept-check cell has no `answers = {...}`")


def grade_answers(answers: dict[str, Any]) -> list[tuple[Question, Any, bool | None, str]]:
    """(question, given, right?, message) for every question the dictionary names."""
    rows = []
    for qid, given in answers.items():
        q = question(str(qid))
        right, message = q.verdict(given)
        rows.append((q, given, right, message))
    return rows


# -- the cell's display ------------------------------------------------------------------------

_SCRIPT = """
(function () {
  var root = document.getElementById("%(uid)s");
  var data = JSON.parse(root.querySelector("script.ck-concepts-data").textContent);
  function key(q, raw) {
    if (raw === null || raw === undefined) return null;
    raw = String(raw).trim();
    if (q.kind === "number") {
      var v = Number(raw.replace(/[,_\\s]/g, ""));
      return (raw !== "" && isFinite(v)) ? v : null;
    }
    if (q.kind === "shape") {
      var d = raw.match(/-?\\d+/g);
      return d ? d.map(function (x) { return String(parseInt(x, 10)); }).join(",") : null;
    }
    return raw.toLowerCase();
  }
  function same(q, a, b) {
    if (q.kind !== "number") return a === b;
    b = Number(b);
    return Math.abs(a - b) <= Math.max(q.tol, 1e-9 * Math.abs(b));
  }
  root.querySelectorAll(".ck-concept").forEach(function (box, n) {
    var q = data[n];
    var out = box.querySelector(".ck-concept-feedback");
    box.querySelector("button").addEventListener("click", function () {
      var raw;
      if (q.kind === "choice") {
        var picked = box.querySelector("input[type=radio]:checked");
        raw = picked ? picked.value : null;
      } else {
        raw = box.querySelector("input[type=text]").value;
      }
      var k = key(q, raw), message, right = false;
      if (k === null) {
        message = "Type an answer first" + (q.kind === "shape" ? ", e.g. (2, 3)." : ".");
      } else if (same(q, k, q.answer)) {
        right = true; message = "\\u2713 Right. " + q.why;
      } else {
        message = "\\u2717 Not quite; try again.";
        Object.keys(q.wrong).forEach(function (w) {
          var near = q.kind === "number"
            ? Math.abs(k - Number(w)) <= Math.max(q.tol, 5e-3 * Math.abs(Number(w))) : k === w;
          if (near) message = "\\u2717 Not quite: " + q.wrong[w];
        });
      }
      out.textContent = message;
      box.dataset.state = k === null ? "empty" : (right ? "right" : "wrong");
    });
  });
})();
"""


def _html(questions: list[Question], given: dict[str, Any]) -> str:
    uid = f"ck-concepts-{uuid.uuid4().hex[:8]}"
    boxes = []
    for n, q in enumerate(questions, 1):
        # each question is a named group (its text); the radio buttons a radio group in it
        asked = f"{uid}-q{n}"
        if q.kind == "choice":
            control = (f'<div role="radiogroup" aria-labelledby="{asked}">' + "".join(
                f'<label style="display:block"><input type="radio" name="{uid}-{n}" '
                f'value="{letter}"> {letter}) {html.escape(option)}</label>'
                for letter, option in zip(_letters(len(q.options)), q.options, strict=True))
                + "</div>")
        else:
            hint = "a shape, e.g. (2, 3)" if q.kind == "shape" else "a number"
            control = (f'<input type="text" aria-label="answer to {q.id}" placeholder="{hint}" '
                       f'style="width:14em">')
        right, message = q.verdict(given.get(q.id))
        status = "" if right is None else ("\u2713 " if right else "\u2717 ") + html.escape(message)
        boxes.append(
            f'<div class="ck-concept" data-id="{q.id}" style="margin:0.6em 0" role="group" '
            f'aria-labelledby="{asked}">'
            f'<div id="{asked}"><b>{q.id}</b> {html.escape(q.text)}</div>{control} '
            f'<button type="button" aria-label="Check {q.id}">Check</button>'
            f'<div class="ck-concept-feedback" role="status" aria-live="polite">{status}</div></div>')
    data = json.dumps([q.client() for q in questions]).replace("</", "<\\/")
    return (f'<div class="ck-concepts" id="{uid}"><div><b>Concept checks</b> — answer in the boxes '
            f'(instant feedback), or in <code>answers</code> above and run the cell again.</div>'
            f'{"".join(boxes)}<script type="application/json" class="ck-concepts-data">{data}'
            f'</script><script>{_SCRIPT % {"uid": uid}}</script></div>')


class ConceptChecks:
    """What ``check_concepts`` returns: the verdicts, shown as text and as the interactive form."""

    def __init__(self, answers: dict[str, Any]) -> None:
        if not isinstance(answers, dict) or not answers:
            raise TypeError("check_concepts expects the dictionary `answers` "
                            "{question id: your answer or None}")
        self.questions = [question(str(qid)) for qid in answers]
        self.answers = {str(k): v for k, v in answers.items()}
        self.rows = grade_answers(self.answers)

    @property
    def right(self) -> int:
        return sum(1 for *_, ok, _m in self.rows if ok)

    def __repr__(self) -> str:
        lines = []
        for q, _given, right, message in self.rows:
            mark = {True: "✓", False: "✗", None: "·"}[right]
            lines.append(f"{mark} {q.id} {q.text}\n    {message}")
        answered = sum(1 for *_, ok, _m in self.rows if ok is not None)
        lines.append(f"Concept checks: {self.right} of {len(self.rows)} right"
                     f" ({answered} answered).")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        return _html(self.questions, self.answers)


def check_concepts(answers: dict[str, Any]) -> ConceptChecks:
    """Verdicts on a chapter's concept checks; the notebook shows them (see the module doc)."""
    return ConceptChecks(answers)


# -- the batch grader's view ---------------------------------------------------------------------

def grade_sources(sources: list[str], asked: list[str] | None = None,
                  points: float = 0.0) -> tuple[list[dict[str, Any]], list[str]]:
    """The verdicts of every concept-check cell among a submission's code cells (found by its
    ``answers = {...}`` and ``check_concepts(answers)``), read without running anything.

    -> (rows, notes): one row per question, ``{"id", "given", "right", "message"}`` (``right`` is
    None when unanswered), and a note for each cell that could not be read. With ``points`` > 0
    the questions ``asked`` are graded: each has one row (the last answer given, or "not
    answered" when the submission lacks it) with ``"points"`` and ``"earned"`` (all or nothing).
    """
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    cells = [s for s in sources if isinstance(s, str) and "check_concepts(" in s
             and "answers" in s]
    if len(cells) > MAX_CELLS:
        notes.append(f"concept checks: {len(cells)} cells call check_concepts; the last "
                     f"{MAX_CELLS} were read")
        cells = cells[-MAX_CELLS:]
    for source in cells:
        try:
            answers = read_answers(source)
        except ValueError as err:
            notes.append(f"concept checks not read: {err}")
            continue
        except Exception as err:  # noqa: BLE001 (a last resort: a submission never stops a batch)
            notes.append(f"concept checks not read ({type(err).__name__})")
            continue
        for qid, given in answers.items():
            if qid not in QUESTIONS:
                notes.append(f"concept checks: no question {qid!r} in this book; ignored")
                continue
            q = QUESTIONS[qid]
            try:
                right, message = q.verdict(given)
            except Exception as err:  # noqa: BLE001
                right, message = False, f"the answer could not be read ({type(err).__name__})"
            rows.append({"id": q.id, "given": None if given is None else repr(given)[:MAX_TEXT],
                         "right": right, "message": message})
    if points <= 0 or asked is None:
        return rows, notes
    last = {row["id"]: row for row in rows}
    graded = []
    for qid in asked:
        row = last.get(qid) or {"id": qid, "given": None, "right": None,
                                "message": "not answered: the question is not in the "
                                           "submission's concept-check cell"}
        graded.append({**row, "points": float(points),
                       "earned": float(points) if row["right"] else 0.0})
    return graded + [row for row in rows if row["id"] not in set(asked)], notes
