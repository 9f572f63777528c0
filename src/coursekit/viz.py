"""Figures the chapters share: attention heatmaps, loss curves, and explorers.

An :class:`Explorer` precomputes one figure per combination of its controls. In a live notebook
it is an ipywidgets control panel; in the static book the same frames are driven by a few lines
of JavaScript, so it keeps working with no kernel. Its sliders work from the keyboard (arrow
keys, Home, End) and say their value in words to a screen reader; its picture's text alternative
is the explorer's ``description`` and the values shown.

Importing this module sets matplotlib's defaults to a colour-blind-safe style
(:func:`use_accessible_style`): the Okabe-Ito colours, each series in the cycle with its own line
style, and the perceptually uniform ``viridis`` colour map, so that curves stay apart in grey and
for the common colour-vision deficiencies without relying on their colour.
"""

from __future__ import annotations

import base64
import html
import io
import itertools
import json
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
from cycler import cycler

# Okabe & Ito's palette ("Color Universal Design", 2008), reordered for a white page: the
# darkest and most distinct first; its yellow (#F0E442), too light on white, is left out.
OKABE_ITO = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#000000", "#E69F00", "#56B4E9")
# One line style per colour, so that no two series of a figure differ by colour alone.
LINE_STYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (8, 2)), (0, (1, 1)))
STYLE: dict[str, Any] = {
    "axes.prop_cycle": cycler(color=list(OKABE_ITO)) + cycler(linestyle=list(LINE_STYLES)),
    "image.cmap": "viridis",
    "lines.linewidth": 1.8,
}


def use_accessible_style() -> None:
    """Make :data:`STYLE` matplotlib's default (done when this module is imported); a figure
    that names its colours or styles keeps them. ``C0``, ``C1``, ... name the new colours."""
    mpl.rcParams.update(STYLE)


use_accessible_style()


def attention_heatmap(
    weights: Any,
    x_labels: Sequence[str] | None = None,
    y_labels: Sequence[str] | None = None,
    ax: plt.Axes | None = None,
    title: str | None = None,
    xlabel: str = "key / input position",
    ylabel: str = "query / output position",
    annotate: bool = False,
) -> plt.Axes:
    """Draw a (N_q, N_k) weight matrix, one row per query; ``annotate`` writes the numbers in."""
    w = weights.detach().cpu().numpy() if hasattr(weights, "detach") else weights
    if ax is None:
        _, ax = plt.subplots(figsize=(0.35 * w.shape[1] + 2, 0.35 * w.shape[0] + 1.2))
    image = ax.imshow(w, cmap="viridis", vmin=0.0, vmax=max(float(w.max()), 1e-9), aspect="auto")
    if x_labels is not None:
        ax.set_xticks(range(len(x_labels)), x_labels, rotation=90 if len(x_labels) > 8 else 0)
    if y_labels is not None:
        ax.set_yticks(range(len(y_labels)), y_labels)
    if annotate:
        for (i, j), value in np.ndenumerate(w):
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=8,
                    color="black" if value > 0.6 * w.max() else "white")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax


def plot_history(*histories: Any, labels: Sequence[str] = (), ax: plt.Axes | None = None,
                 log: bool = True, window: int = 20) -> plt.Axes:
    """Smoothed training loss of one or more :class:`coursekit.train.History` objects."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.2))
    for i, h in enumerate(histories):
        ax.plot(h.step, h.smoothed(window), label=labels[i] if i < len(labels) else None)
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel(f"training loss (mean of {window} steps)")
    if labels:
        ax.legend()
    return ax


def flow_diagram(boxes: Sequence[str], repeat: tuple[int, int, str] | None = None,
                 notes: dict[int, str] | None = None, ax: plt.Axes | None = None,
                 title: str | None = None, note_x: float = 1.05) -> plt.Axes:
    """An architecture drawn as data flowing up through ``boxes`` (listed from the input up).

    ``repeat=(first, last, "× L")`` draws a bracket around boxes ``first..last`` (a stacked block);
    ``notes`` maps a box's index to a line written to its right (a shape, a remark), starting at
    ``note_x`` (the boxes are centred on 0; move the notes right for wide boxes).
    """
    notes = notes or {}
    n = len(boxes)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 0.62 * n + 0.6))
    for i, text in enumerate(boxes):
        ax.text(0.0, i, text, ha="center", va="center", fontsize=9,
                bbox=dict(boxstyle="round,pad=0.35", fc="#E8F1F8" if i not in (0, n - 1) else "white",
                          ec="#0072B2"))
        if i:
            ax.annotate("", xy=(0.0, i - 0.3), xytext=(0.0, i - 0.7),
                        arrowprops=dict(arrowstyle="->", color="black"))
        if i in notes:
            ax.text(note_x, i, notes[i], ha="left", va="center", fontsize=8, color="#444444")
    if repeat is not None:
        first, last, label = repeat
        ax.plot([-1.05, -1.15, -1.15, -1.05], [first - 0.4, first - 0.4, last + 0.4, last + 0.4], c="#D55E00")
        ax.text(-1.2, (first + last) / 2, label, ha="right", va="center", fontsize=10, color="#D55E00")
    ax.set(xlim=(-1.6, note_x + 1.55), ylim=(-0.6, n - 0.4))
    ax.axis("off")
    if title:
        ax.set_title(title, fontsize=10)
    return ax


def figure_png(fig: plt.Figure, dpi: int = 80) -> str:
    """A figure as base64 PNG text; the figure is closed."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


