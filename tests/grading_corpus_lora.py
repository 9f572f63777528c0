'''Corpus of plausible student code for 09a's third exercise (09.6 energy_shares), in the form
of ``tests/grading_corpus.py``: one bug per suite mutant, bugs the mutants did not foresee, and
correct alternatives.

Each bug's ``expect`` was written from the bug itself, before looking at what the grader says.
'''

from __future__ import annotations

from grading_corpus import alt, bug

E = "def energy_shares(matrix):\n"
SV = "    s = torch.linalg.svdvals(matrix)\n"
SCALE = ("    top = s[..., :1]\n"
         "    s = s / torch.where(top > 0, top, torch.ones_like(top))\n")
GUARD = ("    total = energy.sum(-1, keepdim=True)\n"
         "    return energy / torch.where(total > 0, total, torch.ones_like(total))\n")

SHARES = [
    # --- the suite's mutants, as students write them
    bug("energy_shares", "σ, not σ²", E + SV + SCALE + "    energy = s\n" + GUARD,
        mutant="σ, not σ²"),
    bug("energy_shares", "σ² without the division", E + SV + SCALE + "    return s ** 2\n",
        mutant="not normalised"),
    bug("energy_shares", "eigvalsh of MᵀM, ascending", E +
        "    s = torch.linalg.svdvals(matrix).flip(-1)\n" + SCALE.replace("[..., :1]", "[..., -1:]")
        + "    energy = s * s\n" + GUARD, mutant="ascending"),
    bug("energy_shares", "cumulative shares", E + SV + SCALE + "    energy = s * s\n"
        "    total = energy.sum(-1, keepdim=True)\n"
        "    return (energy / torch.where(total > 0, total, torch.ones_like(total))).cumsum(-1)\n",
        mutant="cumulative"),
    bug("energy_shares", "eigenvalues", E +
        "    lam = torch.linalg.eigvals(matrix).abs()\n"
        "    energy = lam.sort(descending=True).values ** 2\n" + GUARD, mutant="eigenvalues"),
    bug("energy_shares", "sum over everything", E + SV + SCALE + "    energy = s * s\n"
        "    total = energy.sum()\n"
        "    return energy / torch.where(total > 0, total, torch.ones_like(total))\n",
        mutant="normalised over the whole batch"),
    bug("energy_shares", "the obvious two lines, guarded", E + SV + "    energy = s ** 2\n" + GUARD,
        mutant="squared before scaling"),
    bug("energy_shares", "scaled, no guard", E + SV + "    s = s / s[..., :1]\n"
        "    energy = s ** 2\n    return energy / energy.sum(-1, keepdim=True)\n",
        mutant="0 / 0 for a zero matrix"),
    # --- bugs the mutants do not foresee
    bug("energy_shares", "the notebook's old two lines", E +
        "    s2 = torch.linalg.svdvals(matrix).pow(2)\n    return s2 / s2.sum()\n",
        expect=("overflow", "whole batch")),
    bug("energy_shares", "no keepdim", E + SV + SCALE + "    energy = s * s\n"
        "    total = energy.sum(-1)\n"
        "    return energy / torch.where(total > 0, total, torch.ones_like(total))\n",
        expect=("keepdim", "per matrix")),
    bug("energy_shares", "eigvalsh of MᵀM: n values, not min(m, n)", E +
        "    lam = torch.linalg.eigvalsh(matrix.mT @ matrix).flip(-1).clamp(min=0)\n"
        "    s = lam.sqrt()\n" + SCALE + "    energy = s * s\n" + GUARD,
        expect=("min(m, n)", "shape")),
    bug("energy_shares", "Frobenius norm as the total, unscaled", E + SV +
        "    total = torch.linalg.matrix_norm(matrix)[..., None] ** 2\n"
        "    return s ** 2 / total\n",
        expect=("before squaring", "no energy", "NaN")),
    bug("energy_shares", "clamped total, unscaled", E + SV + "    energy = s ** 2\n"
        "    return energy / energy.sum(-1, keepdim=True).clamp(min=1e-12)\n",
        expect=("before squaring", "overflow", "rounds to 0")),
    bug("energy_shares", "matrix.T for a batch", E + "    s = torch.linalg.svdvals(matrix.T)\n"
        + SCALE + "    energy = s * s\n" + GUARD,
        expect=("per matrix", "shape (4, 5, 2)")),
    # --- correct alternatives
    alt("energy_shares", "svd(...).S and nan_to_num", E +
        "    s = torch.linalg.svd(matrix, full_matrices=False).S\n"
        "    s = s / s[..., :1]\n"
        "    energy = s ** 2\n"
        "    return (energy / energy.sum(-1, keepdim=True)).nan_to_num(0.0)\n"),
    alt("energy_shares", "clamped by the smallest normal float", E + SV +
        "    tiny = torch.finfo(s.dtype).tiny\n"
        "    s = s / s.amax(-1, keepdim=True).clamp(min=tiny)\n"
        "    energy = s.square()\n"
        "    return energy / energy.sum(-1, keepdim=True).clamp(min=tiny)\n"),
    alt("energy_shares", "float64 throughout", E +
        "    s = torch.linalg.svdvals(matrix.double())\n"
        "    energy = s ** 2\n"
        "    shares = energy / energy.sum(-1, keepdim=True)\n"
        "    return shares.nan_to_num(0.0).to(matrix.dtype)\n"),
    alt("energy_shares", "torch.svd (deprecated) and where", E +
        "    _, s, _ = torch.svd(matrix)\n"
        "    peak = s.max(dim=-1, keepdim=True).values\n"
        "    s = torch.where(peak > 0, s / peak, s)\n"
        "    energy = s * s\n"
        "    total = energy.sum(dim=-1, keepdim=True)\n"
        "    return torch.where(total > 0, energy / total, torch.zeros_like(energy))\n"),
    alt("energy_shares", "NumPy's SVD", E +
        "    s = torch.from_numpy(np.linalg.svd(matrix.double().numpy(), compute_uv=False))\n"
        "    energy = s ** 2\n"
        "    total = energy.sum(-1, keepdims=True)\n"
        "    return torch.where(total > 0, energy / total, 0.0).to(matrix.dtype)\n"),
]

VARIANTS: list = [*SHARES]
