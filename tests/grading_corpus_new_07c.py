"""Corpus of plausible student code for the new exercises of 07c (see grading_corpus.py)."""

from grading_corpus import INPLACE, alt, bug

# ----------------------------------------------------------------------------- 07.8 shift_right
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
