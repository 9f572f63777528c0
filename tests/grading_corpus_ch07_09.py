'''A corpus of plausible student code for the exercises of Chapters 7–9 (07.1 merge_pair to 09.3
nf4_code_book), in the form of ``tests/grading_corpus.py``: one bug per suite mutant, bugs the
mutants did not foresee (arguments ignored, gradients cut, state left wrong after a call, random
draws that are wrong in what they draw, boundary inputs, plain slips), and correct alternatives.

Each bug's ``expect`` was written from the bug itself, before looking at what the grader says.
'''

from __future__ import annotations

from grading_corpus import INPLACE, alt, bug


def sub(source: str, *pairs: tuple[str, str]) -> str:
    """``source`` with each (old, new) replaced; every ``old`` must be there."""
    for old, new in pairs:
        assert old in source, old
        source = source.replace(old, new)
    return source


# ----------------------------------------------------------------------------- 07.1 merge_pair
MP = "def merge_pair(ids, pair, new_id):\n"
MP_LOOP = MP + '''    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out
'''
MERGE = [
    bug("merge_pair", "returns after the first merge", MP +
        "    for i in range(len(ids) - 1):\n"
        "        if ids[i] == pair[0] and ids[i + 1] == pair[1]:\n"
        "            return ids[:i] + [new_id] + ids[i + 2:]\n"
        "    return list(ids)\n", mutant="only the first occurrence"),
    bug("merge_pair", "i += 1 after a merge", sub(MP_LOOP, ("            i += 2\n",
                                                           "            i += 1\n")),
        mutant="steps by one after a merge"),
    bug("merge_pair", "while i < len(ids) - 1", MP +
        "    out, i = [], 0\n    while i < len(ids) - 1:\n"
        "        if ids[i] == pair[0] and ids[i + 1] == pair[1]:\n"
        "            out.append(new_id)\n            i += 2\n"
        "        else:\n            out.append(ids[i])\n            i += 1\n    return out\n",
        mutant="drops the last token"),
    bug("merge_pair", "scans from the end", MP +
        "    out, i = [], len(ids) - 1\n    while i >= 0:\n"
        "        if i > 0 and ids[i - 1] == pair[0] and ids[i] == pair[1]:\n"
        "            out.insert(0, new_id)\n            i -= 2\n"
        "        else:\n            out.insert(0, ids[i])\n            i -= 1\n    return out\n",
        mutant="scans right to left"),
    bug("merge_pair", "either order matches", sub(MP_LOOP, (
        "ids[i] == pair[0] and ids[i + 1] == pair[1]",
        "(ids[i], ids[i + 1]) in (tuple(pair), tuple(pair)[::-1])")), mutant="unordered pair"),
    # unforeseen
    bug("merge_pair", "slice assignment on the caller's list", MP +
        "    i = 0\n    while i < len(ids) - 1:\n"
        "        if ids[i] == pair[0] and ids[i + 1] == pair[1]:\n"
        "            ids[i:i + 2] = [new_id]\n        i += 1\n    return ids\n",
        expect=INPLACE, kind="in-place"),
    bug("merge_pair", "ids.pop on the caller's list", MP +
        "    i = 0\n    while i < len(ids) - 1:\n"
        "        if (ids[i], ids[i + 1]) == tuple(pair):\n"
        "            ids[i] = new_id\n            ids.pop(i + 1)\n        i += 1\n    return ids\n",
        expect=INPLACE, kind="in-place"),
    bug("merge_pair", "string join and replace (merges across multi-digit ids)", MP +
        "    text = ' '.join(str(i) for i in ids)\n"
        "    text = text.replace(f'{pair[0]} {pair[1]}', str(new_id))\n"
        "    return [int(t) for t in text.split()]\n",
        expect=("digit", "string", "boundar"), kind="boundary"),
    bug("merge_pair", "unique_consecutive collapses real repeats", MP +
        "    t = torch.tensor(ids)\n"
        "    hit = torch.zeros(len(ids), dtype=torch.bool)\n"
        "    hit[:-1] = (t[:-1] == pair[0]) & (t[1:] == pair[1])\n"
        "    t = torch.where(hit | hit.roll(1), torch.tensor(new_id), t)\n"
        "    return torch.unique_consecutive(t).tolist()\n",
        expect=("repeat", "consecutive", "collapse"), kind="boundary"),
    bug("merge_pair", "new_id assumed to be max(ids) + 1", sub(MP_LOOP, (
        "out.append(new_id)", "out.append(max(ids) + 1)")), expect=("new_id",), kind="argument"),
    bug("merge_pair", "no bounds check on ids[i + 1]", sub(MP_LOOP, (
        "if i + 1 < len(ids) and ids[i] == pair[0]", "if ids[i] == pair[0]")),
        expect=("last token", "bounds"), kind="boundary"),
    bug("merge_pair", "pair compared as a list", sub(MP_LOOP, (
        "ids[i] == pair[0] and ids[i + 1] == pair[1]", "ids[i:i + 2] == pair")),
        expect=("tuple", "list"), kind="type"),
    alt("merge_pair", "GPT-2's index scan", MP +
        "    first, second = pair\n    out, i = [], 0\n    while i < len(ids):\n"
        "        try:\n            j = ids.index(first, i)\n        except ValueError:\n"
        "            out.extend(ids[i:])\n            break\n"
        "        out.extend(ids[i:j])\n        i = j\n"
        "        if i + 1 < len(ids) and ids[i + 1] == second:\n"
        "            out.append(new_id)\n            i += 2\n"
        "        else:\n            out.append(ids[i])\n            i += 1\n    return out\n"),
    alt("merge_pair", "for loop with a skip flag", MP +
        "    out, skip = [], False\n    for i, t in enumerate(ids):\n"
        "        if skip:\n            skip = False\n            continue\n"
        "        if i + 1 < len(ids) and (t, ids[i + 1]) == tuple(pair):\n"
        "            out.append(new_id)\n            skip = True\n"
        "        else:\n            out.append(t)\n    return out\n"),
    alt("merge_pair", "slice assignment on a copy", MP +
        "    ids = list(ids)\n    i = 0\n    while i < len(ids) - 1:\n"
        "        if ids[i] == pair[0] and ids[i + 1] == pair[1]:\n"
        "            ids[i:i + 2] = [new_id]\n        i += 1\n    return ids\n", kind="state"),
]

