'''Corpus of plausible student code for Chapter 7's thirteen exercises (07a ``merge_pair`` and
``next_token_loss``, 07b ``top_p_filter``, 07c ``dpo_loss``, 07f ``mask_tokens``, ``mlm_loss``
and ``ClsHead``, 07g ``position_bias``, ``shift_right`` and ``span_corruption``, 07h
``rms_norm``, ``SwiGLU`` and ``grouped_query_attention``), aimed at each exercise's contract:
the containers, dtypes and batch scales its text and docstring allow, the thresholds and
clamps students write, numerically careless but plausible formulas, hard-coded constants,
wrong axes, off-by-ones and in-place edits (see ``grading_corpus.py`` for ``bug``/``alt``).

The bugs and the correct alternatives were written from the exercise cells and their text in
``solutions/`` before the suites' cases and mutants were read, and none repeats an entry of the
older corpus files. Each bug's ``expect`` holds the words a hint must use to name it.
'''

from __future__ import annotations

from grading_corpus import alt, bug

# ----------------------------------------------------------------------------- 07.1 merge_pair
MP = "def merge_pair(ids, pair, new_id):\n"
MERGE = [
    bug("merge_pair", "ids.copy() (a tuple has none)", MP +
        "    out, i = ids.copy(), 0\n"
        "    while i < len(out) - 1:\n"
        "        if out[i] == pair[0] and out[i + 1] == pair[1]:\n"
        "            out[i:i + 2] = [new_id]\n"
        "        i += 1\n"
        "    return out\n", expect=("tuple",), kind="type"),
    bug("merge_pair", "the rest appended as ids[i:] (list + tuple)", MP +
        "    out, i = [], 0\n"
        "    while i < len(ids) - 1:\n"
        "        if ids[i] == pair[0] and ids[i + 1] == pair[1]:\n"
        "            out.append(new_id)\n"
        "            i += 2\n"
        "        else:\n"
        "            out.append(ids[i])\n"
        "            i += 1\n"
        "    return out + ids[i:]\n", expect=("tuple",), kind="type"),
    bug("merge_pair", "only the first id of the pair compared", MP +
        "    out, i = [], 0\n"
        "    while i < len(ids):\n"
        "        if ids[i] == pair[0] and i + 1 < len(ids):\n"
        "            out.append(new_id)\n"
        "            i += 2\n"
        "        else:\n"
        "            out.append(ids[i])\n"
        "            i += 1\n"
        "    return out\n", mutant="second id not compared"),
    bug("merge_pair", "zip over neighbours, nothing skipped", MP +
        "    out = []\n"
        "    for a, b in zip(ids, ids[1:]):\n"
        "        out.append(new_id if (a, b) == tuple(pair) else a)\n"
        "    return out\n", mutant="one output per neighbouring pair"),
    bug("merge_pair", "the caller's list returned when the pair is absent", MP +
        "    if pair[0] not in ids:\n"
        "        return ids\n"
        "    out, i = [], 0\n"
        "    while i < len(ids):\n"
        "        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:\n"
        "            out.append(new_id)\n"
        "            i += 2\n"
        "        else:\n"
        "            out.append(ids[i])\n"
        "            i += 1\n"
        "    return out\n", kind="alias", expect=("new list",)),
    bug("merge_pair", "new_id inserted and the first id kept", MP +
        "    out, i = [], 0\n"
        "    while i < len(ids):\n"
        "        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:\n"
        "            out += [ids[i], new_id]\n"
        "            i += 2\n"
        "        else:\n"
        "            out.append(ids[i])\n"
        "            i += 1\n"
        "    return out\n", mutant="first id kept next to new_id"),
    bug("merge_pair", "new id as max(ids) + 1, inline", MP +
        "    out, i = [], 0\n"
        "    while i < len(ids):\n"
        "        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:\n"
        "            out.append(max(ids) + 1)\n"
        "            i += 2\n"
        "        else:\n"
        "            out.append(ids[i])\n"
        "            i += 1\n"
        "    return out\n", mutant="new_id made up"),
    bug("merge_pair", "for loop over indices, ids[i + 1] unguarded", MP +
        "    out, skip = [], False\n"
        "    for i in range(len(ids)):\n"
        "        if skip:\n"
        "            skip = False\n"
        "            continue\n"
        "        if ids[i] == pair[0] and ids[i + 1] == pair[1]:\n"
        "            out.append(new_id)\n"
        "            skip = True\n"
        "        else:\n"
        "            out.append(ids[i])\n"
        "    return out\n", mutant="no bounds check"),
    bug("merge_pair", "slice against the pair, for loop with a skip", MP +
        "    out, skip = [], False\n"
        "    for i in range(len(ids)):\n"
        "        if skip:\n"
        "            skip = False\n"
        "        elif i + 1 < len(ids) and ids[i:i + 2] == pair:\n"
        "            out.append(new_id)\n"
        "            skip = True\n"
        "        else:\n"
        "            out.append(ids[i])\n"
        "    return out\n", mutant="slice compared with the tuple pair"),
    bug("merge_pair", "hits marked on a tensor, then unique_consecutive", MP +
        "    t = torch.tensor(list(ids))\n"
        "    hit = torch.zeros(len(t), dtype=torch.bool)\n"
        "    if len(t) > 1:\n"
        "        hit[:-1] = (t[:-1] == pair[0]) & (t[1:] == pair[1])\n"
        "    t = torch.where(hit | hit.roll(1), torch.tensor(new_id), t)\n"
        "    return torch.unique_consecutive(t).tolist()\n", mutant="collapses repeats"),
    alt("merge_pair", "list(ids), slice assignment on the copy", MP +
        "    out, i = list(ids), 0\n"
        "    while i < len(out) - 1:\n"
        "        if out[i] == pair[0] and out[i + 1] == pair[1]:\n"
        "            out[i:i + 2] = [new_id]\n"
        "        i += 1\n"
        "    return out\n"),
    alt("merge_pair", "an iterator with a look-ahead", MP +
        "    out, it = [], iter(ids)\n"
        "    prev = next(it, None)\n"
        "    while prev is not None:\n"
        "        cur = next(it, None)\n"
        "        if cur is not None and (prev, cur) == tuple(pair):\n"
        "            out.append(new_id)\n"
        "            prev = next(it, None)\n"
        "        else:\n"
        "            out.append(prev)\n"
        "            prev = cur\n"
        "    return out\n"),
]