class Explorer:
    """An interactive figure: ``Explorer(render, step=range(10), head=[0, 1])``.

    ``render(**values)`` draws a matplotlib figure and returns it; it is called once per
    combination of control values (keep the product small: every frame is stored).
    ``description`` says what the figure shows, in a sentence: with the values shown, it is the
    picture's text alternative in the static book (the title stands in when it is empty).
    """

    def __init__(self, render: Callable[..., plt.Figure], title: str = "",
                 description: str = "", **controls: Sequence[Any]) -> None:
        if not controls:
            raise ValueError("an Explorer needs at least one control, e.g. step=range(10)")
        self.title = title
        # what the figure shows, in a sentence: its text alternative (the title when empty)
        self.description = description
        self.controls = {name: list(values) for name, values in controls.items()}
        for name, values in self.controls.items():
            if not values:
                raise ValueError(f"control {name!r} has no values")
        self.frames: dict[str, str] = {}
        for combo in itertools.product(*(range(len(v)) for v in self.controls.values())):
            values = {n: self.controls[n][i] for n, i in zip(self.controls, combo, strict=True)}
            self.frames[self._key(combo)] = figure_png(render(**values))

    @staticmethod
    def _key(indices: Sequence[int]) -> str:
        return "|".join(str(i) for i in indices)

    def alt(self, values: Sequence[Any]) -> str:
        """The frame's text alternative: the description (or title) and the values shown."""
        shown = ", ".join(f"{name} = {value}" for name, value in zip(self.controls, values,
                                                                     strict=True))
        return f"{self.description or self.title or 'Interactive figure'} ({shown})"

    def html(self) -> str:
        """Self-contained HTML + JavaScript: one slider per control over the stored frames."""
        uid = f"ck-explorer-{uuid.uuid4().hex[:8]}"
        rows = []
        for name, values in self.controls.items():
            labels = html.escape(json.dumps([str(v) for v in values]))
            rows.append(
                f'<label style="margin-right:1em">{html.escape(name)} '
                f'<input type="range" min="0" max="{len(values) - 1}" value="0" step="1" '
                f'data-control="{html.escape(name)}" data-labels="{labels}" '
                f'aria-valuetext="{html.escape(str(values[0]))}"> '
                f'<output>{html.escape(str(values[0]))}</output></label>'
            )
        first = self.frames[self._key([0] * len(self.controls))]
        lead = html.escape(self.description or self.title or "Interactive figure")
        return f"""<div class="ck-explorer" id="{uid}" role="group" aria-label="{lead}">
<div class="ck-explorer-title"><b>{html.escape(self.title)}</b></div>
<div class="ck-explorer-controls">{''.join(rows)}</div>
<img class="ck-explorer-frame" alt="{html.escape(self.alt([v[0] for v in self.controls.values()]))}"
     data-alt="{lead}" src="data:image/png;base64,{first}">
<script type="application/json" class="ck-explorer-frames">{json.dumps(self.frames)}</script>
<script>
(function () {{
  var root = document.getElementById("{uid}");
  var frames = JSON.parse(root.querySelector(".ck-explorer-frames").textContent);
  var inputs = root.querySelectorAll("input[data-control]");
  function update() {{
    var key = [], shown = [];
    inputs.forEach(function (input) {{
      var label = JSON.parse(input.dataset.labels)[input.value];
      key.push(input.value);
      shown.push(input.dataset.control + " = " + label);
      input.nextElementSibling.textContent = label;
      input.setAttribute("aria-valuetext", label);
    }});
    var frame = root.querySelector(".ck-explorer-frame");
    frame.src = "data:image/png;base64," + frames[key.join("|")];
    frame.alt = frame.dataset.alt + " (" + shown.join(", ") + ")";
    root.dataset.state = key.join("|");
  }}
  inputs.forEach(function (input) {{ input.addEventListener("input", update); }});
}})();
</script>
</div>"""

    def widget(self):
        """The live version: ipywidgets sliders over the same frames."""
        import ipywidgets as widgets

        image = widgets.Image(value=base64.b64decode(self.frames[self._key([0] * len(self.controls))]),
                              format="png")
        sliders = [
            widgets.SelectionSlider(options=[(str(v), i) for i, v in enumerate(values)],
                                    value=0, description=name, continuous_update=True)
            for name, values in self.controls.items()
        ]

        def update(_change: Any = None) -> None:
            image.value = base64.b64decode(self.frames[self._key([s.value for s in sliders])])

        for slider in sliders:
            slider.observe(update, names="value")
        return widgets.VBox([widgets.HTML(f"<b>{html.escape(self.title)}</b>"), *sliders, image],
                            tooltip=self.description or self.title or None)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        bundle: dict[str, Any] = {
            "text/plain": f"Explorer({self.title!r}, {len(self.frames)} frames)",
            "text/html": self.html(),
        }
        try:
            bundle.update(self.widget()._repr_mimebundle_())
        except Exception:  # no ipywidgets or no kernel: the static version stands alone
            pass
        return bundle