# ----------------------------------------------------------------------------- 07.3 top_p_filter
TP = "def top_p_filter(logits, p):\n"
TP_BODY = TP + '''    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    cum = probs.cumsum(dim=-1)
    remove = cum - probs >= p
    remove[..., 0] = False
    remove = remove.scatter(-1, order, remove)
    return logits.masked_fill(remove, float('-inf'))
'''
TOP_P = [
    bug("top_p_filter", "cum > p", sub(TP_BODY, ("cum - probs >= p", "cum > p"),
                                       ("    remove[..., 0] = False\n", "")),
        mutant="drops the token that crosses p"),
    bug("top_p_filter", "sorted logits returned", sub(TP_BODY, (
        "    remove = remove.scatter(-1, order, remove)\n"
        "    return logits.masked_fill(remove, float('-inf'))\n",
        "    return sorted_logits.masked_fill(remove, float('-inf'))\n")),
        mutant="returns the sorted logits"),
    bug("top_p_filter", "filled with 0", sub(TP_BODY, ("float('-inf')", "0.0")),
        mutant="zero instead of -inf"),
    bug("top_p_filter", "probabilities returned", sub(TP_BODY, (
        "return logits.masked_fill(remove, float('-inf'))",
        "return logits.softmax(dim=-1).masked_fill(remove, 0.0)")),
        mutant="returns probabilities"),
    bug("top_p_filter", "ascending sort", sub(TP_BODY, ("descending=True", "descending=False")),
        mutant="ascending sort"),
    # unforeseen
    bug("top_p_filter", "softmax by hand, no max subtracted", sub(TP_BODY, (
        "probs = sorted_logits.softmax(dim=-1)",
        "probs = sorted_logits.exp() / sorted_logits.exp().sum(dim=-1, keepdim=True)")),
        expect=("overflow", "stable"), kind="boundary"),
    bug("top_p_filter", "p hard-coded to 0.9", sub(TP_BODY, ("cum - probs >= p", "cum - probs >= 0.9")),
        expect=("`p`", "argument"), kind="argument"),
    bug("top_p_filter", "gather instead of scatter", sub(TP_BODY, (
        "remove.scatter(-1, order, remove)", "remove.gather(-1, order)")),
        expect=("scatter", "vocabulary order"), kind="logic"),
    bug("top_p_filter", "-inf written into the caller's logits", sub(TP_BODY, (
        "    return logits.masked_fill(remove, float('-inf'))\n",
        "    logits[remove] = float('-inf')\n    return logits\n")),
        expect=INPLACE, kind="in-place"),
    bug("top_p_filter", "dim=1 (2-D logits only)", sub(TP_BODY, (
        "dim=-1, descending", "dim=1, descending"), ("softmax(dim=-1)", "softmax(dim=1)"),
        ("cumsum(dim=-1)", "cumsum(dim=1)"), ("remove[..., 0]", "remove[:, 0]"),
        ("scatter(-1,", "scatter(1,")), expect=("last axis",), kind="boundary"),
    bug("top_p_filter", "the whole batch as one distribution", TP +
        "    flat = logits.reshape(-1)\n"
        "    sorted_logits, order = flat.sort(descending=True)\n"
        "    probs = sorted_logits.softmax(-1)\n"
        "    remove = probs.cumsum(-1) - probs >= p\n    remove[0] = False\n"
        "    remove = remove.scatter(0, order, remove)\n"
        "    return logits.masked_fill(remove.view(logits.shape), float('-inf'))\n",
        expect=("last axis", "each row"), kind="boundary"),
    bug("top_p_filter", "threshold on the probability keeps every tie", TP +
        "    probs = logits.softmax(dim=-1)\n"
        "    sorted_probs = probs.sort(dim=-1, descending=True).values\n"
        "    before = sorted_probs.cumsum(dim=-1) - sorted_probs\n"
        "    n_keep = (before < p).sum(dim=-1, keepdim=True).clamp(min=1)\n"
        "    threshold = sorted_probs.gather(-1, n_keep - 1)\n"
        "    return logits.masked_fill(probs < threshold, float('-inf'))\n",
        expect=("tie",), kind="boundary"),
    alt("top_p_filter", "Hugging Face's ascending sort", TP +
        "    sorted_logits, order = torch.sort(logits, descending=False)\n"
        "    cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)\n"
        "    remove = cum <= (1 - p)\n    remove[..., -1] = False\n"
        "    remove = remove.scatter(-1, order, remove)\n"
        "    return logits.masked_fill(remove, -float('inf'))\n"),
    alt("top_p_filter", "mask shifted right (older transformers)", TP +
        "    sorted_logits, order = torch.sort(logits, descending=True)\n"
        "    cum = F.softmax(sorted_logits, dim=-1).cumsum(dim=-1)\n"
        "    remove = cum > p\n"
        "    remove[..., 1:] = remove[..., :-1].clone()\n    remove[..., 0] = False\n"
        "    remove = remove.scatter(-1, order, remove)\n"
        "    return logits.masked_fill(remove, float('-inf'))\n"),
    alt("top_p_filter", "gather with the inverse permutation, torch.where", TP +
        "    order = logits.argsort(dim=-1, descending=True)\n"
        "    probs = logits.softmax(dim=-1).gather(-1, order)\n"
        "    keep_sorted = probs.cumsum(dim=-1) - probs < p\n"
        "    keep_sorted[..., 0] = True\n"
        "    keep = keep_sorted.gather(-1, order.argsort(dim=-1))\n"
        "    return torch.where(keep, logits, torch.full_like(logits, float('-inf')))\n"),
]