# ----------------------------------------------------------------------------- 07.2 next_token_loss
NT = "def next_token_loss(logits, ids, pad_id=0):\n"
NEXT = [
    bug("next_token_loss", ".view on the sliced logits", NT +
        "    V = logits.shape[-1]\n"
        "    return F.cross_entropy(logits[:, :-1].view(-1, V), ids[:, 1:].reshape(-1),\n"
        "                           ignore_index=pad_id)\n", expect=("reshape",)),
    bug("next_token_loss", "padding read from the inputs, not the targets", NT +
        "    logp = F.log_softmax(logits[:, :-1], dim=-1)\n"
        "    nll = -logp.gather(-1, ids[:, 1:, None])[..., 0]\n"
        "    keep = ids[:, :-1] != pad_id\n"
        "    return nll[keep].mean()\n", expect=("taken from the inputs",)),
    bug("next_token_loss", "log-sum-exp with one max for the whole batch", NT +
        "    z = logits[:, :-1]\n"
        "    z = z - z.max()\n"
        "    logp = z - z.exp().sum(-1, keepdim=True).log()\n"
        "    nll = -logp.gather(-1, ids[:, 1:, None])[..., 0]\n"
        "    keep = ids[:, 1:] != pad_id\n"
        "    return nll[keep].mean()\n", expect=("F.log_softmax",)),
    bug("next_token_loss", "logits and ids both cut at the start", NT +
        "    return F.cross_entropy(logits[:, 1:].flatten(0, 1), ids[:, 1:].flatten(),\n"
        "                           ignore_index=pad_id)\n",
        expect=("not shifted", "shift")),
    bug("next_token_loss", "label smoothing from a training recipe", NT +
        "    return F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten(),\n"
        "                           ignore_index=pad_id, label_smoothing=0.1)\n",
        expect=("smoothing",)),
    bug("next_token_loss", "log-softmax over the batch axis", NT +
        "    logp = F.log_softmax(logits, dim=0)[:, :-1]\n"
        "    nll = -logp.gather(-1, ids[:, 1:, None])[..., 0]\n"
        "    keep = ids[:, 1:] != pad_id\n"
        "    return nll[keep].mean()\n", expect=("vocabulary", "last axis")),
    alt("next_token_loss", "K-dimensional cross_entropy (classes on axis 1)", NT +
        "    return F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:],\n"
        "                           ignore_index=pad_id)\n"),
    alt("next_token_loss", "nn.CrossEntropyLoss on reshaped slices", NT +
        "    loss = nn.CrossEntropyLoss(ignore_index=pad_id)\n"
        "    return loss(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))\n"),
    alt("next_token_loss", "log-sum-exp with a max per position", NT +
        "    z = logits[:, :-1]\n"
        "    lse = torch.logsumexp(z, dim=-1)\n"
        "    nll = lse - z.gather(-1, ids[:, 1:, None])[..., 0]\n"
        "    keep = (ids[:, 1:] != pad_id).to(nll.dtype)\n"
        "    return (nll * keep).sum() / keep.sum()\n"),
]

# ----------------------------------------------------------------------------- 07.3 top_p_filter
TP = "def top_p_filter(logits, p):\n"
SORT = ("    sorted_logits, order = logits.sort(dim=-1, descending=True)\n"
        "    probs = sorted_logits.softmax(dim=-1)\n")
TOP_P = [
    bug("top_p_filter", "drop[:, 0] = False (a row, on 3-D logits)", TP + SORT +
        "    drop = probs.cumsum(dim=-1) - probs >= p\n"
        "    drop[:, 0] = False\n"
        "    drop = drop.scatter(-1, order, drop)\n"
        "    return logits.masked_fill(drop, float('-inf'))\n",
        expect=("drop[..., 0]", "leading axes", "last axis")),
    bug("top_p_filter", "one nucleus size for the whole batch", TP + SORT +
        "    k = int((probs.cumsum(dim=-1) - probs < p).sum(dim=-1).max())\n"
        "    kth = sorted_logits[..., k - 1:k]\n"
        "    return logits.masked_fill(logits < kth, float('-inf'))\n",
        expect=("each row", "per row", "every row", "batch")),
    bug("top_p_filter", "filled with -1e9", TP + SORT +
        "    drop = probs.cumsum(dim=-1) - probs >= p\n"
        "    drop = drop.scatter(-1, order, drop)\n"
        "    return logits.masked_fill(drop, -1e9)\n", expect=("finite", "float('-inf')")),
    bug("top_p_filter", "p read as the share to drop", TP + SORT +
        "    drop = probs.cumsum(dim=-1) - probs >= 1 - p\n"
        "    drop[..., 0] = False\n"
        "    drop = drop.scatter(-1, order, drop)\n"
        "    return logits.masked_fill(drop, float('-inf'))\n", mutant="1 − p where p belongs"),
    bug("top_p_filter", "p = 0.9 written in (Hugging Face's usual value)", TP + SORT +
        "    drop = probs.cumsum(dim=-1) - probs >= 0.9\n"
        "    drop[..., 0] = False\n"
        "    return logits.masked_fill(drop.scatter(-1, order, drop), float('-inf'))\n",
        mutant="p fixed at 0.9"),
    bug("top_p_filter", "log of the renormalised nucleus returned", TP + SORT +
        "    drop = probs.cumsum(dim=-1) - probs >= p\n"
        "    drop = drop.scatter(-1, order, drop)\n"
        "    kept = logits.softmax(dim=-1).masked_fill(drop, 0)\n"
        "    return torch.log(kept / kept.sum(dim=-1, keepdim=True))\n",
        expect=("unchanged", "renormalis", "log-probabilities")),
    bug("top_p_filter", "probabilities in float32, logits returned in float32", TP +
        "    z = logits.float()\n"
        "    sorted_logits, order = z.sort(dim=-1, descending=True)\n"
        "    probs = sorted_logits.softmax(dim=-1)\n"
        "    drop = probs.cumsum(dim=-1) - probs >= p\n"
        "    drop = drop.scatter(-1, order, drop)\n"
        "    return z.masked_fill(drop, float('-inf'))\n", expect=("dtype",), kind="type"),
    alt("top_p_filter", "filtered sorted logits scattered back", TP + SORT +
        "    drop = probs.cumsum(dim=-1) - probs >= p\n"
        "    kept = sorted_logits.masked_fill(drop, float('-inf'))\n"
        "    return torch.empty_like(logits).scatter(-1, order, kept)\n"),
    alt("top_p_filter", "exclusive cumsum by concatenation, a keep mask", TP + SORT +
        "    cum = probs.cumsum(dim=-1)\n"
        "    before = torch.cat([torch.zeros_like(cum[..., :1]), cum[..., :-1]], dim=-1)\n"
        "    keep = (before < p).scatter(-1, order, before < p)\n"
        "    return torch.where(keep, logits, torch.full_like(logits, float('-inf')))\n"),
]

