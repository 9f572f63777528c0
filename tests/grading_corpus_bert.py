'''Corpus of plausible student code for the new exercises of 07b (see grading_corpus.py):
07.6 ``mlm_loss`` and 07.7 ``ClsHead``. One bug per suite mutant, bugs the mutants did not
foresee, and correct alternatives. Each bug's ``expect`` was written from the bug itself, as the
words a hint must use to name it.
'''

from __future__ import annotations

from grading_corpus import alt, bug


def sub(source: str, *pairs: tuple[str, str]) -> str:
    """``source`` with each (old, new) replaced; every ``old`` must be there."""
    for old, new in pairs:
        assert old in source, old
        source = source.replace(old, new)
    return source


# ----------------------------------------------------------------------------- 07.6 mlm_loss
ML = "def mlm_loss(logits, labels):\n"
ML_CE = ML + "    return F.cross_entropy(logits.flatten(0, 1), labels.flatten())\n"
STABLE = ("log_softmax", "log-softmax", "overflow")

MLM = [
    bug("mlm_loss", "sum divided by every position", ML +
        "    loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction='sum')\n"
        "    return loss / labels.numel()\n", mutant="mean over every position"),
    bug("mlm_loss", "reduction='sum'", ML +
        "    V = logits.shape[-1]\n"
        "    return F.cross_entropy(logits.view(-1, V), labels.view(-1), reduction='sum')\n",
        mutant="sum over the picked positions"),
    bug("mlm_loss", "a loss per sentence, averaged", ML +
        "    losses = []\n"
        "    for b in range(logits.shape[0]):\n"
        "        picked = labels[b] != -100\n"
        "        if picked.any():\n"
        "            losses.append(F.cross_entropy(logits[b][picked], labels[b][picked]))\n"
        "    return torch.stack(losses).mean()\n", mutant="mean per sentence, then over sentences"),
    bug("mlm_loss", "-100 filled with 0 before the loss", ML +
        "    targets = labels.masked_fill(labels == -100, 0)\n"
        "    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())\n",
        mutant="-100 replaced by 0"),
    bug("mlm_loss", "F.nll_loss on the logits", ML +
        "    return F.nll_loss(logits.flatten(0, 1), labels.flatten())\n", mutant="no log-softmax"),
    # the mutant "mean over every position", written another way
    bug("mlm_loss", "reduction='none', then .mean()", ML +
        "    losses = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction='none')\n"
        "    return losses.mean()\n", mutant="mean over every position"),
    # unforeseen
    bug("mlm_loss", "log of the softmax", ML +
        "    picked = labels != -100\n"
        "    probs = torch.softmax(logits[picked], dim=-1)\n"
        "    return -torch.log(probs.gather(-1, labels[picked][:, None])).mean()\n",
        expect=STABLE, kind="boundary"),
    bug("mlm_loss", "log-sum-exp without the max", ML +
        "    picked = labels != -100\n"
        "    z = logits[picked]\n"
        "    log_p = z - torch.log(torch.exp(z).sum(dim=-1, keepdim=True))\n"
        "    return -log_p.gather(-1, labels[picked][:, None]).mean()\n",
        expect=STABLE, kind="boundary"),
    bug("mlm_loss", "picked positions found as labels > 0", ML +
        "    picked = labels > 0\n"
        "    return F.cross_entropy(logits[picked], labels[picked])\n",
        expect=("label is 0", "label 0", "id 0"), kind="boundary"),
    bug("mlm_loss", "ignore_index=0 (the [PAD] id)", ML +
        "    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=0)\n",
        expect=("out of bounds",)),
    bug("mlm_loss", "summed with .item() in a loop", ML +
        "    total, count = 0.0, 0\n"
        "    for b in range(labels.shape[0]):\n"
        "        for i in range(labels.shape[1]):\n"
        "            if labels[b, i] != -100:\n"
        "                total += F.cross_entropy(logits[b, i][None], labels[b, i][None]).item()\n"
        "                count += 1\n"
        "    return torch.tensor(total / count)\n", expect=("gradient",), kind="gradient"),
    bug("mlm_loss", "log-softmax over the positions", ML +
        "    log_p = F.log_softmax(logits, dim=1)\n"
        "    picked = labels != -100\n"
        "    return -log_p[picked].gather(-1, labels[picked][:, None]).mean()\n",
        expect=("axis", "vocabulary")),
    bug("mlm_loss", "per-position losses returned (reduction='none')", ML +
        "    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction='none')\n",
        expect=("shape", "scalar"), kind="layout"),
    bug("mlm_loss", "returns a Python float", sub(ML_CE, (
        "labels.flatten())\n", "labels.flatten()).item()\n")),
        expect=("float", "torch.Tensor"), kind="type"),
    alt("mlm_loss", "F.cross_entropy, default ignore_index", ML_CE),
    alt("mlm_loss", "boolean indexing", ML +
        "    picked = labels != -100\n"
        "    return F.cross_entropy(logits[picked], labels[picked])\n"),
    alt("mlm_loss", "classes on axis 1 (K-dimensional form)", ML +
        "    return F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=-100)\n"),
    alt("mlm_loss", "nn.CrossEntropyLoss, as BertForMaskedLM", ML +
        "    loss_fct = nn.CrossEntropyLoss()\n"
        "    return loss_fct(logits.view(-1, logits.size(-1)), labels.view(-1))\n"),
    alt("mlm_loss", "logsumexp by hand, masked mean", ML +
        "    picked = labels != -100\n"
        "    safe = labels.clamp(min=0)\n"
        "    nll = torch.logsumexp(logits, dim=-1) - logits.gather(-1, safe[..., None]).squeeze(-1)\n"
        "    return (nll * picked).sum() / picked.sum()\n"),
    alt("mlm_loss", "sum over the picked, divided by their count", ML +
        "    loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction='sum')\n"
        "    return loss / (labels != -100).sum()\n"),
]