# ----------------------------------------------------------------------------- 07.5 mask_tokens
MT = "def mask_tokens(ids, special, mask_id, vocab_size, generator=None, p=0.15):\n"
MT_BODY = MT + '''    picked = (torch.rand(ids.shape, generator=generator) < p) & ~special
    labels = torch.where(picked, ids, -100)
    draw = torch.rand(ids.shape, generator=generator)
    random_ids = torch.randint(vocab_size, ids.shape, generator=generator)
    inputs = torch.where(picked & (draw < 0.8), mask_id, ids)
    inputs = torch.where(picked & (draw >= 0.8) & (draw < 0.9), random_ids, inputs)
    return inputs, labels
'''
# the three-way split as two draws: [MASK] first, then half of the rest random
MT_TWO = MT + '''    picked = (torch.rand(ids.shape, generator=generator) < p) & ~special
    labels = torch.where(picked, ids, -100)
    to_mask = picked & (torch.rand(ids.shape, generator=generator) < 0.8)
    to_random = picked & ~to_mask & (torch.rand(ids.shape, generator=generator) < 0.5)
    random_ids = torch.randint(vocab_size, ids.shape, generator=generator)
    inputs = torch.where(to_mask, mask_id, ids)
    inputs = torch.where(to_random, random_ids, inputs)
    return inputs, labels
'''
MASK = [
    bug("mask_tokens", "every picked position [MASK]", MT +
        "    picked = (torch.rand(ids.shape, generator=generator) < p) & ~special\n"
        "    return torch.where(picked, mask_id, ids), torch.where(picked, ids, -100)\n",
        mutant="every picked position becomes [MASK]"),
    bug("mask_tokens", "labels = ids.clone()", sub(MT_BODY, (
        "labels = torch.where(picked, ids, -100)", "labels = ids.clone()")),
        mutant="labels everywhere"),
    bug("mask_tokens", "labels -100 at the picked positions", sub(MT_BODY, (
        "labels = torch.where(picked, ids, -100)", "labels = torch.where(picked, -100, ids)")),
        mutant="labels inverted"),
    bug("mask_tokens", "labels taken from the corrupted inputs", sub(MT_BODY, (
        "    labels = torch.where(picked, ids, -100)\n", ""), (
        "    return inputs, labels\n",
        "    return inputs, torch.where(picked, inputs, -100)\n")),
        mutant="labels are the corrupted inputs"),
    bug("mask_tokens", "special positions not excluded", sub(MT_BODY, (" & ~special", "")),
        mutant="special positions can be picked"),
    bug("mask_tokens", "0.15 where 0.8 belongs", sub(MT_TWO, ("< 0.8)", "< 0.15)")),
        mutant="the 15 % used where the 80 % belongs"),
    bug("mask_tokens", "10 % of the rest random", sub(MT_TWO, ("< 0.5)", "< 0.1)")),
        mutant="10 % random of all picked, not of the rest"),
    bug("mask_tokens", "80/10/10 over every non-special position", sub(MT_BODY, (
        "inputs = torch.where(picked & (draw < 0.8)", "inputs = torch.where(~special & (draw < 0.8)"), (
        "torch.where(picked & (draw >= 0.8)", "torch.where(~special & (draw >= 0.8)")),
        mutant="80/10/10 over every position"),
    bug("mask_tokens", "0.15 instead of p", sub(MT_BODY, (
        "generator=generator) < p)", "generator=generator) < 0.15)")), mutant="p hard-coded"),
    bug("mask_tokens", "[MASK] id written as 5", sub(MT_BODY, (
        "picked & (draw < 0.8), mask_id, ids", "picked & (draw < 0.8), 5, ids")),
        mutant="[MASK] id hard-coded"),
    # unforeseen
    bug("mask_tokens", "generator ignored (global RNG)", MT_BODY.replace(
        ", generator=generator)", ")"), expect=("generator",), kind="random"),
    bug("mask_tokens", "a generator of its own, seeded 0", sub(MT_BODY, (
        "    picked =", "    generator = torch.Generator().manual_seed(0)\n    picked =")),
        expect=("generator",), kind="random"),
    bug("mask_tokens", "one replacement id for every position", sub(MT_BODY, (
        "random_ids = torch.randint(vocab_size, ids.shape, generator=generator)",
        "random_ids = torch.randint(vocab_size, (1,), generator=generator).item()")),
        expect=("uniform", "same id", "one id"), kind="random"),
    bug("mask_tokens", "replacement ids drawn from the batch", sub(MT_BODY, (
        "random_ids = torch.randint(vocab_size, ids.shape, generator=generator)",
        "random_ids = ids.flatten()[torch.randint(ids.numel(), ids.shape, "
        "generator=generator)]")), expect=("uniform", "vocab_size"), kind="random"),
    bug("mask_tokens", "replacements drawn below mask_id", sub(MT_BODY, (
        "torch.randint(vocab_size, ids.shape", "torch.randint(mask_id, ids.shape")),
        expect=("vocab_size", "uniform"), kind="random"),
    bug("mask_tokens", "replacements only above [MASK] (no special ids)", sub(MT_BODY, (
        "torch.randint(vocab_size, ids.shape", "torch.randint(mask_id + 1, vocab_size, ids.shape")),
        expect=("vocab_size", "uniform", "all"), kind="random"),
    bug("mask_tokens", "[MASK] written into the caller's ids", MT +
        "    picked = (torch.rand(ids.shape, generator=generator) < p) & ~special\n"
        "    labels = ids.clone()\n    labels[~picked] = -100\n"
        "    draw = torch.rand(ids.shape, generator=generator)\n"
        "    random_ids = torch.randint(vocab_size, ids.shape, generator=generator)\n"
        "    inputs = ids\n    inputs[picked & (draw < 0.8)] = mask_id\n"
        "    swap = picked & (draw >= 0.8) & (draw < 0.9)\n"
        "    inputs[swap] = random_ids[swap]\n    return inputs, labels\n",
        expect=INPLACE, kind="in-place"),
    bug("mask_tokens", "[MASK] and random drawn independently (random overwrites [MASK])", MT +
        "    picked = (torch.rand(ids.shape, generator=generator) < p) & ~special\n"
        "    labels = torch.where(picked, ids, -100)\n"
        "    to_mask = picked & (torch.rand(ids.shape, generator=generator) < 0.8)\n"
        "    to_random = picked & (torch.rand(ids.shape, generator=generator) < 0.1)\n"
        "    random_ids = torch.randint(vocab_size, ids.shape, generator=generator)\n"
        "    inputs = torch.where(to_mask, mask_id, ids)\n"
        "    inputs = torch.where(to_random, random_ids, inputs)\n    return inputs, labels\n",
        expect=("independent", "overlap", "of the rest"), kind="logic"),
    bug("mask_tokens", "specials left out of the labels but still corrupted", MT +
        "    picked = torch.rand(ids.shape, generator=generator) < p\n"
        "    labels = torch.where(picked & ~special, ids, -100)\n"
        "    draw = torch.rand(ids.shape, generator=generator)\n"
        "    random_ids = torch.randint(vocab_size, ids.shape, generator=generator)\n"
        "    inputs = torch.where(picked & (draw < 0.8), mask_id, ids)\n"
        "    inputs = torch.where(picked & (draw >= 0.8) & (draw < 0.9), random_ids, inputs)\n"
        "    return inputs, labels\n", expect=("special",), kind="logic"),
    alt("mask_tokens", "Hugging Face's bernoulli draws", MT +
        "    probability = torch.full(ids.shape, p)\n"
        "    probability = probability.masked_fill(special, 0.0)\n"
        "    picked = torch.bernoulli(probability, generator=generator).bool()\n"
        "    labels = ids.masked_fill(~picked, -100)\n"
        "    replaced = torch.bernoulli(torch.full(ids.shape, 0.8), generator=generator).bool()"
        " & picked\n"
        "    inputs = ids.masked_fill(replaced, mask_id)\n"
        "    randomized = torch.bernoulli(torch.full(ids.shape, 0.5), generator=generator).bool()"
        " & picked & ~replaced\n"
        "    words = torch.randint(vocab_size, ids.shape, dtype=torch.long, generator=generator)\n"
        "    inputs[randomized] = words[randomized]\n    return inputs, labels\n", kind="random"),
    alt("mask_tokens", "clone, index-assign, draw only what is needed", MT +
        "    inputs, labels = ids.clone(), ids.clone()\n"
        "    picked = ~special & (torch.rand(ids.shape, generator=generator) < p)\n"
        "    labels[~picked] = -100\n"
        "    u = torch.rand(ids.shape, generator=generator)\n"
        "    inputs[picked & (u < 0.8)] = mask_id\n"
        "    swap = picked & (u >= 0.9)\n"
        "    inputs[swap] = torch.randint(0, vocab_size, (int(swap.sum()),), generator=generator)\n"
        "    return inputs, labels\n", kind="random"),
    alt("mask_tokens", "multinomial over the three actions", MT +
        "    picked = (torch.rand(ids.shape, generator=generator) < p) & ~special\n"
        "    action = torch.multinomial(torch.tensor([0.8, 0.1, 0.1]), ids.numel(),\n"
        "                               replacement=True, generator=generator).view(ids.shape)\n"
        "    random_ids = torch.randint(vocab_size, ids.shape, generator=generator)\n"
        "    inputs = torch.where(picked & (action == 0), mask_id, ids)\n"
        "    inputs = torch.where(picked & (action == 1), random_ids, inputs)\n"
        "    return inputs, torch.where(picked, ids, torch.full_like(ids, -100))\n", kind="random"),
]

