"""Corpus of plausible student code for the new exercises of 07c (see grading_corpus.py)."""

from grading_corpus import INPLACE, alt, bug

# ----------------------------------------------------------------------------- 07.9 shift_right
SR = "def shift_right(labels, start_id=0, pad_id=0):\n"
SR_START = "    start = torch.full((labels.shape[0], 1), start_id, dtype=labels.dtype)\n"
SR_FILL = "    return shifted.masked_fill(shifted == -100, pad_id)\n"


def sr(shifted, fill=SR_FILL, pre=""):
    return SR + pre + SR_START + f"    shifted = {shifted}\n" + fill


SHIFT_RIGHT = [
    bug("shift_right", "shifted left", sr("torch.cat([labels[:, 1:], start], dim=1)"),
        mutant="shifted left"),
    bug("shift_right", "start token appended", sr("torch.cat([labels[:, :-1], start], dim=1)"),
        mutant="start token at the end"),
    bug("shift_right", "-100 kept", sr("torch.cat([start, labels[:, :-1]], dim=1)",
                                       fill="    return shifted\n"),
        mutant="-100 left in place"),
    bug("shift_right", "starts with pad_id", SR +
        "    shifted = labels.new_full(labels.shape, pad_id)\n"
        "    shifted[:, 1:] = labels[:, :-1]\n" + SR_FILL, mutant="pad_id as the start token"),
    bug("shift_right", "last label kept", sr("torch.cat([start, labels], dim=1)"),
        mutant="last label kept"),
    bug("shift_right", "-100 replaced in the caller's labels", SR +
        "    labels[labels == -100] = pad_id\n" + SR_START +
        "    return torch.cat([start, labels[:, :-1]], dim=1)\n", expect=INPLACE, kind="in-place"),
    bug("shift_right", "-100 replaced by 0", sr(
        "torch.cat([start, labels[:, :-1]], dim=1)",
        fill="    return shifted.masked_fill(shifted == -100, 0)\n"),
        expect="not 0 or start_id"),
    bug("shift_right", "-100 replaced by start_id", sr(
        "torch.cat([start, labels[:, :-1]], dim=1)",
        fill="    return shifted.masked_fill(shifted == -100, start_id)\n"),
        expect="not 0 or start_id"),
    bug("shift_right", "mask taken from the unshifted labels", sr(
        "torch.cat([start, labels[:, :-1]], dim=1)",
        fill="    return shifted.masked_fill(labels == -100, pad_id)\n"), kind="mask",
        expect="not in the labels"),
    bug("shift_right", "clamp(min=pad_id)", sr(
        "torch.cat([start, labels[:, :-1]], dim=1)",
        fill="    return shifted.clamp(min=pad_id)\n"), expect="copied as it is"),
    bug("shift_right", "float zeros", SR +
        "    shifted = torch.zeros(labels.shape)\n    shifted[:, 0] = start_id\n"
        "    shifted[:, 1:] = labels[:, :-1]\n" + SR_FILL, expect="dtype", kind="type"),
    bug("shift_right", "rolled, no start token", SR +
        "    shifted = torch.roll(labels, 1, dims=1)\n" + SR_FILL, expect="Position 0"),
    bug("shift_right", "shifted along the batch axis", SR +
        "    shifted = labels.new_full(labels.shape, start_id)\n"
        "    shifted[1:] = labels[:-1]\n" + SR_FILL, expect="batch axis", kind="layout"),
    alt("shift_right", "torch.cat and torch.where", sr(
        "torch.cat([start, labels[:, :-1]], dim=1)",
        fill="    return torch.where(shifted == -100, pad_id, shifted)\n")),
    alt("shift_right", "F.pad, -100 replaced first", SR +
        "    clean = labels.masked_fill(labels == -100, pad_id)\n"
        "    return F.pad(clean[:, :-1], (1, 0), value=start_id)\n"),
    alt("shift_right", "clone, then roll", SR +
        "    shifted = labels.roll(1, dims=-1).clone()\n    shifted[:, 0] = start_id\n"
        "    shifted[shifted == -100] = pad_id\n    return shifted\n"),
]

