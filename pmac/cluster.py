"""Counter clustering (after Jagga and Malakar 2021): which counters carry the same information
across a program's scaling runs, so that one of each group is enough to read or to model.

Observations are the runs' ranks (``by="rank"``: each rank of each run, its counters summed over
the functions) or functions (``by="function"``: each function of each run, summed over its ranks);
variables are the metrics. The Pearson correlation of every pair of metrics over the observations
is the correlation matrix; agglomerative clustering with average linkage on the distance
``1 - |r|``, cut at ``1 - min_abs_corr``, groups the metrics; each group's representative is the
member with the largest mean ``|r|`` to the others (the first by name among equals; a group of
one has no mean, NaN). A metric
that does not vary over the observations has no correlation and is listed apart.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .errors import InputError

BY = ("rank", "function")
CLUSTER_COLUMNS = ("metric", "cluster", "representative", "mean_abs_corr", "size")


def observations(counters: pd.DataFrame, by: str = "rank") -> pd.DataFrame:
    """Observations x metrics (see the module docstring) from counter rows with ``n_ranks``; an
    observation lacking a metric is dropped (a rank the memory tracer skipped has no compute
    counts). Index: ``(n_ranks, rank)`` or ``(n_ranks, function)``."""
    if by not in BY:
        raise InputError(f"observations by must be one of {', '.join(BY)}, not {by!r}")
    keys = ["n_ranks", by]
    wide = counters.groupby(keys + ["metric"], sort=True)["value"].sum().unstack("metric")
    if by == "function":
        wide = wide.fillna(0.0)  # a function without a metric's row did none of it (MPI ops: no loads)
    return wide.dropna(axis=0, how="any")


def correlate(obs: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The correlation matrix of the metrics that vary over ``obs``, and the names of those that
    do not. Needs three observations or more."""
    if len(obs) < 3:
        raise InputError(f"counter correlation needs 3 or more observations, got {len(obs)} (more runs, or "
                         "--by rank)")
    x = obs.to_numpy(np.float64)
    varies = np.ptp(x, axis=0) > 1e-12 * np.maximum(np.abs(x).max(axis=0), 1e-300)
    const = [m for m, v in zip(obs.columns, varies) if not v]
    return obs.loc[:, varies].corr(method="pearson"), const


def cluster_metrics(corr: pd.DataFrame, min_abs_corr: float = 0.9) -> pd.DataFrame:
    """Groups of metrics (module docstring): columns :data:`CLUSTER_COLUMNS`, clusters numbered
    from 1 by size (largest first), then by their representative's name."""
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import squareform

    if not 0.0 < min_abs_corr <= 1.0:
        raise InputError(f"min_abs_corr must be in (0, 1], got {min_abs_corr}")
    names = list(corr.columns)
    if len(names) == 0:
        return pd.DataFrame(columns=list(CLUSTER_COLUMNS))
    a = np.abs(corr.to_numpy(np.float64))
    if len(names) == 1:
        labels = np.array([1])
    else:
        d = np.clip(1.0 - a, 0.0, 1.0)
        np.fill_diagonal(d, 0.0)
        z = linkage(squareform((d + d.T) / 2.0, checks=False), method="average")
        labels = fcluster(z, t=1.0 - min_abs_corr + 1e-12, criterion="distance")
    groups = []
    for lab in np.unique(labels):
        idx = np.flatnonzero(labels == lab)
        inner = a[np.ix_(idx, idx)]
        mean = (inner.sum(axis=1) - 1.0) / (len(idx) - 1) if len(idx) > 1 else np.full(1, np.nan)
        order = sorted(range(len(idx)), key=lambda k: (-round(float(np.nan_to_num(mean[k])), 12), names[idx[k]]))
        groups.append([(names[idx[k]], float(mean[k])) for k in order])
    groups.sort(key=lambda g: (-len(g), g[0][0]))
    rows = [{"metric": m, "cluster": c, "representative": k == 0, "mean_abs_corr": r, "size": len(g)}
            for c, g in enumerate(groups, start=1) for k, (m, r) in enumerate(g)]
    return pd.DataFrame(rows, columns=list(CLUSTER_COLUMNS))