# ----------------------------------------------------------------------------- 07.10 span_corruption
SC = "def span_corruption(ids, noise_mask, sentinels):\n"
SC_BODY = SC + '''    inputs, targets, k = [], [], 0
    for i in range(len(ids)):
        if not noise_mask[i]:
            inputs.append(int(ids[i]))
            continue
        if i == 0 or not noise_mask[i - 1]:
            inputs.append(int(sentinels[k]))
            targets.append(int(sentinels[k]))
            k += 1
        targets.append(int(ids[i]))
    if len(ids) and not noise_mask[-1]:
        targets.append(int(sentinels[k]))
    return torch.tensor(inputs, dtype=torch.long), torch.tensor(targets, dtype=torch.long)
'''
# a version that keeps the sentinel it emitted, for the "after its span" slip
SC_AFTER = SC + '''    inputs, targets, k = [], [], 0
    for i in range(len(ids)):
        if not noise_mask[i]:
            inputs.append(int(ids[i]))
            continue
        if i == 0 or not noise_mask[i - 1]:
            inputs.append(int(sentinels[k]))
            k += 1
        targets.append(int(ids[i]))
        if i + 1 == len(ids) or not noise_mask[i + 1]:
            targets.append(int(sentinels[k - 1]))
    if len(ids) and not noise_mask[-1]:
        targets.append(int(sentinels[k]))
    return torch.tensor(inputs, dtype=torch.long), torch.tensor(targets, dtype=torch.long)
'''
SPAN = [
    bug("span_corruption", "sentinels[0] for every span", SC_BODY.replace("sentinels[k]",
                                                                          "sentinels[0]"),
        mutant="the same sentinel for every span"),
    bug("span_corruption", "a sentinel for every dropped token", sub(SC_BODY, (
        "        if i == 0 or not noise_mask[i - 1]:\n"
        "            inputs.append(int(sentinels[k]))\n"
        "            targets.append(int(sentinels[k]))\n            k += 1\n",
        "        inputs.append(int(sentinels[k]))\n"
        "        targets.append(int(sentinels[k]))\n        k += 1\n")),
        mutant="one sentinel per dropped token"),
    bug("span_corruption", "no closing sentinel", sub(SC_BODY, (
        "    if len(ids) and not noise_mask[-1]:\n        targets.append(int(sentinels[k]))\n", "")),
        mutant="no final sentinel in the target"),
    bug("span_corruption", "closing sentinel always", sub(SC_BODY, (
        "    if len(ids) and not noise_mask[-1]:\n        targets.append(int(sentinels[k]))\n",
        "    targets.append(int(sentinels[k]))\n")),
        mutant="a final sentinel even after a trailing span"),
    bug("span_corruption", "sentinel after the span", SC_AFTER,
        mutant="sentinel after its span in the target"),
    bug("span_corruption", "dropped tokens kept in the input", sub(SC_BODY, (
        "        targets.append(int(ids[i]))\n",
        "        targets.append(int(ids[i]))\n        inputs.append(int(ids[i]))\n")),
        mutant="dropped tokens left in the input"),
    bug("span_corruption", "k starts at 1", sub(SC_BODY, ("inputs, targets, k = [], [], 0",
                                                         "inputs, targets, k = [], [], 1")),
        mutant="sentinels numbered from 1"),
    bug("span_corruption", "sentinels[0] + k", SC_BODY.replace("int(sentinels[k])",
                                                               "int(sentinels[0]) + k"),
        mutant="sentinel ids as sentinels[0] + k"),
    # unforeseen
    bug("span_corruption", "unique_consecutive collapses repeated kept tokens", SC +
        "    def corrupt(mask):\n"
        "        marked = torch.where(mask, torch.full_like(ids, -1), ids)\n"
        "        runs = torch.unique_consecutive(marked)\n"
        "        n = int((runs == -1).sum())\n"
        "        runs[runs == -1] = sentinels[:n]\n"
        "        return runs\n"
        "    inputs = corrupt(noise_mask)\n"
        "    targets = corrupt(~noise_mask)\n"
        "    return inputs, targets\n", expect=("repeat", "consecutive", "collapse"),
        kind="boundary"),
    bug("span_corruption", "T5's ids hard-coded (32099 - k)", SC_BODY.replace(
        "int(sentinels[k])", "32099 - k"), expect=("sentinels[k]", "`sentinels`"),
        kind="argument"),
    bug("span_corruption", "sentinels taken from the end (sentinels[-1 - k])", SC_BODY.replace(
        "int(sentinels[k])", "int(sentinels[-1 - k])"), expect=("sentinels[k]", "sentinels[0]"),
        kind="logic"),
    bug("span_corruption", "closing sentinel repeats the last span's", sub(SC_BODY, (
        "    if len(ids) and not noise_mask[-1]:\n        targets.append(int(sentinels[k]))\n",
        "    if len(ids) and not noise_mask[-1]:\n        targets.append(int(sentinels[max(k - 1, 0)]))\n")),
        expect=("next sentinel", "one more sentinel", "final sentinel"), kind="logic"),
    bug("span_corruption", "sentinel ids written into the caller's ids", SC +
        "    targets, k = [], 0\n"
        "    for i in range(len(ids)):\n"
        "        if noise_mask[i] and (i == 0 or not noise_mask[i - 1]):\n"
        "            targets.append(int(sentinels[k]))\n            k += 1\n"
        "        if noise_mask[i]:\n            targets.append(int(ids[i]))\n"
        "    if not noise_mask[-1]:\n        targets.append(int(sentinels[k]))\n"
        "    starts = noise_mask & ~torch.roll(noise_mask, 1)\n"
        "    ids[starts] = sentinels[:int(starts.sum())]\n"
        "    return ids[~noise_mask | starts], torch.tensor(targets)\n",
        expect=INPLACE, kind="in-place"),
    bug("span_corruption", "input and target swapped", sub(SC_BODY, (
        "return torch.tensor(inputs, dtype=torch.long), torch.tensor(targets, dtype=torch.long)",
        "return torch.tensor(targets, dtype=torch.long), torch.tensor(inputs, dtype=torch.long)")),
        expect=("swapped", "other way round"), kind="logic"),
    bug("span_corruption", "lists returned", sub(SC_BODY, (
        "return torch.tensor(inputs, dtype=torch.long), torch.tensor(targets, dtype=torch.long)",
        "return inputs, targets")), expect=("tensor",), kind="type"),
    alt("span_corruption", "itertools.groupby over runs", SC +
        "    from itertools import groupby\n\n"
        "    inputs, targets, k = [], [], 0\n"
        "    pairs = zip(ids.tolist(), noise_mask.tolist())\n"
        "    for noise, run in groupby(pairs, key=lambda t: t[1]):\n"
        "        tokens = [t for t, _ in run]\n"
        "        if noise:\n"
        "            inputs.append(int(sentinels[k]))\n"
        "            targets += [int(sentinels[k])] + tokens\n            k += 1\n"
        "        else:\n            inputs += tokens\n"
        "    if not noise_mask[-1]:\n        targets.append(int(sentinels[k]))\n"
        "    return torch.tensor(inputs), torch.tensor(targets)\n"),
    alt("span_corruption", "one vectorised filter for both (T5's own)", SC +
        "    def corrupt(mask):\n"
        "        previous = torch.cat([torch.zeros(1, dtype=torch.bool), mask[:-1]])\n"
        "        starts = mask & ~previous\n"
        "        number = torch.cumsum(starts.long(), 0) - 1\n"
        "        full = torch.where(starts, sentinels[number.clamp(min=0)], ids)\n"
        "        return full[~mask | starts]\n"
        "    return corrupt(noise_mask), corrupt(~noise_mask)\n"),
    alt("span_corruption", "while loop over each span", SC +
        "    ids, mask = ids.tolist(), noise_mask.tolist()\n"
        "    inputs, targets, k, i = [], [], 0, 0\n"
        "    while i < len(ids):\n"
        "        if not mask[i]:\n            inputs.append(ids[i])\n            i += 1\n"
        "            continue\n"
        "        j = i\n        while j < len(ids) and mask[j]:\n            j += 1\n"
        "        s = int(sentinels[k])\n        k += 1\n"
        "        inputs.append(s)\n        targets += [s, *ids[i:j]]\n        i = j\n"
        "    if ids and not mask[-1]:\n        targets.append(int(sentinels[k]))\n"
        "    return torch.tensor(inputs, dtype=torch.long), torch.tensor(targets, dtype=torch.long)\n"),
]

