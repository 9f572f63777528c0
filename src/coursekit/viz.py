"""Figures the chapters share: attention heatmaps, loss curves, and explorers.

An :class:`Explorer` precomputes one figure per combination of its controls. In a live notebook
it is an ipywidgets control panel; in the static book the same frames are driven by a few lines
of JavaScript, so it keeps working with no kernel.
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

import matplotlib.pyplot as plt
import numpy as np


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
    """

    def __init__(self, render: Callable[..., plt.Figure], title: str = "",
                 **controls: Sequence[Any]) -> None:
        if not controls:
            raise ValueError("an Explorer needs at least one control, e.g. step=range(10)")
        self.title = title
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

    def html(self) -> str:
        """Self-contained HTML + JavaScript: one slider per control over the stored frames."""
        uid = f"ck-explorer-{uuid.uuid4().hex[:8]}"
        rows = []
        for name, values in self.controls.items():
            labels = html.escape(json.dumps([str(v) for v in values]))
            rows.append(
                f'<label style="margin-right:1em">{html.escape(name)} '
                f'<input type="range" min="0" max="{len(values) - 1}" value="0" step="1" '
                f'data-control="{html.escape(name)}" data-labels="{labels}"> '
                f'<output>{html.escape(str(values[0]))}</output></label>'
            )
        first = self.frames[self._key([0] * len(self.controls))]
        return f"""<div class="ck-explorer" id="{uid}">
<div class="ck-explorer-title"><b>{html.escape(self.title)}</b></div>
<div class="ck-explorer-controls">{''.join(rows)}</div>
<img class="ck-explorer-frame" alt="{html.escape(self.title or 'explorer frame')}"
     src="data:image/png;base64,{first}">
<script type="application/json" class="ck-explorer-frames">{json.dumps(self.frames)}</script>
<script>
(function () {{
  var root = document.getElementById("{uid}");
  var frames = JSON.parse(root.querySelector(".ck-explorer-frames").textContent);
  var inputs = root.querySelectorAll("input[data-control]");
  function update() {{
    var key = [];
    inputs.forEach(function (input) {{
      key.push(input.value);
      input.nextElementSibling.textContent = JSON.parse(input.dataset.labels)[input.value];
    }});
    root.querySelector(".ck-explorer-frame").src = "data:image/png;base64," + frames[key.join("|")];
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
        return widgets.VBox([widgets.HTML(f"<b>{html.escape(self.title)}</b>"), *sliders, image])

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