# ----------------------------------------------------------------------------- 07.4 dpo_loss
DP = ("def dpo_loss(policy_chosen, policy_rejected, reference_chosen, reference_rejected, "
      "beta=0.1):\n"
      "    bracket = (policy_chosen - reference_chosen) - (policy_rejected - reference_rejected)\n")
DPO = [
    bug("dpo_loss", "log1p(exp(-x)) overflows", DP +
        "    return torch.log1p(torch.exp(-beta * bracket)).mean()\n",
        expect=("overflow", "underflow", "infinity")),
    bug("dpo_loss", "policy log-probabilities detached", DP.replace(
        "(policy_chosen - reference_chosen) - (policy_rejected - reference_rejected)",
        "(policy_chosen.detach() - reference_chosen) - (policy_rejected.detach() - "
        "reference_rejected)") + "    return -F.logsigmoid(beta * bracket).mean()\n",
        expect=("gradient",)),
    bug("dpo_loss", "bracket divided by beta", DP +
        "    return -F.logsigmoid(bracket / beta).mean()\n", expect=("β",)),
    bug("dpo_loss", "beta = 0.1 set inside", DP +
        "    beta = 0.1\n"
        "    return -F.logsigmoid(beta * bracket).mean()\n", mutant="β fixed at 0.1"),
    bug("dpo_loss", "policy plus reference", DP.replace(
        "(policy_chosen - reference_chosen) - (policy_rejected - reference_rejected)",
        "(policy_chosen + reference_chosen) - (policy_rejected + reference_rejected)") +
        "    return -F.logsigmoid(beta * bracket).mean()\n", mutant="the reference added"),
    bug("dpo_loss", "margins averaged first", DP +
        "    return -F.logsigmoid(beta * bracket.mean())\n",
        mutant="margins averaged before the sigmoid"),
    bug("dpo_loss", "sigmoid of minus the margin", DP +
        "    return torch.sigmoid(-beta * bracket).mean()\n", mutant="1 − σ instead of −log σ"),
    bug("dpo_loss", "sigmoid clamped at 1e-8, then the log", DP +
        "    return -torch.log(torch.sigmoid(beta * bracket).clamp_min(1e-8)).mean()\n",
        expect=("clamp", "underflow", "infinity")),
    bug("dpo_loss", "the two log-ratios added", DP.replace(
        "(policy_chosen - reference_chosen) - (policy_rejected - reference_rejected)",
        "(policy_chosen - reference_chosen) + (policy_rejected - reference_rejected)") +
        "    return -F.logsigmoid(beta * bracket).mean()\n", expect=("minus", "difference")),
    bug("dpo_loss", "computed and returned in float64", DP +
        "    return -F.logsigmoid(beta * bracket.double()).mean()\n",
        expect=("dtype",), kind="type"),
    alt("dpo_loss", "binary cross-entropy with logits against ones", DP +
        "    x = beta * bracket\n"
        "    return F.binary_cross_entropy_with_logits(x, torch.ones_like(x))\n"),
    alt("dpo_loss", "logaddexp(0, -x)", DP +
        "    x = beta * bracket\n"
        "    return torch.logaddexp(torch.zeros_like(x), -x).mean()\n"),
]

# ----------------------------------------------------------------------------- 07.5 mask_tokens
MT = "def mask_tokens(ids, special, mask_id, vocab_size, generator=None, p=0.15):\n"
PICK = ("    picked = (torch.rand(ids.shape, generator=generator) < p) & ~special\n"
        "    draw = torch.rand(ids.shape, generator=generator)\n"
        "    random_ids = torch.randint(vocab_size, ids.shape, generator=generator)\n")