# ----------------------------------------------------------------------------- 08.1 patchify
PF = "def patchify(images, patch_size):\n    B, C, H, W = images.shape\n    P = patch_size\n"


def patch(perm="0, 2, 4, 1, 3, 5", split="B, C, H // P, P, W // P, P",
          out="B, (H // P) * (W // P), C * P * P", flatten="reshape"):
    return (PF + f"    x = images.reshape({split})\n    x = x.permute({perm})\n"
            f"    return x.{flatten}({out})\n")


PATCH = [
    bug("patchify", "plain reshape", PF + "    return images.reshape(B, -1, C * P * P)\n",
        mutant="plain reshape"),
    bug("patchify", "grid columns first", patch(perm="0, 4, 2, 1, 3, 5"),
        mutant="columns before rows"),
    bug("patchify", "(row, column, channel) inside a patch", patch(perm="0, 2, 4, 3, 5, 1"),
        mutant="channels last inside a patch"),
    bug("patchify", "pixels column by column", patch(perm="0, 2, 4, 1, 5, 3"),
        mutant="pixels inside a patch transposed"),
    # unforeseen
    bug("patchify", "H used for the width (square images only)", patch(
        split="B, C, H // P, P, H // P, P", out="B, (H // P) ** 2, C * P * P"),
        expect=("non-square", "H ≠ W", "W/P"), kind="boundary"),
    bug("patchify", "view after permute", patch(flatten="view"),
        expect=("reshape", "contiguous"), kind="layout"),
    bug("patchify", "F.unfold without the transpose", PF +
        "    return F.unfold(images, kernel_size=P, stride=P)\n",
        expect=("transpose", "(B, N"), kind="layout"),
    bug("patchify", "tensor.unfold, channel axis not moved", PF +
        "    x = images.unfold(2, P, P).unfold(3, P, P)\n"
        "    return x.reshape(B, (H // P) * (W // P), C * P * P)\n",
        expect=("permute", "channel"), kind="logic"),
    bug("patchify", "one channel assumed (grey digits)", PF +
        "    x = images.reshape(B, H // P, P, W // P, P).permute(0, 1, 3, 2, 4)\n"
        "    return x.reshape(B, (H // P) * (W // P), P * P)\n",
        expect=("channel",), kind="argument"),
    bug("patchify", "patch_size ignored (P = 2 as in the notebook)", sub(
        patch(), ("    P = patch_size\n", "    P = 2\n")), expect=("patch_size",),
        kind="argument"),
    alt("patchify", "F.unfold, transposed", PF +
        "    return F.unfold(images, kernel_size=P, stride=P).transpose(1, 2)\n"),
    alt("patchify", "tensor.unfold twice, then permute", PF +
        "    x = images.unfold(2, P, P).unfold(3, P, P)      # (B, C, rows, cols, P, P)\n"
        "    return x.permute(0, 2, 3, 1, 4, 5).reshape(B, -1, C * P * P)\n"),
    alt("patchify", "loop over the grid, stack", PF +
        "    patches = [images[:, :, r:r + P, c:c + P].reshape(B, -1)\n"
        "               for r in range(0, H, P) for c in range(0, W, P)]\n"
        "    return torch.stack(patches, dim=1)\n"),
    alt("patchify", "permute, contiguous, view", patch(flatten="contiguous().view"),
        kind="layout"),
]

