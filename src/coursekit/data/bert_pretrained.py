"""The BERT notebook's model pre-trained at a longer budget, shipped with the package.

The chapter pre-trains its BERT (masked LM + next-sentence prediction) for 400 steps of 64 pairs
in the quick profile. At that budget BERT already predicts what the words on the right reveal
about the subject noun and the possessed noun, but not the pronoun, which the right context
decides completely (the possession after it names the owner's category, and the owner's number
must be read from sentence A: two hops), nor the first state word, nor NSP. The same recipe
run longer learns all three; that takes more steps than a 90-second notebook has, so the model
ships with the package (``bert_pretrained.pt``, about 0.35 MB) with its accuracies measured
during training.

Regenerate it with ``python -m coursekit.data.bert_pretrained [device]``: the chapter's recipe
(its language, its 20,000 training sentences, AdamW at 3e-3 after 50 warm-up steps, seed 0)
for 4,000 steps of 128 pairs, about three minutes on one CPU thread.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch
import torch.nn.functional as F

from coursekit.data.bert_inputs import (
    MASK_ID,
    VOCAB_SIZE,
    WORD_TYPES,
    encode,
    mask_tokens,
    nsp_pairs,
    pair_position,
    split,
    word_type_positions,
)

CHECKPOINT = Path(__file__).with_name("bert_pretrained.pt")
CONFIG = {"d_model": 64, "n_heads": 4, "n_layers": 2, "d_ff": 128, "max_len": 32, "init_std": 0.07}
RECIPE = {"steps": 4000, "batch_size": 128, "lr": 3e-3, "warmup": 50, "seed": 0}


def language():
    """The chapter's language (no adverbs, no adjectives): 20,000 training sentences (seed 1) and
    500 held out (seed 2) -> (train, test)."""
    from coursekit.data.language import SyntheticLanguage

    lang = SyntheticLanguage(p_adverb=0.0, p_adjective=0.0)
    return lang.sample(20_000, seed=1), lang.sample(500, seed=2)


def pretraining_batches(train, batch_size: int, seed: int, device: str = "cpu"):
    """The chapter's batches: random training sentences split into NSP pairs (half NotNext),
    masked by the 80/10/10 rule -> batches(step) -> (inputs, segments, labels, is_next)."""
    rng, generator = random.Random(seed), torch.Generator().manual_seed(seed)

    def batches(step):
        chosen = [train[rng.randrange(len(train))] for _ in range(batch_size)]
        firsts, seconds, is_next = nsp_pairs(chosen, rng)
        ids, segments, special = encode(firsts, seconds)
        inputs, labels = mask_tokens(ids, special, MASK_ID, VOCAB_SIZE, generator)
        return inputs.to(device), segments.to(device), labels.to(device), is_next.to(device)
    return batches


def pretraining_loss(model, batch) -> torch.Tensor:
    """Masked-LM cross-entropy on the picked positions plus NSP cross-entropy."""
    from coursekit.models.bert import mlm_loss

    inputs, segments, labels, is_next = batch
    hidden, _ = model.encode(inputs, segments)
    return mlm_loss(model.mlm_logits(hidden), labels) + F.cross_entropy(model.nsp_logits(hidden), is_next)


@torch.no_grad()
def masked_word_accuracy(model, sentences) -> dict[str, float]:
    """Hide one word of every sentence at a time, at each of the grammar's slots (``WORD_TYPES``),
    in ``[CLS] A [SEP] B [SEP]`` (the sentence split before its pronoun) -> word type -> share of
    the sentences whose hidden word is the masked LM's most likely one."""
    model.eval()
    device = next(model.parameters()).device
    pieces = [split(s) for s in sentences]
    ids, segments, _ = encode([a for a, _ in pieces], [b for _, b in pieces])
    rows, accuracy = torch.arange(len(sentences)), {}
    for kind in WORD_TYPES:
        where = torch.tensor([pair_position(s, word_type_positions(s)[kind]) for s in sentences])
        masked = ids.clone()
        masked[rows, where] = MASK_ID                          # one hidden word per sentence
        hidden, _ = model.encode(masked.to(device), segments.to(device))
        predicted = model.mlm_logits(hidden)[rows, where].argmax(-1).cpu()
        accuracy[kind] = (predicted == ids[rows, where]).float().mean().item()
    return accuracy


@torch.no_grad()
def nsp_accuracy(model, sentences, seed: int = 1) -> float:
    """NSP accuracy on the pairs ``nsp_pairs(sentences, random.Random(seed))`` (the chapter's)."""
    model.eval()
    device = next(model.parameters()).device
    firsts, seconds, is_next = nsp_pairs(sentences, random.Random(seed))
    ids, segments, _ = encode(firsts, seconds)
    hidden, _ = model.encode(ids.to(device), segments.to(device))
    return (model.nsp_logits(hidden).argmax(-1).cpu() == is_next).float().mean().item()


def pretrain(steps: int = RECIPE["steps"], batch_size: int = RECIPE["batch_size"],
             lr: float = RECIPE["lr"], warmup: int = RECIPE["warmup"], seed: int = RECIPE["seed"],
             every: int = 500, device: str = "cpu"):
    """Pre-train the chapter's BERT -> (model on the CPU, in eval mode, curve): every ``every``
    steps the held-out accuracy of each word type and of NSP, [(step, {name: accuracy}), ...]."""
    from coursekit.models.bert import Bert, BertConfig
    from coursekit.train import fit

    train, test = language()
    torch.manual_seed(seed)  # not COURSEKIT_SEED: the shipped recipe is fixed
    model = Bert(BertConfig(vocab_size=VOCAB_SIZE, **CONFIG)).to(device)
    curve: list[tuple[int, dict[str, float]]] = []

    def evaluate(step, history):
        curve.append((step, {**masked_word_accuracy(model, test), "NSP": nsp_accuracy(model, test)}))

    fit(model, pretraining_loss, pretraining_batches(train, batch_size, seed, device), steps=steps,
        lr=lr, lr_schedule=lambda step: min(1.0, step / warmup), every=every, callback=evaluate,
        desc="BERT: MLM + NSP")
    return model.cpu().eval(), curve


def save_checkpoint(model, curve, path: Path = CHECKPOINT) -> None:
    torch.save({"config": CONFIG, "recipe": RECIPE, "state_dict": model.state_dict(), "curve": curve}, path)


def load_checkpoint(path: Path = CHECKPOINT):
    """-> (the shipped BERT in eval mode, its curve [(step, {word type or "NSP": accuracy}), ...])."""
    from coursekit.models.bert import Bert, BertConfig

    saved = torch.load(path, weights_only=True)
    model = Bert(BertConfig(vocab_size=VOCAB_SIZE, **saved["config"]))
    model.load_state_dict(saved["state_dict"])
    return model.eval(), [(step, dict(accuracy)) for step, accuracy in saved["curve"]]


if __name__ == "__main__":
    # python -m coursekit.data.bert_pretrained [device]: regenerate the shipped checkpoint
    import sys

    device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    if device == "cpu":  # a model this small gains nothing from threads
        torch.set_num_threads(1)
    model, curve = pretrain(device=device)
    for step, accuracy in curve:
        print(step, " ".join(f"{name} {a:.3f}" for name, a in accuracy.items()))
    save_checkpoint(model, curve)