MASK = [
    bug("mask_tokens", "20 % random, none kept on purpose", MT + PICK +
        "    labels = torch.where(picked, ids, -100)\n"
        "    inputs = torch.where(picked & (draw < 0.8), mask_id, ids)\n"
        "    inputs = torch.where(picked & (draw >= 0.8), random_ids, inputs)\n"
        "    return inputs, labels\n", expect=("share left unchanged is",)),
    bug("mask_tokens", "labels 0 where nothing is picked", MT + PICK +
        "    labels = ids * picked\n"
        "    inputs = torch.where(picked & (draw < 0.8), mask_id, ids)\n"
        "    inputs = torch.where(picked & (draw >= 0.8) & (draw < 0.9), random_ids, inputs)\n"
        "    return inputs, labels\n", expect=("was not picked",)),
    bug("mask_tokens", "only special positions picked", MT +
        "    picked = (torch.rand(ids.shape, generator=generator) < p) & special\n"
        "    draw = torch.rand(ids.shape, generator=generator)\n"
        "    random_ids = torch.randint(vocab_size, ids.shape, generator=generator)\n"
        "    labels = torch.where(picked, ids, -100)\n"
        "    inputs = torch.where(picked & (draw < 0.8), mask_id, ids)\n"
        "    inputs = torch.where(picked & (draw >= 0.8) & (draw < 0.9), random_ids, inputs)\n"
        "    return inputs, labels\n", expect=("~special",)),
    bug("mask_tokens", "float labels (torch.full with -100.0)", MT + PICK +
        "    labels = torch.full(ids.shape, -100.0)\n"
        "    labels[picked] = ids[picked].float()\n"
        "    inputs = torch.where(picked & (draw < 0.8), mask_id, ids)\n"
        "    inputs = torch.where(picked & (draw >= 0.8) & (draw < 0.9), random_ids, inputs)\n"
        "    return inputs, labels\n", expect=("dtype",), kind="type"),
    bug("mask_tokens", "random ids drawn without the generator", MT +
        "    picked = (torch.rand(ids.shape, generator=generator) < p) & ~special\n"
        "    draw = torch.rand(ids.shape, generator=generator)\n"
        "    random_ids = torch.randint(vocab_size, ids.shape)\n"
        "    labels = torch.where(picked, ids, -100)\n"
        "    inputs = torch.where(picked & (draw < 0.8), mask_id, ids)\n"
        "    inputs = torch.where(picked & (draw >= 0.8) & (draw < 0.9), random_ids, inputs)\n"
        "    return inputs, labels\n", expect=("generator",)),
    bug("mask_tokens", "a fixed number per sentence (Google's count)", MT +
        "    inputs, labels = ids.clone(), torch.full_like(ids, -100)\n"
        "    for b in range(ids.shape[0]):\n"
        "        where = (~special[b]).nonzero()[:, 0]\n"
        "        n = max(1, round(p * len(where)))\n"
        "        chosen = where[torch.randperm(len(where), generator=generator)[:n]]\n"
        "        labels[b, chosen] = ids[b, chosen]\n"
        "        for i in chosen.tolist():\n"
        "            u = torch.rand((), generator=generator)\n"
        "            if u < 0.8:\n"
        "                inputs[b, i] = mask_id\n"
        "            elif u < 0.9:\n"
        "                inputs[b, i] = torch.randint(vocab_size, (), generator=generator)\n"
        "    return inputs, labels\n", expect=("fixed number per sentence",)),
    bug("mask_tokens", "bernoulli 0.8 then bernoulli 0.1, independent", MT +
        "    picked = (torch.rand(ids.shape, generator=generator) < p) & ~special\n"
        "    labels = torch.where(picked, ids, -100)\n"
        "    masked = torch.bernoulli(torch.full(ids.shape, 0.8), generator=generator).bool() & picked\n"
        "    swap = torch.bernoulli(torch.full(ids.shape, 0.1), generator=generator).bool() & picked\n"
        "    inputs = ids.masked_fill(masked, mask_id)\n"
        "    random_ids = torch.randint(vocab_size, ids.shape, generator=generator)\n"
        "    inputs = torch.where(swap, random_ids, inputs)\n"
        "    return inputs, labels\n", mutant="random draw independent of the [MASK] draw"),
    alt("mask_tokens", "one uniform draw split into p·0.8, p·0.1, p·0.1", MT +
        "    u = torch.rand(ids.shape, generator=generator)\n"
        "    random_ids = torch.randint(vocab_size, ids.shape, generator=generator)\n"
        "    picked = (u < p) & ~special\n"
        "    labels = torch.where(picked, ids, -100)\n"
        "    inputs = torch.where(picked & (u < 0.8 * p), mask_id, ids)\n"
        "    inputs = torch.where(picked & (u >= 0.8 * p) & (u < 0.9 * p), random_ids, inputs)\n"
        "    return inputs, labels\n"),
    alt("mask_tokens", "random ids drawn only where needed", MT +
        "    picked = torch.rand(ids.shape, generator=generator).lt(p).logical_and(special.logical_not())\n"
        "    labels = ids.masked_fill(~picked, -100)\n"
        "    draw = torch.rand(ids.shape, generator=generator)\n"
        "    inputs = ids.clone()\n"
        "    inputs[picked & (draw < 0.8)] = mask_id\n"
        "    swap = picked & (draw >= 0.8) & (draw < 0.9)\n"
        "    inputs[swap] = torch.randint(0, vocab_size, (int(swap.sum()),), generator=generator)\n"
        "    return inputs, labels\n"),
]

# ----------------------------------------------------------------------------- 07.6 mlm_loss
ML = "def mlm_loss(logits, labels):\n"
MLM = [
    bug("mlm_loss", "log-sum-exp with one max for the whole batch", ML +
        "    z = logits - logits.max()\n"
        "    logp = z - z.exp().sum(-1, keepdim=True).log()\n"
        "    picked = labels != -100\n"
        "    return -logp[picked].gather(-1, labels[picked][:, None]).mean()\n",
        expect=("F.log_softmax",)),
    bug("mlm_loss", "the mean divided by the batch size again", ML +
        "    V = logits.shape[-1]\n"
        "    return F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1)) / logits.shape[0]\n",
        expect=("batch size", "divided")),
    bug("mlm_loss", "label smoothing from a training recipe", ML +
        "    V = logits.shape[-1]\n"
        "    return F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), label_smoothing=0.1)\n",
        expect=("smoothing",)),
    bug("mlm_loss", "logits detached", ML +
        "    picked = labels != -100\n"
        "    log_p = F.log_softmax(logits.detach()[picked], dim=-1)\n"
        "    return -log_p.gather(-1, labels[picked][:, None]).mean()\n", expect=("gradient",)),
    bug("mlm_loss", "mean over the picked of each sentence, summed", ML +
        "    V = logits.shape[-1]\n"
        "    nll = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), reduction='none')\n"
        "    nll = nll.view(labels.shape)\n"
        "    picked = (labels != -100).float()\n"
        "    return ((nll * picked).sum(1) / picked.sum(1).clamp_min(1)).sum()\n",
        expect=("sentence", "sum")),
    alt("mlm_loss", "nll_loss on log_softmax, flattened", ML +
        "    return F.nll_loss(F.log_softmax(logits, dim=-1).flatten(0, 1), labels.flatten())\n"),
    alt("mlm_loss", "torch.where masks, gather over the whole batch", ML +
        "    picked = labels != -100\n"
        "    logp = F.log_softmax(logits, dim=-1)\n"
        "    nll = -logp.gather(-1, torch.where(picked, labels, 0)[..., None])[..., 0]\n"
        "    return torch.where(picked, nll, torch.zeros_like(nll)).sum() / picked.sum()\n"),
]