# ----------------------------------------------------------------------------- 08.2 clip_loss
CL = "def clip_loss(image_embeds, text_embeds, logit_scale):\n"
CL_BODY = CL + '''    image_embeds = F.normalize(image_embeds, dim=-1)
    text_embeds = F.normalize(text_embeds, dim=-1)
    logits = logit_scale.exp() * image_embeds @ text_embeds.T
    targets = torch.arange(len(logits))
    return (F.cross_entropy(logits, targets) + F.cross_entropy(logits.T, targets)) / 2
'''
CLIP = [
    bug("clip_loss", "raw dot products", sub(CL_BODY, (
        "    image_embeds = F.normalize(image_embeds, dim=-1)\n"
        "    text_embeds = F.normalize(text_embeds, dim=-1)\n", "")), mutant="not normalised"),
    bug("clip_loss", "logit_scale without exp", sub(CL_BODY, ("logit_scale.exp() *",
                                                             "logit_scale *")),
        mutant="logit_scale used without exp"),
    bug("clip_loss", "divided by exp(t)", sub(CL_BODY, (
        "logits = logit_scale.exp() * image_embeds @ text_embeds.T",
        "logits = image_embeds @ text_embeds.T / logit_scale.exp()")),
        mutant="divided by the scale"),
    bug("clip_loss", "images pick captions only", sub(CL_BODY, (
        "return (F.cross_entropy(logits, targets) + F.cross_entropy(logits.T, targets)) / 2",
        "return F.cross_entropy(logits, targets)")), mutant="one direction only"),
    bug("clip_loss", "the two cross-entropies added", sub(CL_BODY, (
        "return (F.cross_entropy(logits, targets) + F.cross_entropy(logits.T, targets)) / 2",
        "return F.cross_entropy(logits, targets) + F.cross_entropy(logits.T, targets)")),
        mutant="sum of the two directions"),
    bug("clip_loss", "only the matching pairs pulled together", CL +
        "    image_embeds = F.normalize(image_embeds, dim=-1)\n"
        "    text_embeds = F.normalize(text_embeds, dim=-1)\n"
        "    return -(logit_scale.exp() * (image_embeds * text_embeds).sum(dim=-1)).mean()\n",
        mutant="no negatives"),
    # unforeseen
    bug("clip_loss", "math.exp(logit_scale.item())", sub(CL_BODY, (
        "logit_scale.exp() *", "math.exp(logit_scale.item()) *")),
        expect=("gradient",), kind="gradient"),
    bug("clip_loss", "normalised under torch.no_grad()", sub(CL_BODY, (
        "    image_embeds = F.normalize(image_embeds, dim=-1)\n"
        "    text_embeds = F.normalize(text_embeds, dim=-1)\n",
        "    with torch.no_grad():\n"
        "        image_embeds = image_embeds / image_embeds.norm(dim=-1, keepdim=True)\n"
        "        text_embeds = text_embeds / text_embeds.norm(dim=-1, keepdim=True)\n")),
        expect=("gradient",), kind="gradient"),
    bug("clip_loss", "scale rebuilt with torch.tensor (detached)", sub(CL_BODY, (
        "logit_scale.exp() *", "torch.exp(torch.tensor(float(logit_scale))) *")),
        expect=("gradient",), kind="gradient"),
    bug("clip_loss", "norm without keepdim", sub(CL_BODY, (
        "    image_embeds = F.normalize(image_embeds, dim=-1)\n"
        "    text_embeds = F.normalize(text_embeds, dim=-1)\n",
        "    image_embeds = image_embeds / image_embeds.norm(dim=-1)\n"
        "    text_embeds = text_embeds / text_embeds.norm(dim=-1)\n")),
        expect=("keepdim",), kind="boundary"),
    bug("clip_loss", "normalised over the batch axis", CL_BODY.replace("dim=-1", "dim=0"),
        expect=("dim=-1", "each embedding"), kind="logic"),
    bug("clip_loss", "captions pick images only", sub(CL_BODY, (
        "return (F.cross_entropy(logits, targets) + F.cross_entropy(logits.T, targets)) / 2",
        "return F.cross_entropy(logits.T, targets)")),
        expect=("symmetric", "direction"), kind="logic"),
    bug("clip_loss", "log-softmax by hand, no max subtracted", CL +
        "    image_embeds = F.normalize(image_embeds, dim=-1)\n"
        "    text_embeds = F.normalize(text_embeds, dim=-1)\n"
        "    e = torch.exp(logit_scale.exp() * image_embeds @ text_embeds.T)\n"
        "    rows = -torch.log(e.diagonal() / e.sum(dim=1)).mean()\n"
        "    cols = -torch.log(e.diagonal() / e.sum(dim=0)).mean()\n"
        "    return (rows + cols) / 2\n", expect=("overflow", "stable"), kind="boundary"),
    alt("clip_loss", "log_softmax over rows and columns", CL +
        "    i = image_embeds / image_embeds.norm(dim=-1, keepdim=True)\n"
        "    t = text_embeds / text_embeds.norm(dim=-1, keepdim=True)\n"
        "    logits = torch.exp(logit_scale) * i @ t.T\n"
        "    per_image = logits.log_softmax(dim=1).diagonal()\n"
        "    per_text = logits.log_softmax(dim=0).diagonal()\n"
        "    return -(per_image.mean() + per_text.mean()) / 2\n"),
    alt("clip_loss", "logits_per_text, one-hot soft targets", CL +
        "    image_embeds = F.normalize(image_embeds, dim=-1)\n"
        "    text_embeds = F.normalize(text_embeds, dim=-1)\n"
        "    logits_per_text = text_embeds @ image_embeds.t() * logit_scale.exp()\n"
        "    eye = torch.eye(len(logits_per_text))\n"
        "    return 0.5 * (F.cross_entropy(logits_per_text, eye)\n"
        "                  + F.cross_entropy(logits_per_text.t(), eye))\n"),
    alt("clip_loss", "cosine_similarity by broadcasting", CL +
        "    cos = F.cosine_similarity(image_embeds[:, None, :], text_embeds[None, :, :], dim=-1)\n"
        "    logits = cos * logit_scale.exp()\n"
        "    labels = torch.arange(logits.shape[0])\n"
        "    return torch.stack([F.cross_entropy(logits, labels),\n"
        "                        F.cross_entropy(logits.T, labels)]).mean()\n"),
]

# ----------------------------------------------------------------------------- 09.1 LoRALinear
LORA = '''class LoRALinear(nn.Module):
    """h = W₀x + b + (α/r)·B A x with W₀ and b frozen. x: (..., d_in) -> (..., d_out)."""

    def __init__(self, in_features, out_features, r=8, alpha=16, bias=True):
        super().__init__()
        self.base = nn.Linear(in_features, out_features, bias=bias)
        self.base.requires_grad_(False)
        self.r, self.alpha, self.scaling = r, alpha, alpha / r
        self.lora_A = nn.Parameter(torch.empty(r, in_features))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.lora_B = nn.Parameter(torch.zeros(out_features, r))
        self.merged = False

    def forward(self, x):
        h = self.base(x)
        if self.merged:
            return h
        return h + self.scaling * (x @ self.lora_A.T @ self.lora_B.T)

    @torch.no_grad()
    def merge(self):
        if not self.merged:
            self.base.weight += self.scaling * self.lora_B @ self.lora_A
            self.merged = True

    @torch.no_grad()
    def unmerge(self):
        if self.merged:
            self.base.weight -= self.scaling * self.lora_B @ self.lora_A
            self.merged = False
'''


def lora(*pairs):
    return sub(LORA, *pairs)


