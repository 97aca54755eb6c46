"""A figure whose decorations cannot fit is written without matplotlib's "Tight layout not applied"
warning reaching the terminal (walkthrough s51, finding 8)."""

from __future__ import annotations

import warnings

from coevolve.search.plot import save_figure


def test_a_figure_tight_layout_cannot_fit_is_written_without_the_warning(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1, 1), dpi=100)
    ax.set_title("x" * 400)
    ax.set_ylabel("y\n" * 40)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path = save_figure(fig, tmp_path / "p.png")
    assert path.is_file() and path.stat().st_size > 0
    assert not [w for w in caught if "Tight layout not applied" in str(w.message)]