# ----------------------------------------------------------------------------- 07.7 ClsHead
def head(forward: str, init: str = "") -> str:
    init = init or ("        self.pooler = nn.Linear(d_model, d_model)\n"
                    "        self.dropout = nn.Dropout(dropout)\n"
                    "        self.classifier = nn.Linear(d_model, n_classes)\n")
    return ("class ClsHead(nn.Module):\n"
            "    def __init__(self, d_model, n_classes=2, dropout=0.1):\n"
            "        super().__init__()\n" + init + "\n"
            "    def forward(self, hidden):\n" + forward)


HEAD = [
    bug("ClsHead", "dropout on the logits", head(
        "        pooled = torch.tanh(self.pooler(hidden[:, 0]))\n"
        "        return self.dropout(self.classifier(pooled))\n"),
        expect=("on the pooled vector",)),
    bug("ClsHead", "pooler without a bias", head(
        "        pooled = torch.tanh(self.pooler(hidden[:, 0]))\n"
        "        return self.classifier(self.dropout(pooled))\n", init=(
            "        self.pooler = nn.Linear(d_model, d_model, bias=False)\n"
            "        self.dropout = nn.Dropout(dropout)\n"
            "        self.classifier = nn.Linear(d_model, n_classes)\n")),
        expect=("bias", "pooler.bias")),
    bug("ClsHead", "[CLS] kept as a (B, 1, d) slice", head(
        "        pooled = torch.tanh(self.pooler(hidden[:, :1]))\n"
        "        return self.classifier(self.dropout(pooled))\n"), expect=("shape",)),
    bug("ClsHead", "tanh on the logits too", head(
        "        pooled = torch.tanh(self.pooler(hidden[:, 0]))\n"
        "        return torch.tanh(self.classifier(self.dropout(pooled)))\n"),
        mutant="tanh on the logits"),
    bug("ClsHead", "a new nn.Dropout in forward (always training)", head(
        "        pooled = torch.tanh(self.pooler(hidden[:, 0]))\n"
        "        return self.classifier(nn.Dropout(self.dropout.p)(pooled))\n"),
        expect=("eval", "training")),
    bug("ClsHead", "GELU in the pooler", head(
        "        pooled = F.gelu(self.pooler(hidden[:, 0]))\n"
        "        return self.classifier(self.dropout(pooled))\n"), mutant="GELU pooler"),
    bug("ClsHead", "ReLU module in the pooler", head(
        "        return self.classifier(self.dropout(self.act(self.pooler(hidden[:, 0]))))\n", init=(
            "        self.pooler = nn.Linear(d_model, d_model)\n"
            "        self.act = nn.ReLU()\n"
            "        self.dropout = nn.Dropout(dropout)\n"
            "        self.classifier = nn.Linear(d_model, n_classes)\n")), mutant="ReLU pooler"),
    bug("ClsHead", "matmul with the stored pooler weight", head(
        "        h = hidden[:, 0]\n"
        "        pooled = torch.tanh(torch.matmul(h, self.pooler.weight) + self.pooler.bias)\n"
        "        return self.classifier(self.dropout(pooled))\n"),
        mutant="pooler weight not transposed"),
    alt("ClsHead", "narrow and squeeze, Tensor.tanh", head(
        "        h = hidden.narrow(1, 0, 1).squeeze(1)\n"
        "        return self.classifier(self.dropout(self.pooler(h).tanh()))\n")),
    alt("ClsHead", "addmm with the modules' weights", head(
        "        h = hidden.select(1, 0)\n"
        "        pooled = torch.tanh(torch.addmm(self.pooler.bias, h, self.pooler.weight.T))\n"
        "        return self.classifier(self.dropout(pooled))\n")),
]

# ----------------------------------------------------------------------------- 07.8 position_bias
PB = "def position_bias(table, n_q, n_k, bidirectional=True, max_distance=128):\n"
KEY = "    key = torch.arange(n_k)[None, :]\n"
RET = ("    buckets = relative_position_bucket(key - query, bidirectional, table.shape[0], "
       "max_distance)\n    return table[buckets].permute(2, 0, 1)\n")
POSITION_BIAS = [
    bug("position_bias", "queries offset the wrong way", PB +
        "    query = torch.arange(n_q)[:, None] - (n_k - n_q)\n" + KEY + RET,
        expect=("j − (N_k − N_q)",)),
    bug("position_bias", "bidirectional inverted", PB +
        "    query = torch.arange(n_k - n_q, n_k)[:, None]\n" + KEY +
        "    buckets = relative_position_bucket(key - query, not bidirectional, table.shape[0], "
        "max_distance)\n    return table[buckets].permute(2, 0, 1)\n",
        mutant="bidirectional inverted"),
    bug("position_bias", "num_buckets not passed (keyword arguments)", PB +
        "    query = torch.arange(n_k - n_q, n_k)[:, None]\n" + KEY +
        "    buckets = relative_position_bucket(key - query, bidirectional=bidirectional,\n"
        "                                       max_distance=max_distance)\n"
        "    return table[buckets].permute(2, 0, 1)\n", mutant="num_buckets left at its default"),
    bug("position_bias", "distance without its sign", PB +
        "    query = torch.arange(n_k - n_q, n_k)[:, None]\n" + KEY +
        "    buckets = relative_position_bucket((key - query).abs(), bidirectional, "
        "table.shape[0], max_distance)\n    return table[buckets].permute(2, 0, 1)\n",
        expect=("sign", "direction")),
    bug("position_bias", "a float32 buffer filled head by head", PB +
        "    query = torch.arange(n_k - n_q, n_k)[:, None]\n" + KEY +
        "    buckets = relative_position_bucket(key - query, bidirectional, table.shape[0], "
        "max_distance)\n"
        "    out = torch.zeros(table.shape[1], n_q, n_k)\n"
        "    for h in range(table.shape[1]):\n"
        "        out[h] = table[buckets, h]\n"
        "    return out\n", expect=("dtype",), kind="type"),
    bug("position_bias", "max_distance hard-coded to 128", PB +
        "    query = torch.arange(n_k - n_q, n_k)[:, None]\n" + KEY +
        "    buckets = relative_position_bucket(key - query, bidirectional, table.shape[0], 128)\n"
        "    return table[buckets].permute(2, 0, 1)\n", expect=("max_distance on", "its default")),
    alt("position_bias", "table.T indexed by the buckets", PB +
        "    offsets = torch.arange(n_k)[None, :] - torch.arange(n_q)[:, None] - (n_k - n_q)\n"
        "    buckets = relative_position_bucket(offsets, bidirectional, len(table), max_distance)\n"
        "    return table.T[:, buckets]\n"),
    alt("position_bias", "query positions as an offset arange", PB +
        "    query = (torch.arange(n_q) + (n_k - n_q)).unsqueeze(1)\n"
        "    key = torch.arange(n_k).unsqueeze(0)\n"
        "    buckets = relative_position_bucket(key - query, bidirectional=bidirectional,\n"
        "                                       num_buckets=table.shape[0], max_distance=max_distance)\n"
        "    return F.embedding(buckets, table).movedim(-1, 0)\n"),
]