VARIANTS: list = [*SHIFT_RIGHT]

# ----------------------------------------------------------------------------- 07.8 position_bias
# relative_position_bucket is Exercise 05.2, which the notebook imports from coursekit: the grader
# provides it (an import of coursekit inside the cell is refused by the batch grader).
PB = "def position_bias(table, n_q, n_k, bidirectional=True, max_distance=128):\n"
PB_POS = ("    query = torch.arange(n_k - n_q, n_k)[:, None]\n"
          "    key = torch.arange(n_k)[None, :]\n")
PB_BUCKETS = ("    buckets = relative_position_bucket(key - query, bidirectional, table.shape[0], "
              "max_distance)\n")


def pb(tail, pos=PB_POS, buckets=PB_BUCKETS):
    return PB + pos + buckets + tail


PB_RETURN = "    return table[buckets].permute(2, 0, 1)\n"

POSITION_BIAS = [
    bug("position_bias", "offset i − j", pb(PB_RETURN, buckets=PB_BUCKETS.replace(
        "key - query", "query - key")), mutant="offset i − j"),
    bug("position_bias", "queries at positions 0..N_q − 1", pb(PB_RETURN, pos=PB_POS.replace(
        "torch.arange(n_k - n_q, n_k)", "torch.arange(n_q)")), mutant="queries at the first positions"),
    bug("position_bias", "bidirectional hard-coded", pb(PB_RETURN, buckets=PB_BUCKETS.replace(
        "key - query, bidirectional", "key - query, True")), mutant="always bidirectional"),
    bug("position_bias", "max_distance not passed", pb(PB_RETURN, buckets=(
        "    buckets = relative_position_bucket(key - query, bidirectional, table.shape[0])\n")),
        mutant="max_distance left at its default"),
    bug("position_bias", "heads left last", pb("    return table[buckets]\n"), mutant="heads last"),
    bug("position_bias", "buckets from the heads' axis", pb(PB_RETURN, buckets=PB_BUCKETS.replace(
        "table.shape[0]", "table.shape[1]")), mutant="number of buckets read from the heads' axis"),
    bug("position_bias", "num_buckets left at 32", pb(PB_RETURN, buckets=(
        "    buckets = relative_position_bucket(key - query, bidirectional, "
        "max_distance=max_distance)\n")), expect="table.shape[0]"),
    bug("position_bias", "a fresh nn.Embedding instead of the table", pb(
        "    emb = torch.nn.Embedding(table.shape[0], table.shape[1])\n"
        "    return emb(buckets).permute(2, 0, 1)\n"), expect=("`table` argument",)),
    bug("position_bias", "table detached", pb("    return table.detach()[buckets].permute(2, 0, 1)\n"),
        expect="no gradient reaches"),
    bug("position_bias", "reshape instead of permute", pb(
        "    return table[buckets].reshape(table.shape[1], n_q, n_k)\n"), kind="layout",
        expect="reshape"),
    bug("position_bias", "keys and queries swapped in the output", pb(
        "    return table[buckets].permute(2, 1, 0)\n"), kind="layout", expect="transpose"),
    bug("position_bias", "queries one position late", pb(PB_RETURN, pos=PB_POS.replace(
        "torch.arange(n_k - n_q, n_k)", "torch.arange(n_k - n_q + 1, n_k + 1)")),
        expect="shifted by one"),
    alt("position_bias", "F.embedding, then movedim", pb(
        "    return F.embedding(buckets, table).movedim(-1, 0)\n")),
    alt("position_bias", "one head at a time", pb(
        "    return torch.stack([table[:, h][buckets] for h in range(table.shape[1])])\n")),
    alt("position_bias", "one-hot buckets times the table", pb(
        "    one_hot = F.one_hot(buckets, table.shape[0]).to(table.dtype)\n"
        "    return torch.einsum('qkb,bh->hqk', one_hot, table)\n")),
]

VARIANTS += POSITION_BIAS
