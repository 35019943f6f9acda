"""Smooths drawn with matplotlib (optional)."""


def plot_panels(smooths, axes=None):
    """One panel per smooth: the fit and its band; returns the axes."""
    try:
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - matplotlib is optional
        raise ImportError("plotting needs matplotlib (pip install matplotlib)") from e
    panels = smooths["panels"]
    if not panels:
        raise ValueError("no smooth to draw: " + "; ".join(smooths["notes"]))
    figure = None
    if axes is None:
        figure, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2), squeeze=False)
        axes = axes[0]
    for ax, panel in zip(axes, panels):
        ax.fill_between(panel["x"], panel["lower"], panel["upper"], alpha=0.3)
        ax.plot(panel["x"], panel["fit"])
        ax.set_title(panel["title"])
        ax.set_xlabel(panel["x_label"])
        ax.set_ylabel(panel["y_label"])
    if figure is not None:
        figure.tight_layout()
    return axes