# ----------------------------------------------------------------------------- 07.9 shift_right
SR = "def shift_right(labels, start_id=0, pad_id=0):\n"
SHIFT_RIGHT = [
    bug("shift_right", "start id hard-coded to 0", SR +
        "    shifted = labels.new_zeros(labels.shape)\n"
        "    shifted[:, 1:] = labels[:, :-1]\n"
        "    return shifted.masked_fill(shifted == -100, pad_id)\n",
        expect=("separate arguments", "Position 0 of every row is start_id")),
    bug("shift_right", "overlapping copy within one clone", SR +
        "    shifted = labels.clone()\n"
        "    shifted[:, 1:] = shifted[:, :-1]\n"
        "    shifted[:, 0] = start_id\n"
        "    return shifted.masked_fill(shifted == -100, pad_id)\n",
        expect=("overlap", "memory", "clone")),
    bug("shift_right", "int32 result", SR +
        "    shifted = torch.full(labels.shape, start_id, dtype=torch.int32)\n"
        "    shifted[:, 1:] = labels[:, :-1]\n"
        "    return shifted.masked_fill(shifted == -100, pad_id)\n",
        expect=("torch.int32",), kind="type"),
    bug("shift_right", "start_id and pad_id swapped", SR +
        "    shifted = labels.new_full(labels.shape, pad_id)\n"
        "    shifted[:, 1:] = labels[:, :-1]\n"
        "    return shifted.masked_fill(shifted == -100, start_id)\n",
        mutant="start_id and pad_id swapped"),
    bug("shift_right", "pad_id turned into -100 (the collator's direction)", SR +
        "    shifted = torch.cat([labels.new_full((labels.shape[0], 1), start_id),\n"
        "                         labels[:, :-1]], dim=1)\n"
        "    return shifted.masked_fill(shifted == pad_id, -100)\n",
        expect=("do not replace pad_id by −100",)),
    alt("shift_right", "F.pad with a negative right pad", SR +
        "    shifted = F.pad(labels, (1, -1), value=start_id)\n"
        "    return torch.where(shifted == -100, torch.full_like(shifted, pad_id), shifted)\n"),
    alt("shift_right", "negatives replaced (ids are never negative)", SR +
        "    shifted = torch.cat([torch.full_like(labels[:, :1], start_id), labels[:, :-1]], dim=1)\n"
        "    shifted[shifted < 0] = pad_id\n"
        "    return shifted\n"),
]

# ----------------------------------------------------------------------------- 07.10 span_corruption
SC = "def span_corruption(ids, noise_mask, sentinels):\n"
LOOP = ("    inputs, targets, k = [], [], 0\n"
        "    for i in range(len(ids)):\n"
        "        if not noise_mask[i]:\n"
        "            inputs.append(int(ids[i]))\n"
        "            continue\n"
        "        if i == 0 or not noise_mask[i - 1]:\n"
        "            inputs.append(int(sentinels[k]))\n"
        "            targets.append(int(sentinels[k]))\n"
        "            k += 1\n"
        "        targets.append(int(ids[i]))\n")
