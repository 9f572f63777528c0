'''Corpus of plausible student code for the new exercises of 07a (see grading_corpus.py):
07.2 ``next_token_loss``. One bug per suite mutant, bugs the mutants did not foresee, and correct
alternatives. Each bug's ``expect`` was written from the bug itself, as the words a hint must use
to name it.
'''

from __future__ import annotations

from grading_corpus import INPLACE, alt, bug

# ----------------------------------------------------------------------------- 07.2 next_token_loss
NT = "def next_token_loss(logits, ids, pad_id=0):\n"
V_ = "    V = logits.shape[-1]\n"

NEXT_TOKEN = [
    bug("next_token_loss", "no shift", NT + V_ +
        "    return F.cross_entropy(logits.reshape(-1, V), ids.reshape(-1), ignore_index=pad_id)\n",
        mutant="no shift"),
    bug("next_token_loss", "logits[:, 1:] against ids[:, :-1]", NT + V_ +
        "    return F.cross_entropy(logits[:, 1:].reshape(-1, V), ids[:, :-1].reshape(-1),\n"
        "                           ignore_index=pad_id)\n", mutant="shifted the wrong way"),
    bug("next_token_loss", "no ignore_index", NT + V_ +
        "    return F.cross_entropy(logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1))\n",
        mutant="padding not ignored"),
    bug("next_token_loss", "reduction='sum'", NT + V_ +
        "    return F.cross_entropy(logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1),\n"
        "                           ignore_index=pad_id, reduction='sum')\n",
        mutant="sum instead of mean"),
    bug("next_token_loss", "a mean per sentence, then over sentences", NT +
        "    y = ids[:, 1:]\n"
        "    nll = -F.log_softmax(logits[:, :-1], dim=-1).gather(-1, y[..., None])[..., 0]\n"
        "    keep = (y != pad_id).float()\n"
        "    return ((nll * keep).sum(1) / keep.sum(1)).mean()\n",
        mutant="mean per sentence, then over sentences"),
    # unforeseen
    bug("next_token_loss", "ignore_index=0 hard-coded", NT + V_ +
        "    return F.cross_entropy(logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1),\n"
        "                           ignore_index=0)\n", expect=("pad_id",)),
    bug("next_token_loss", "log of the softmax", NT +
        "    y = ids[:, 1:]\n"
        "    p = torch.softmax(logits[:, :-1], dim=-1).gather(-1, y[..., None])[..., 0]\n"
        "    keep = y != pad_id\n"
        "    return -torch.log(p[keep]).mean()\n",
        expect=("log_softmax", "overflow"), kind="boundary"),
    bug("next_token_loss", "padding zeroed but counted in the mean", NT + V_ +
        "    losses = F.cross_entropy(logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1),\n"
        "                             ignore_index=pad_id, reduction='none')\n"
        "    return losses.mean()\n", expect=("out of the count", "or to the count")),
    bug("next_token_loss", "loss detached with .item()", NT + V_ +
        "    loss = F.cross_entropy(logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1),\n"
        "                           ignore_index=pad_id)\n"
        "    return torch.tensor(loss.item())\n", expect=("gradient",), kind="gradient"),
    bug("next_token_loss", "logits and ids both cut at the end", NT + V_ +
        "    return F.cross_entropy(logits[:, :-1].reshape(-1, V), ids[:, :-1].reshape(-1),\n"
        "                           ignore_index=pad_id)\n", expect=("next",)),
    bug("next_token_loss", "padding targets set to 0 in place", NT + V_ +
        "    y = ids[:, 1:]\n"
        "    y[y == pad_id] = 0\n"
        "    return F.cross_entropy(logits[:, :-1].reshape(-1, V), y.reshape(-1), ignore_index=0)\n",
        expect=INPLACE, kind="in-place"),
    alt("next_token_loss", "Hugging Face style: -100 labels, padded shift", NT + V_ +
        "    labels = ids.masked_fill(ids == pad_id, -100)\n"
        "    labels = F.pad(labels, (0, 1), value=-100)[:, 1:]\n"
        "    return F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1))\n"),
    alt("next_token_loss", "log_softmax, gather, masked mean", NT +
        "    y = ids[:, 1:]\n"
        "    log_p = F.log_softmax(logits[:, :-1], dim=-1).gather(-1, y.unsqueeze(-1)).squeeze(-1)\n"
        "    keep = y != pad_id\n"
        "    return -log_p[keep].sum() / keep.sum()\n"),
    alt("next_token_loss", "boolean selection, then cross_entropy", NT +
        "    z, y = logits[:, :-1], ids[:, 1:]\n"
        "    keep = y != pad_id\n"
        "    return F.cross_entropy(z[keep], y[keep])\n"),
]

VARIANTS = [*NEXT_TOKEN]