LORA_VARIANTS = [
    bug("LoRALinear", "B drawn small random", lora((
        "self.lora_B = nn.Parameter(torch.zeros(out_features, r))",
        "self.lora_B = nn.Parameter(0.01 * torch.randn(out_features, r))")),
        mutant="B not zero at initialisation"),
    bug("LoRALinear", "A zero too", lora((
        "        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))\n", ""), (
        "torch.empty(r, in_features)", "torch.zeros(r, in_features)")), mutant="A zero too"),
    bug("LoRALinear", "scaling = 1", lora(("self.scaling = r, alpha, alpha / r",
                                            "self.scaling = r, alpha, 1.0")), mutant="no scale"),
    bug("LoRALinear", "scaling = r / alpha", lora(("self.scaling = r, alpha, alpha / r",
                                                    "self.scaling = r, alpha, r / alpha")),
        mutant="scale inverted"),
    bug("LoRALinear", "base not frozen", lora(("        self.base.requires_grad_(False)\n", "")),
        mutant="W₀ left trainable"),
    bug("LoRALinear", "A (d_in, r), B (r, d_out)", lora(
        ("torch.empty(r, in_features)", "torch.empty(in_features, r)"),
        ("torch.zeros(out_features, r)", "torch.zeros(r, out_features)"),
        ("x @ self.lora_A.T @ self.lora_B.T", "x @ self.lora_A @ self.lora_B"),
        ("self.scaling * self.lora_B @ self.lora_A", "self.scaling * (self.lora_A @ self.lora_B).T")),
        mutant="A and B transposed"),
    bug("LoRALinear", "merge without a flag check", lora((
        "        if not self.merged:\n"
        "            self.base.weight += self.scaling * self.lora_B @ self.lora_A\n"
        "            self.merged = True\n",
        "        self.base.weight += self.scaling * self.lora_B @ self.lora_A\n"
        "        self.merged = True\n")), mutant="merge applied twice"),
    bug("LoRALinear", "forward ignores the merged flag", lora((
        "        if self.merged:\n            return h\n", "")),
        mutant="the LoRA path added again after merge"),
    # unforeseen
    bug("LoRALinear", "bias argument ignored", lora((
        "nn.Linear(in_features, out_features, bias=bias)", "nn.Linear(in_features, out_features)")),
        expect=("bias",), kind="argument"),
    bug("LoRALinear", "merge wraps W in a new nn.Parameter", lora((
        "            self.base.weight += self.scaling * self.lora_B @ self.lora_A\n",
        "            self.base.weight = nn.Parameter(\n"
        "                self.base.weight + self.scaling * self.lora_B @ self.lora_A)\n")),
        expect=("trainable", "requires_grad"), kind="state"),
    bug("LoRALinear", "unmerge only clears the flag", lora((
        "            self.base.weight -= self.scaling * self.lora_B @ self.lora_A\n", "")),
        expect=("unmerge", "subtract", "restore"), kind="state"),
    bug("LoRALinear", "unmerge leaves the flag set", lora((
        "            self.base.weight -= self.scaling * self.lora_B @ self.lora_A\n"
        "            self.merged = False\n",
        "            self.base.weight -= self.scaling * self.lora_B @ self.lora_A\n")),
        expect=("flag", "merged"), kind="state"),
    bug("LoRALinear", "frozen base run under torch.no_grad()", lora((
        "        h = self.base(x)\n",
        "        with torch.no_grad():\n            h = self.base(x)\n")),
        expect=("gradient",), kind="gradient"),
    bug("LoRALinear", "ΔW built from .data", lora((
        "return h + self.scaling * (x @ self.lora_A.T @ self.lora_B.T)",
        "return h + self.scaling * (x @ self.lora_A.data.T @ self.lora_B.data.T)")),
        expect=("gradient", "trainable"), kind="gradient"),
    bug("LoRALinear", "scaling = alpha", lora(("self.scaling = r, alpha, alpha / r",
                                                "self.scaling = r, alpha, alpha")),
        expect=("α/r", "alpha / r"), kind="logic"),
    bug("LoRALinear", "torch.mm (2-D inputs only)", lora((
        "return h + self.scaling * (x @ self.lora_A.T @ self.lora_B.T)",
        "return h + self.scaling * torch.mm(torch.mm(x, self.lora_A.t()), self.lora_B.t())")),
        expect=("3-D", "leading"), kind="boundary"),
    bug("LoRALinear", "A drawn N(0, 1)", lora((
        "        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))\n", ""), (
        "torch.empty(r, in_features)", "torch.randn(r, in_features)")),
        expect=("Kaiming",), kind="logic"),
    alt("LoRALinear", "F.linear, frozen one by one, .data in merge", '''class LoRALinear(nn.Module):
    def __init__(self, in_features, out_features, r=8, alpha=16, bias=True):
        super().__init__()
        self.base = nn.Linear(in_features, out_features, bias=bias)
        for p in self.base.parameters():
            p.requires_grad = False
        self.scaling = alpha / r
        self.lora_A = nn.Parameter(torch.zeros(r, in_features))
        self.lora_B = nn.Parameter(torch.zeros(out_features, r))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.merged = False

    def forward(self, x):
        out = F.linear(x, self.base.weight, self.base.bias)
        if not self.merged:
            out = out + F.linear(F.linear(x, self.lora_A), self.lora_B) * self.scaling
        return out

    @torch.no_grad()
    def merge(self):
        if self.merged:
            return
        self.base.weight.data += (self.lora_B @ self.lora_A) * self.scaling
        self.merged = True

    @torch.no_grad()
    def unmerge(self):
        if not self.merged:
            return
        self.base.weight.data -= (self.lora_B @ self.lora_A) * self.scaling
        self.merged = False
'''),
    alt("LoRALinear", "one effective weight per call, copy_ in merge", '''class LoRALinear(nn.Module):
    def __init__(self, in_features, out_features, r=8, alpha=16, bias=True):
        super().__init__()
        self.base = nn.Linear(in_features, out_features, bias=bias).requires_grad_(False)
        self.lora_A = nn.Parameter(nn.Linear(in_features, r, bias=False).weight.detach().clone())
        self.lora_B = nn.Parameter(torch.zeros(out_features, r))
        self.scale = alpha / r
        self.merged = False

    def delta(self):
        return self.scale * self.lora_B @ self.lora_A

    def forward(self, x):
        weight = self.base.weight if self.merged else self.base.weight + self.delta()
        return F.linear(x, weight, self.base.bias)

    @torch.no_grad()
    def merge(self):
        if not self.merged:
            self.base.weight.copy_(self.base.weight + self.delta())
            self.merged = True

    @torch.no_grad()
    def unmerge(self):
        if self.merged:
            self.base.weight.copy_(self.base.weight - self.delta())
            self.merged = False
''', kind="state"),
    alt("LoRALinear", "einsum, merged flag as a buffer", '''class LoRALinear(nn.Module):
    def __init__(self, in_features, out_features, r=8, alpha=16, bias=True):
        super().__init__()
        self.base = nn.Linear(in_features, out_features, bias=bias)
        self.base.weight.requires_grad_(False)
        if self.base.bias is not None:
            self.base.bias.requires_grad_(False)
        self.lora_A = nn.Parameter(torch.empty(r, in_features))
        self.lora_B = nn.Parameter(torch.empty(out_features, r))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B)
        self.scaling = alpha / r
        self.register_buffer("is_merged", torch.tensor(False))

    def forward(self, x):
        h = self.base(x)
        if bool(self.is_merged):
            return h
        z = torch.einsum("...i,ri->...r", x, self.lora_A)
        return h + self.scaling * torch.einsum("...r,or->...o", z, self.lora_B)

    @torch.no_grad()
    def merge(self):
        if not bool(self.is_merged):
            self.base.weight.add_(self.lora_B @ self.lora_A, alpha=self.scaling)
            self.is_merged.fill_(True)

    @torch.no_grad()
    def unmerge(self):
        if bool(self.is_merged):
            self.base.weight.sub_(self.lora_B @ self.lora_A, alpha=self.scaling)
            self.is_merged.fill_(False)
''', kind="buffer"),
]

# ----------------------------------------------------------------------------- 09.2 is_target
IT = "def is_target(name, target_modules):\n    import re\n\n"
IT_REGEX = ("    if isinstance(target_modules, str):\n"
            "        return re.fullmatch(target_modules, name) is not None\n")
