'''Corpus of plausible student code for the new exercises of 09b (09.4 quantize_blockwise, 09.5
double_quantize), in the form of ``tests/grading_corpus.py``: one bug per suite mutant, bugs the
mutants did not foresee, and correct alternatives.

Each bug's ``expect`` was written from the bug itself, before looking at what the grader says.
'''

from __future__ import annotations

from grading_corpus import INPLACE, alt, bug

# ----------------------------------------------------------------------------- 09.4 quantize_blockwise
Q = "def quantize_blockwise(w, code, blocksize=64):\n"
MIDS = "    mids = (code[:-1] + code[1:]) / 2\n"
BLOCKS = ("    blocks = w.reshape(-1, blocksize)\n"
          "    absmax = blocks.abs().amax(dim=1)\n")
SAFE = "    x = (blocks / absmax.clamp(min=1e-38)[:, None]).flatten()\n"
RET = "    return idx.to(torch.uint8), absmax\n"

QUANTIZE = [
    # --- the suite's mutants, as students write them
    bug("quantize_blockwise", "one absmax for the whole tensor", Q + MIDS +
        "    blocks = w.reshape(-1, blocksize)\n"
        "    c = w.abs().max()\n"
        "    absmax = c.repeat(blocks.shape[0])\n"
        "    idx = torch.bucketize(blocks.flatten() / c, mids)\n" + RET,
        mutant="one absmax for the whole tensor"),
    bug("quantize_blockwise", "signed maximum", Q + MIDS +
        "    blocks = w.reshape(-1, blocksize)\n"
        "    absmax = blocks.max(dim=1).values\n" + SAFE +
        "    idx = torch.bucketize(x, mids)\n" + RET, mutant="signed maximum"),
    bug("quantize_blockwise", "searchsorted on the code values", Q + BLOCKS + SAFE +
        "    idx = torch.searchsorted(code, x)\n" + RET,
        mutant="rounded up, not to the nearest"),
    bug("quantize_blockwise", "bucketize right=True", Q + MIDS + BLOCKS + SAFE +
        "    idx = torch.bucketize(x, mids, right=True)\n" + RET, mutant="ties to the upper value"),
    bug("quantize_blockwise", "plain division", Q + MIDS + BLOCKS +
        "    x = (blocks / absmax[:, None]).flatten()\n"
        "    idx = torch.bucketize(x, mids)\n" + RET, mutant="0 / 0 in an all-zero block"),
    # --- bugs the mutants do not foresee
    bug("quantize_blockwise", "int64 indices from argmin", Q + BLOCKS + SAFE +
        "    idx = (x[:, None] - code[None, :]).abs().argmin(dim=1)\n"
        "    return idx, absmax\n", expect="dtype", kind="type"),
    bug("quantize_blockwise", "indices in the shape of w", Q + MIDS + BLOCKS + SAFE +
        "    idx = torch.bucketize(x, mids).reshape(w.shape)\n" + RET, expect="shape",
        kind="layout"),
    bug("quantize_blockwise", "w divided in place", Q + MIDS +
        "    blocks = w.view(-1, blocksize)\n"
        "    absmax = blocks.abs().amax(dim=1)\n"
        "    blocks /= absmax.clamp(min=1e-38)[:, None]\n"
        "    idx = torch.bucketize(blocks.flatten(), mids)\n" + RET, expect=INPLACE,
        kind="in-place"),
    bug("quantize_blockwise", "the code argument ignored (a uniform grid)", Q +
        "    code = torch.linspace(-1, 1, 16)\n" + MIDS + BLOCKS + SAFE +
        "    idx = torch.bucketize(x, mids)\n" + RET, expect="`code`"),
    bug("quantize_blockwise", "an epsilon added to the absmax", Q + MIDS + BLOCKS +
        "    x = (blocks / (absmax[:, None] + 1e-8)).flatten()\n"
        "    idx = torch.bucketize(x, mids)\n" + RET, expect=("epsilon",)),
    bug("quantize_blockwise", "one block per row", Q + MIDS +
        "    blocks = w.reshape(-1, w.shape[-1])\n"
        "    absmax = blocks.abs().amax(dim=1)\n" + SAFE +
        "    idx = torch.bucketize(x, mids)\n" + RET, expect=("`blocksize`", "span rows")),
    bug("quantize_blockwise", "rounding on an evenly spaced grid", Q + BLOCKS + SAFE +
        "    idx = torch.round((x + 1) / 2 * (len(code) - 1))\n" + RET, expect="evenly spaced"),
    bug("quantize_blockwise", "nearest in weight units (no division)", Q + BLOCKS +
        "    levels = code[None, None, :] * absmax[:, None, None]\n"
        "    idx = (blocks[:, :, None] - levels).abs().argmin(dim=-1).flatten()\n" + RET,
        expect=("zero", "nearest 0")),
    # --- once correct alternatives: computed in w's dtype, so that float16 or bfloat16 weights get
    # 16-bit constants (the exercise asks for float32) and indices from w / c rounded to 16 bits
    bug("quantize_blockwise", "argmin, torch.where guard (in w's dtype)", Q +
        "    blocks = w.reshape(-1, blocksize)\n"
        "    absmax = blocks.abs().max(dim=1).values\n"
        "    safe = torch.where(absmax > 0, absmax, torch.ones_like(absmax))\n"
        "    x = blocks / safe[:, None]\n"
        "    idx = (x.reshape(-1, 1) - code).abs().argmin(dim=1)\n" + RET,
        expect=("float32",), kind="type"),
    bug("quantize_blockwise", "searchsorted on the midpoints, nan_to_num (in w's dtype)", Q +
        "    absmax = w.reshape(-1, blocksize).abs().amax(-1)\n"
        "    x = (w.reshape(-1, blocksize) / absmax[:, None]).nan_to_num(0.0).flatten()\n"
        "    idx = torch.searchsorted((code[1:] + code[:-1]) / 2, x)\n"
        "    return idx.byte(), absmax\n", expect=("float32",), kind="type"),
    bug("quantize_blockwise", "a loop over the blocks (in w's dtype)", Q +
        "    flat = w.flatten()\n"
        "    idx, consts = [], []\n"
        "    for start in range(0, flat.numel(), blocksize):\n"
        "        block = flat[start:start + blocksize]\n"
        "        c = block.abs().max()\n"
        "        x = block / c if c > 0 else torch.zeros_like(block)\n"
        "        idx.append(torch.argmin(torch.abs(x[:, None] - code[None, :]), dim=1))\n"
        "        consts.append(c)\n"
        "    return torch.cat(idx).to(torch.uint8), torch.stack(consts)\n",
        expect=("float32",), kind="type"),
]

