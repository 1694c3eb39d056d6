"""Two reports' numbers compared: every CSV table the notebooks wrote (figures/*.csv)
in both folders, row by row. The release tests and benchmarks use it to show that the
report from a release (DuckDB, Spark) equals the report from PostgreSQL.

    python -m doqscan_analysis.compare REPORT_A REPORT_B     # exit 0: equal, 1: not
"""

from __future__ import annotations

import math
import os
import sys

import numpy as np
import pandas as pd

REL = 1e-12  # floats: sums of the same values in another order differ in the last digits


def _approx(x: float, y: float) -> bool:
    return math.isclose(x, y, rel_tol=REL, abs_tol=1e-9)


def same(a: pd.DataFrame, b: pd.DataFrame, sort: bool = False) -> None:
    """Equal frames: the same columns in order, the same rows; numbers compared as
    numbers (int 3 == float 3.0), floats to 1e-12 relative (sums of floats in another
    order), arrays element by element, exactly."""
    assert list(a.columns) == list(b.columns)
    assert len(a) == len(b), f"{len(a)} rows vs {len(b)}\n{a}\n{b}"
    if sort and len(a):
        keys = [c for c in a.columns if not isinstance(a[c].iloc[0], np.ndarray)]
        a, b = _sorted(a, keys), _sorted(b, keys)
    for c in a.columns:
        for i, (x, y) in enumerate(zip(a[c], b[c])):
            if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
                assert np.array_equal(np.asarray(x, float), np.asarray(y, float)), f"{c} row {i}"
            elif _missing(x) or _missing(y):
                assert _missing(x) and _missing(y), f"{c} row {i}: {x!r} vs {y!r}"
            elif isinstance(x, (int, float, np.number)) and not isinstance(x, bool):
                assert _approx(float(x), float(y)), f"{c} row {i}: {x!r} vs {y!r}"
            elif _num(x) is not None and _num(y) is not None:
                assert _approx(_num(x), _num(y)), f"{c} row {i}: {x!r} vs {y!r}"
            else:
                assert str(x) == str(y), f"{c} row {i}: {x!r} vs {y!r}"


def _sorted(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Rows in the order of their values (numbers as numbers): for results whose order
    among ties the SQL leaves open."""
    def key(i):
        return tuple((0, float(v), "") if isinstance(v, (int, float, np.number)) and not isinstance(v, bool)
                     else (1, 0.0, str(v)) for v in (df[k].iloc[i] for k in keys))
    return df.iloc[sorted(range(len(df)), key=key)].reset_index(drop=True)


def _num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and np.isnan(x)) or x is pd.NaT


def report_csvs(a: str, b: str) -> list[str]:
    """Every CSV table the notebooks wrote into report folders a and b is in both and
    holds the same rows (numbers as numbers, to 1e-12 relative; rows in value order
    where the SQL leaves ties open). Returns the names compared."""
    fa = sorted(f for f in os.listdir(os.path.join(a, "figures")) if f.endswith(".csv"))
    fb = sorted(f for f in os.listdir(os.path.join(b, "figures")) if f.endswith(".csv"))
    assert fa == fb
    for f in fa:
        x = pd.read_csv(os.path.join(a, "figures", f), keep_default_na=False)
        y = pd.read_csv(os.path.join(b, "figures", f), keep_default_na=False)
        try:
            same(x, y, sort=True)
        except AssertionError as e:
            raise AssertionError(f"{f}: {e}") from e
    return fa




def main(argv=None) -> int:
    args = (argv if argv is not None else sys.argv[1:])
    if len(args) != 2:
        print("usage: python -m doqscan_analysis.compare REPORT_A REPORT_B", file=sys.stderr)
        return 2
    try:
        names = report_csvs(*args)
    except AssertionError as e:
        print(f"differ: {e}", file=sys.stderr)
        return 1
    print(f"equal: {len(names)} CSV tables")
    return 0


if __name__ == "__main__":
    sys.exit(main())