# ----------------------------------------------------------------------------- 07.7 ClsHead
CH = '''class ClsHead(nn.Module):
    """BERT's [CLS] head: tanh pooler, dropout, linear classifier."""

    def __init__(self, d_model, n_classes=2, dropout=0.1):
        super().__init__()
        self.pooler = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(d_model, n_classes)

    def forward(self, hidden):
        pooled = torch.tanh(self.pooler(hidden[:, 0]))
        return self.classifier(self.dropout(pooled))
'''
POOLED = "        pooled = torch.tanh(self.pooler(hidden[:, 0]))\n"
OUT = "        return self.classifier(self.dropout(pooled))\n"

HEAD = [
    bug("ClsHead", "mean over the positions", sub(CH, ("hidden[:, 0]", "hidden.mean(dim=1)")),
        mutant="mean over the positions"),
    bug("ClsHead", "the last position", sub(CH, ("hidden[:, 0]", "hidden[:, -1]")),
        mutant="the last position"),
    bug("ClsHead", "no tanh", sub(CH, (POOLED, "        pooled = self.pooler(hidden[:, 0])\n")),
        mutant="no tanh"),
    bug("ClsHead", "pooler left out", sub(CH, (POOLED, "        pooled = hidden[:, 0]\n")),
        mutant="pooler skipped"),
    bug("ClsHead", "dropout on [CLS], before the pooler", sub(CH, (
        POOLED + OUT, "        pooled = torch.tanh(self.pooler(self.dropout(hidden[:, 0])))\n"
                      "        return self.classifier(pooled)\n")),
        mutant="dropout before the pooler"),
    bug("ClsHead", "dropout defined, never applied", sub(CH, (
        OUT, "        return self.classifier(pooled)\n")), mutant="no dropout"),
    # unforeseen
    bug("ClsHead", "ReLU in the pooler", sub(CH, ("torch.tanh(", "torch.relu(")),
        expect=("ReLU", "relu")),
    bug("ClsHead", "hidden[0]: the first sequence, not the first position",
        sub(CH, ("hidden[:, 0]", "hidden[0]")), expect=("shape",),
        kind="layout"),
    bug("ClsHead", "two classes hard-coded", sub(CH, (
        "nn.Linear(d_model, n_classes)", "nn.Linear(d_model, 2)")), expect=("n_classes",)),
    bug("ClsHead", "F.dropout without training=", sub(CH, (
        "        self.dropout = nn.Dropout(dropout)\n", "        self.p = dropout\n"), (
        OUT, "        return self.classifier(F.dropout(pooled, self.p))\n")),
        expect=("training mode", "eval mode")),
    bug("ClsHead", "dropout rate hard-coded to 0.1", sub(CH, (
        "nn.Dropout(dropout)", "nn.Dropout(0.1)")), expect=("`dropout` argument", "rate")),
    bug("ClsHead", "pooler weight not transposed", sub(CH, (
        POOLED, "        cls = hidden[:, 0]\n"
                "        pooled = torch.tanh(cls @ self.pooler.weight + self.pooler.bias)\n")),
        expect=("transpose",)),
    bug("ClsHead", "[CLS] never selected: logits at every position", sub(CH, (
        "self.pooler(hidden[:, 0])", "self.pooler(hidden)")), expect=("shape", "[CLS]"),
        kind="layout"),
    bug("ClsHead", "the pooler named dense", sub(CH, (
        "self.pooler = nn.Linear", "self.dense = nn.Linear"), (
        "self.pooler(hidden", "self.dense(hidden")), expect=("pooler.weight", "self.pooler"),
        kind="namespace"),
    alt("ClsHead", "Hugging Face's layout: nn.Tanh module", sub(CH, (
        "        self.dropout = nn.Dropout(dropout)\n",
        "        self.activation = nn.Tanh()\n        self.dropout = nn.Dropout(dropout)\n"), (
        POOLED, "        first_token = hidden[:, 0]\n"
                "        pooled = self.activation(self.pooler(first_token))\n"))),
    alt("ClsHead", "F.linear and F.dropout(training=self.training)", sub(CH, (
        "        self.dropout = nn.Dropout(dropout)\n", "        self.p = dropout\n"), (
        POOLED + OUT,
        "        cls = hidden.select(1, 0)\n"
        "        pooled = torch.tanh(F.linear(cls, self.pooler.weight, self.pooler.bias))\n"
        "        pooled = F.dropout(pooled, p=self.p, training=self.training)\n"
        "        return F.linear(pooled, self.classifier.weight, self.classifier.bias)\n"))),
    alt("ClsHead", "slice kept, squeezed, tanh_ in place", sub(CH, (
        POOLED, "        pooled = self.pooler(hidden[:, :1]).squeeze(1).tanh_()\n"))),
]

VARIANTS = [*MLM, *HEAD]