# ----------------------------------------------------------------------------- 09.5 double_quantize
D = "def double_quantize(absmax, code, blocksize=256):\n"
CENTRE = "    mean = absmax.mean()\n    centred = absmax - mean\n    n = centred.numel()\n"
PAD = "    padded = F.pad(centred, (0, (-n) % blocksize))\n"


def upstream(code: str = "", centre: str = CENTRE, pad: str = PAD,
             call: str = "    idx, absmax2 = quantize_blockwise(padded, code, blocksize)\n",
             ret: str = "    return idx[:n], absmax2, mean\n") -> str:
    """A double_quantize that calls the earlier exercise, one piece of it replaced."""
    return D + centre + pad + code + call + ret


DOUBLE = [
    # --- the suite's mutants, as students write them
    bug("double_quantize", "the constants quantised as they are",
        upstream(centre="    mean = absmax.mean()\n    centred = absmax\n    n = centred.numel()\n"),
        mutant="mean not subtracted"),
    bug("double_quantize", "one absmax for every block", D + CENTRE +
        "    s = centred.abs().max()\n"
        "    idx = torch.bucketize(centred / s, (code[1:] + code[:-1]) / 2)\n"
        "    return idx.to(torch.uint8), s.repeat(-(-n // blocksize)), mean\n",
        mutant="one scale for all blocks"),
    bug("double_quantize", "the code value below (searchsorted on the code)", D + CENTRE + PAD +
        "    blocks = padded.view(-1, blocksize)\n"
        "    absmax2 = blocks.abs().amax(dim=1)\n"
        "    x = (blocks / absmax2[:, None]).flatten()\n"
        "    idx = (torch.searchsorted(code, x, right=True) - 1).clamp(min=0)[:n]\n"
        "    return idx.to(torch.uint8), absmax2, mean\n",
        mutant="rounded down, not to the nearest"),
    bug("double_quantize", "a linear 8-bit code of its own",
        upstream(code="    code = torch.linspace(-1, 1, 255)\n"),
        mutant="a linear code in place of `code`"),
    bug("double_quantize", "no padding", upstream(pad="    padded = centred\n"),
        mutant="the last block not padded"),
    # --- bugs the mutants do not foresee
    bug("double_quantize", "the mean taken over the padded constants", D +
        "    n = absmax.numel()\n"
        "    padded = F.pad(absmax, (0, (-n) % blocksize))\n"
        "    mean = padded.mean()\n"
        "    padded = padded - mean\n"
        "    idx, absmax2 = quantize_blockwise(padded, code, blocksize)\n"
        "    return idx[:n], absmax2, mean\n", expect="padding"),
    bug("double_quantize", "the padding's indices kept", upstream(
        ret="    return idx, absmax2, mean\n"), expect="shape", kind="layout"),
    bug("double_quantize", "absmax -= mean", upstream(
        centre="    mean = absmax.mean()\n    absmax -= mean\n    centred = absmax\n"
               "    n = centred.numel()\n"), expect=INPLACE, kind="in-place"),
    bug("double_quantize", "the mean as a Python float", upstream(
        centre="    mean = absmax.mean().item()\n    centred = absmax - mean\n"
               "    n = centred.numel()\n"), expect=("float", "torch.Tensor"), kind="type"),
    bug("double_quantize", "the minimum subtracted", upstream(
        centre="    mean = absmax.min()\n    centred = absmax - mean\n    n = centred.numel()\n"),
        expect="the mean of the"),
    bug("double_quantize", "standardised (divided by the std too)", upstream(
        centre="    mean = absmax.mean()\n    centred = (absmax - mean) / absmax.std()\n"
               "    n = centred.numel()\n"), expect=("std", "scale")),
    bug("double_quantize", "int64 indices", D + CENTRE + PAD +
        "    blocks = padded.view(-1, blocksize)\n"
        "    absmax2 = blocks.abs().amax(dim=1)\n"
        "    x = (blocks / absmax2.clamp(min=1e-38)[:, None]).reshape(-1, 1)\n"
        "    idx = (x - code).abs().argmin(dim=1)\n"
        "    return idx[:n], absmax2, mean\n", expect="dtype", kind="type"),
    bug("double_quantize", "absmax2 from the constants before centring", D + CENTRE + PAD +
        "    absmax2 = F.pad(absmax, (0, (-n) % blocksize)).view(-1, blocksize).amax(dim=1)\n"
        "    x = (padded.view(-1, blocksize) / absmax2[:, None]).flatten()\n"
        "    idx = torch.bucketize(x, (code[:-1] + code[1:]) / 2)\n"
        "    return idx[:n].to(torch.uint8), absmax2, mean\n", expect="absmax₂ of the centred"),
    bug("double_quantize", "the code's position read as a linear grid", D + CENTRE + PAD +
        "    blocks = padded.view(-1, blocksize)\n"
        "    absmax2 = blocks.abs().amax(dim=1)\n"
        "    x = blocks / absmax2[:, None]\n"
        "    idx = torch.round((x + 1) / 2 * (len(code) - 1)).flatten()[:n]\n"
        "    return idx.to(torch.uint8), absmax2, mean\n", expect="`code`"),
    # --- correct alternatives
    alt("double_quantize", "self-contained, argmin", D + CENTRE + PAD +
        "    blocks = padded.view(-1, blocksize)\n"
        "    absmax2 = blocks.abs().amax(dim=1)\n"
        "    x = blocks / absmax2.clamp(min=1e-38)[:, None]\n"
        "    idx = (x.reshape(-1, 1) - code).abs().argmin(dim=1)[:n]\n"
        "    return idx.to(torch.uint8), absmax2, mean\n"),
    alt("double_quantize", "a loop over the blocks, the last one partial", D + CENTRE +
        "    mids = (code[:-1] + code[1:]) / 2\n"
        "    idx, scales = [], []\n"
        "    for start in range(0, n, blocksize):\n"
        "        block = centred[start:start + blocksize]\n"
        "        s = block.abs().max()\n"
        "        idx.append(torch.bucketize(block / s, mids))\n"
        "        scales.append(s)\n"
        "    return torch.cat(idx).to(torch.uint8), torch.stack(scales), mean\n"),
    alt("double_quantize", "searchsorted on the midpoints", D + CENTRE + PAD +
        "    blocks = padded.view(-1, blocksize)\n"
        "    absmax2 = blocks.abs().amax(dim=1)\n"
        "    x = (blocks / absmax2[:, None]).flatten()\n"
        "    idx = torch.searchsorted((code[1:] + code[:-1]) / 2, x)[:n]\n"
        "    return idx.to(torch.uint8), absmax2, mean\n"),
]

VARIANTS: list = [*QUANTIZE, *DOUBLE]