SPAN = [
    bug("span_corruption", "torch.Tensor (float32) returned", SC + LOOP +
        "    if not noise_mask[-1]:\n"
        "        targets.append(int(sentinels[k]))\n"
        "    return torch.Tensor(inputs), torch.Tensor(targets)\n",
        expect=("dtype", "long"), kind="type"),
    bug("span_corruption", "closing sentinel tested with `is False`", SC + LOOP +
        "    if noise_mask[-1] is False:\n"
        "        targets.append(int(sentinels[k]))\n"
        "    return torch.tensor(inputs), torch.tensor(targets)\n",
        expect=("final sentinel", "one more sentinel")),
    bug("span_corruption", "closing sentinel appended to the input too", SC + LOOP +
        "    if not noise_mask[-1]:\n"
        "        targets.append(int(sentinels[k]))\n"
        "        inputs.append(int(sentinels[k]))\n"
        "    return torch.tensor(inputs), torch.tensor(targets)\n",
        mutant="final sentinel in the input too"),
    bug("span_corruption", "outputs returned as (target, input)", SC + LOOP +
        "    if not noise_mask[-1]:\n"
        "        targets.append(int(sentinels[k]))\n"
        "    return torch.tensor(targets), torch.tensor(inputs)\n", mutant="input and target swapped"),
    bug("span_corruption", "closing sentinel: sentinels[k - 1]", SC + LOOP +
        "    if not noise_mask[-1]:\n"
        "        targets.append(int(sentinels[k - 1 if k else 0]))\n"
        "    return torch.tensor(inputs), torch.tensor(targets)\n",
        mutant="final sentinel repeats the last span's"),
    bug("span_corruption", "target writes the whole text (BERT-style)", SC +
        "    inputs, targets, k = [], [], 0\n"
        "    for i in range(len(ids)):\n"
        "        if noise_mask[i] and (i == 0 or not noise_mask[i - 1]):\n"
        "            inputs.append(int(sentinels[k]))\n"
        "            targets.append(int(sentinels[k]))\n"
        "            k += 1\n"
        "        if not noise_mask[i]:\n"
        "            inputs.append(int(ids[i]))\n"
        "        targets.append(int(ids[i]))\n"
        "    if not noise_mask[-1]:\n"
        "        targets.append(int(sentinels[k]))\n"
        "    return torch.tensor(inputs), torch.tensor(targets)\n",
        expect=("only the dropped", "dropped spans only")),
    alt("span_corruption", "vectorised with roll and cumsum", SC +
        "    starts = noise_mask & ~noise_mask.roll(1)\n"
        "    span = starts.cumsum(0) - 1\n"
        "    keep_in = ~noise_mask | starts\n"
        "    inputs = torch.where(starts, sentinels[span.clamp_min(0)], ids)[keep_in]\n"
        "    per_token = torch.stack([sentinels[span.clamp_min(0)], ids], 1)\n"
        "    flags = torch.stack([starts, noise_mask], 1)\n"
        "    targets = per_token[flags]\n"
        "    if not noise_mask[-1]:\n"
        "        targets = torch.cat([targets, sentinels[int(starts.sum()):int(starts.sum()) + 1]])\n"
        "    return inputs.long(), targets.long()\n"),
    alt("span_corruption", "torch.cat of pieces, span by span", SC +
        "    ins, outs, k, i, n = [], [], 0, 0, len(ids)\n"
        "    while i < n:\n"
        "        if not bool(noise_mask[i]):\n"
        "            ins.append(ids[i:i + 1])\n"
        "            i += 1\n"
        "            continue\n"
        "        j = i\n"
        "        while j < n and bool(noise_mask[j]):\n"
        "            j += 1\n"
        "        s = sentinels[k:k + 1]\n"
        "        ins.append(s)\n"
        "        outs += [s, ids[i:j]]\n"
        "        k, i = k + 1, j\n"
        "    if not bool(noise_mask[-1]):\n"
        "        outs.append(sentinels[k:k + 1])\n"
        "    return torch.cat(ins).long(), torch.cat(outs).long()\n"),
]

# ----------------------------------------------------------------------------- 07.11 rms_norm
RN = "def rms_norm(x, weight, eps=1e-6):\n"
RMS = [
    bug("rms_norm", "one mean square for the whole tensor", RN +
        "    return x * torch.rsqrt(x.pow(2).mean() + eps) * weight\n",
        expect=("each token", "per token", "last axis")),
    bug("rms_norm", "clamped instead of eps added", RN +
        "    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True).clamp_min(eps)) * weight\n",
        expect=("clamp", "`eps`")),
    bug("rms_norm", "eps hard-coded to 1e-5 (LayerNorm's default)", RN +
        "    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-5) * weight\n",
        expect=("eps argument", "`eps`", "fixed ε", "hard-coded")),
    bug("rms_norm", "weight applied before the normalisation", RN +
        "    y = x * weight\n"
        "    return y * torch.rsqrt(y.pow(2).mean(dim=-1, keepdim=True) + eps)\n",
        expect=("before the normalis", "after normalising")),
    bug("rms_norm", "mean absolute value", RN +
        "    return x / (x.abs().mean(dim=-1, keepdim=True) + eps) * weight\n",
        expect=("square",)),
    bug("rms_norm", "mean over the first axis", RN +
        "    return x * torch.rsqrt(x.pow(2).mean(dim=0, keepdim=True) + eps) * weight\n",
        expect=("axis", "last axis", "features")),
    bug("rms_norm", "torch's LayerNorm formula without its affine", RN +
        "    centred = x - x.mean(-1, keepdim=True)\n"
        "    return centred / torch.sqrt(torch.var(x, dim=-1, keepdim=True) + eps) * weight\n",
        mutant="mean subtracted, unbiased variance"),
    bug("rms_norm", "γ cast to float32", RN +
        "    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()\n",
        expect=("dtype",), kind="type"),
    alt("rms_norm", "eps added to every square before the mean", RN +
        "    return x / torch.sqrt((x * x + eps).mean(-1, keepdim=True)) * weight\n"),
    alt("rms_norm", "Hugging Face's: float32 inside, cast back", RN +
        "    h = x.float()\n"
        "    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)\n"
        "    return weight * h.to(x.dtype)\n"),
]

# ----------------------------------------------------------------------------- 07.12 SwiGLU
def swiglu(forward: str, init: str = "") -> str:
    init = init or ("        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)\n"
                    "        self.up_proj = nn.Linear(d_model, d_ff, bias=False)\n"
                    "        self.down_proj = nn.Linear(d_ff, d_model, bias=False)\n")
    return ("class SwiGLU(nn.Module):\n"
            "    def __init__(self, d_model, d_ff):\n"
            "        super().__init__()\n" + init + "\n"
            "    def forward(self, x):\n" + forward)