IT_LIST = "    return any(name == t or name.endswith('.' + t) for t in target_modules)\n"
TARGET = [
    bug("is_target", "substring", IT + IT_REGEX +
        "    return any(t in name for t in target_modules)\n", mutant="substring"),
    bug("is_target", "endswith(t)", IT + IT_REGEX +
        "    return any(name.endswith(t) for t in target_modules)\n",
        mutant="suffix without the dot"),
    bug("is_target", "endswith('.' + t) only", IT + IT_REGEX +
        "    return any(name.endswith('.' + t) for t in target_modules)\n", mutant="suffix only"),
    bug("is_target", "re.search", IT + "    if isinstance(target_modules, str):\n"
        "        return re.search(target_modules, name) is not None\n" + IT_LIST,
        mutant="re.search"),
    bug("is_target", "re.match", IT + "    if isinstance(target_modules, str):\n"
        "        return bool(re.match(target_modules, name))\n" + IT_LIST, mutant="re.match"),
    bug("is_target", "no str case", IT + IT_LIST, mutant="a string treated as a list"),
    # unforeseen
    bug("is_target", "anchors added by hand ('^' + t + '$')", IT +
        "    if isinstance(target_modules, str):\n"
        "        return re.search('^' + target_modules + '$', name) is not None\n" + IT_LIST,
        expect=("alternation", "fullmatch", "group"), kind="boundary"),
    bug("is_target", "returns the match object", IT +
        "    if isinstance(target_modules, str):\n"
        "        return re.fullmatch(target_modules, name)\n" + IT_LIST,
        expect=("True or False", "bool"), kind="type"),
    bug("is_target", "last dotted part only", IT + IT_REGEX +
        "    return name.split('.')[-1] in target_modules\n",
        expect=("two-part", "several", "suffix of two parts", "may hold dots"), kind="logic"),
    bug("is_target", "a string taken as one module name", IT +
        "    if isinstance(target_modules, str):\n        target_modules = [target_modules]\n"
        + IT_LIST, expect=("regular expression", "regex"), kind="argument"),
    bug("is_target", "exact names only", IT + IT_REGEX +
        "    return name in target_modules\n", expect=("endswith", "suffix"), kind="logic"),
    bug("is_target", "re.search with '$' only", IT +
        "    if isinstance(target_modules, str):\n"
        "        return re.search(target_modules + '$', name) is not None\n" + IT_LIST,
        expect=("whole name", "fullmatch"), kind="logic"),
    alt("is_target", "re.match with a group and \\Z", IT +
        "    if isinstance(target_modules, str):\n"
        "        return re.match(rf'(?:{target_modules})\\Z', name) is not None\n"
        "    for t in target_modules:\n"
        "        if name == t or name.endswith(f'.{t}'):\n            return True\n"
        "    return False\n"),
    alt("is_target", "dotted parts compared as lists", IT + IT_REGEX +
        "    parts = name.split('.')\n"
        "    for t in target_modules:\n"
        "        want = t.split('.')\n"
        "        if parts[-len(want):] == want:\n            return True\n"
        "    return False\n"),
    alt("is_target", "one escaped regex per list entry", IT + IT_REGEX +
        "    return any(re.fullmatch(r'(.*\\.)?' + re.escape(t), name) is not None\n"
        "               for t in target_modules)\n"),
    # a tuple (as the text allows: anything but a string is a collection of names) taken as a regex
    bug("is_target", "isinstance(target_modules, list) for the list case", IT +
        "    if isinstance(target_modules, list):\n" + IT_LIST.replace("    return", "        return")
        + "    return re.fullmatch(target_modules, name) is not None\n",
        expect=("tuple",), kind="type"),
]

# ----------------------------------------------------------------------------- 09.3 nf4_code_book
NF = "def nf4_code_book(offset=0.9677083):\n"
NF_BODY = NF + '''    positive = torch.special.ndtri(torch.linspace(offset, 0.5, 9, dtype=torch.float64)[:-1])
    negative = -torch.special.ndtri(torch.linspace(offset, 0.5, 8, dtype=torch.float64)[:-1])
    values = torch.cat([negative, torch.zeros(1, dtype=torch.float64), positive]).sort().values
    return (values / values.max()).float()
'''
NF4 = [
    bug("nf4_code_book", "(i + 1/2) / 16 quantiles", NF +
        "    q = (torch.arange(16, dtype=torch.float64) + 0.5) / 16\n"
        "    values = torch.special.ndtri(q)\n"
        "    return (values / values.abs().max()).float()\n",
        mutant="equal-mass quantiles without an exact zero"),
    bug("nf4_code_book", "8 each side, no zero", NF +
        "    half = torch.special.ndtri(torch.linspace(offset, 0.5, 9, dtype=torch.float64)[:-1])\n"
        "    values = torch.cat([-half, half]).sort().values\n"
        "    return (values / values.max()).float()\n", mutant="symmetric, no zero"),
    bug("nf4_code_book", "not divided by the max", sub(NF_BODY, (
        "return (values / values.max()).float()", "return values.float()")),
        mutant="not normalised"),
    bug("nf4_code_book", "linspace(-1, 1, 16)", NF + "    return torch.linspace(-1, 1, 16)\n",
        mutant="uniform grid"),
    bug("nf4_code_book", "9 probabilities on the negative side", sub(NF_BODY, (
        "linspace(offset, 0.5, 9, dtype=torch.float64)[:-1])\n    negative",
        "linspace(offset, 0.5, 8, dtype=torch.float64)[:-1])\n    negative"), (
        "-torch.special.ndtri(torch.linspace(offset, 0.5, 8,",
        "-torch.special.ndtri(torch.linspace(offset, 0.5, 9,")), mutant="the sides swapped"),
    # unforeseen
    bug("nf4_code_book", "offset hard-coded", NF_BODY.replace("linspace(offset,",
                                                               "linspace(0.9677083,"),
        expect=("offset",), kind="argument"),
    bug("nf4_code_book", "1/2 kept on the positive side (two zeros)", sub(NF_BODY, (
        "linspace(offset, 0.5, 9, dtype=torch.float64)[:-1])\n    negative",
        "linspace(offset, 0.5, 8, dtype=torch.float64))\n    negative")),
        expect=("8 positive", "9 probabilities"), kind="logic"),
    bug("nf4_code_book", "drops offset instead of 1/2", NF_BODY.replace("[:-1]", "[1:]"),
        expect=("1/2", "without the last"), kind="logic"),
    bug("nf4_code_book", "float64 returned", sub(NF_BODY, (
        "return (values / values.max()).float()", "return values / values.max()")),
        expect=("float32", "dtype"), kind="type"),
    bug("nf4_code_book", "7 values a side from linspace(0.5, offset, 8)[1:]", NF +
        "    half = torch.linspace(0.5, offset, 8, dtype=torch.float64)[1:]\n"
        "    positive = torch.special.ndtri(half)\n"
        "    values = torch.cat([-positive, torch.zeros(1, dtype=torch.float64), positive])\n"
        "    return (values.sort().values / positive.max()).float()\n",
        expect=("8 positive", "16"), kind="logic"),
    alt("nf4_code_book", "scipy's norm.ppf, negative side from 1 - offset", NF +
        "    from scipy.stats import norm\n\n"
        "    positive = norm.ppf(np.linspace(offset, 0.5, 9)[:-1])\n"
        "    negative = norm.ppf(np.linspace(1 - offset, 0.5, 8)[:-1])\n"
        "    values = np.sort(np.concatenate([negative, [0.0], positive]))\n"
        "    return torch.tensor(values / np.abs(values).max(), dtype=torch.float32)\n"),
    alt("nf4_code_book", "erfinv", NF +
        "    def quantile(q):\n"
        "        return math.sqrt(2) * torch.erfinv(2 * q - 1)\n"
        "    pos = quantile(torch.linspace(offset, 0.5, 9, dtype=torch.float64))[:8]\n"
        "    neg = -quantile(torch.linspace(offset, 0.5, 8, dtype=torch.float64))[:7]\n"
        "    values = torch.sort(torch.cat([neg, pos, torch.zeros(1, dtype=torch.float64)]))[0]\n"
        "    return (values / pos[0]).to(torch.float32)\n"),
    alt("nf4_code_book", "float32 throughout", NF +
        "    positive = torch.special.ndtri(torch.linspace(offset, 0.5, 9)[:-1])\n"
        "    negative = -torch.special.ndtri(torch.linspace(offset, 0.5, 8)[:-1])\n"
        "    values = torch.cat([negative, torch.zeros(1), positive])\n"
        "    return values.sort().values / values.abs().max()\n"),
]

VARIANTS = [*MERGE, *TOP_P, *MASK, *SPAN, *PATCH, *CLIP, *LORA_VARIANTS, *TARGET, *NF4]