SWIGLU = [
    bug("SwiGLU", "sigmoid computed in float32", swiglu(
        "        g = self.gate_proj(x)\n"
        "        return self.down_proj(g * torch.sigmoid(g.float()) * self.up_proj(x))\n"),
        expect=("dtype",), kind="type"),
    bug("SwiGLU", "down_proj's shape transposed", swiglu(
        "        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))\n", init=(
            "        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)\n"
            "        self.up_proj = nn.Linear(d_model, d_ff, bias=False)\n"
            "        self.down_proj = nn.Linear(d_model, d_ff, bias=False)\n")),
        expect=("shape",)),
    bug("SwiGLU", "gate and up fused into one layer", swiglu(
        "        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)\n"
        "        return self.down_proj(F.silu(gate) * up)\n", init=(
            "        self.gate_up_proj = nn.Linear(d_model, 2 * d_ff, bias=False)\n"
            "        self.down_proj = nn.Linear(d_ff, d_model, bias=False)\n")),
        expect=("parameter",)),
    bug("SwiGLU", "x·σ(1.702x), GELU's approximation", swiglu(
        "        g = self.gate_proj(x)\n"
        "        return self.down_proj(g * torch.sigmoid(1.702 * g) * self.up_proj(x))\n"),
        mutant="sigmoid-approximate GELU gate"),
    bug("SwiGLU", "F.gelu(approximate='tanh') via a module", swiglu(
        "        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))\n", init=(
            "        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)\n"
            "        self.up_proj = nn.Linear(d_model, d_ff, bias=False)\n"
            "        self.down_proj = nn.Linear(d_ff, d_model, bias=False)\n"
            "        self.act = nn.GELU(approximate='tanh')\n")),
        mutant="tanh-approximate GELU gate"),
    bug("SwiGLU", "gate added to the up branch", swiglu(
        "        h = F.silu(self.gate_proj(x))\n"
        "        h = h + self.up_proj(x)\n"
        "        return self.down_proj(h)\n"), mutant="branches added"),
    bug("SwiGLU", "d_ff hard-coded to 4 d_model", swiglu(
        "        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))\n", init=(
            "        self.gate_proj = nn.Linear(d_model, 4 * d_model, bias=False)\n"
            "        self.up_proj = nn.Linear(d_model, 4 * d_model, bias=False)\n"
            "        self.down_proj = nn.Linear(4 * d_model, d_model, bias=False)\n")),
        expect=("shape",)),
    alt("SwiGLU", "x / (1 + exp(-x))", swiglu(
        "        g = self.gate_proj(x)\n"
        "        return self.down_proj(g / (1 + torch.exp(-g)) * self.up_proj(x))\n")),
    alt("SwiGLU", "F.linear with the weights, .mul", swiglu(
        "        g = F.silu(F.linear(x, self.gate_proj.weight))\n"
        "        return F.linear(g.mul(F.linear(x, self.up_proj.weight)), self.down_proj.weight)\n")),
]

# ----------------------------------------------------------------------------- 07.13 grouped_query_attention
GQ = "def grouped_query_attention(q, k, v, mask=None):\n"
GROUP = "    group = q.shape[1] // k.shape[1]\n"
GQA = [
    bug("grouped_query_attention", "one max for the whole batch, softmax by hand", GQ + GROUP +
        "    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)\n"
        "    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
        "    if mask is not None:\n"
        "        s = s.masked_fill(~mask, float('-inf'))\n"
        "    e = torch.exp(s - s.max())\n"
        "    w = e / e.sum(-1, keepdim=True)\n"
        "    return w @ v, w\n", expect=("row's maximum",)),
    bug("grouped_query_attention", "heads tiled with torch.cat", GQ + GROUP +
        "    k, v = torch.cat([k] * group, dim=1), torch.cat([v] * group, dim=1)\n"
        "    return scaled_dot_product_attention(q, k, v, mask)\n",
        expect=("tile", "consecutive")),
    bug("grouped_query_attention", "group hard-coded to 2", GQ +
        "    k, v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)\n"
        "    return scaled_dot_product_attention(q, k, v, mask)\n",
        mutant="group size fixed at 2"),
    bug("grouped_query_attention", "q split into (B, g, H_kv) groups", GQ + GROUP +
        "    B, H, N, d = q.shape\n"
        "    s = q.view(B, group, H // group, N, d) @ k[:, None].transpose(-2, -1) / math.sqrt(d)\n"
        "    if mask is not None:\n"
        "        s = s.masked_fill(~mask, float('-inf'))\n"
        "    w = torch.softmax(s, dim=-1)\n"
        "    return (w @ v[:, None]).reshape(B, H, N, -1), w.reshape(B, H, N, -1)\n",
        mutant="queries grouped as (B, H / H_kv, H_kv, ...)"),
    bug("grouped_query_attention", "scaled by √d_v", GQ + GROUP +
        "    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)\n"
        "    s = q @ k.transpose(-2, -1) / math.sqrt(v.shape[-1])\n"
        "    if mask is not None:\n"
        "        s = s.masked_fill(~mask, float('-inf'))\n"
        "    w = s.softmax(-1)\n"
        "    return w @ v, w\n", expect=("values'",)),
    bug("grouped_query_attention", "d_k taken from the repeated width", GQ + GROUP +
        "    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)\n"
        "    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1] * group)\n"
        "    if mask is not None:\n"
        "        s = s.masked_fill(~mask, float('-inf'))\n"
        "    w = s.softmax(-1)\n"
        "    return w @ v, w\n", mutant="scaled by √(d_k · group)"),
    bug("grouped_query_attention", "mask read as True = blocked", GQ + GROUP +
        "    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)\n"
        "    return scaled_dot_product_attention(q, k, v, None if mask is None else ~mask)\n",
        expect=("True = may attend", "inverted")),
    bug("grouped_query_attention", "K/V heads expanded on a new leading axis (tiled)", GQ + GROUP +
        "    B, Hkv, N, d = k.shape\n"
        "    k = k[:, None].expand(B, group, Hkv, N, d).reshape(B, group * Hkv, N, d)\n"
        "    v = v[:, None].expand(B, group, Hkv, N, v.shape[-1]).reshape(B, group * Hkv, N, -1)\n"
        "    return scaled_dot_product_attention(q, k, v, mask)\n",
        expect=("tile", "consecutive")),
    alt("grouped_query_attention", "index_select with h // group", GQ + GROUP +
        "    heads = torch.arange(q.shape[1]) // group\n"
        "    k, v = k.index_select(1, heads), v.index_select(1, heads)\n"
        "    return scaled_dot_product_attention(q, k, v, mask)\n"),
    alt("grouped_query_attention", "softmax by hand, a max per row", GQ + GROUP +
        "    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)\n"
        "    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
        "    if mask is not None:\n"
        "        s = s.masked_fill(~mask, float('-inf'))\n"
        "    w = torch.softmax(s, dim=-1)\n"
        "    return w @ v, w\n"),
]

VARIANTS = [*MERGE, *NEXT, *TOP_P, *DPO, *MASK, *MLM, *HEAD, *POSITION_BIAS, *SHIFT_RIGHT,
            *SPAN, *RMS, *SWIGLU, *GQA]
