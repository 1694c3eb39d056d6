"""doqscan analysis: load aggregated results from PostgreSQL, compute the study's
statistics, and plot them (Kosek et al., PAM 2022, Figs. 1-3, and their extensions).

Modules: ``names`` (QUIC/DoQ version names, the protocol table and its SQL spellings),
``load`` (the loading API: SQL aggregation, psycopg 3, re-exported from ``source``,
``catalog``, ``census``, ``rtt``, ``facts``, ``measurements`` and ``benchruns``),
``lake`` (the same functions over a Parquet release), ``identity`` (QUIC libraries,
DDR, connection policies), ``stats`` (ECDFs, summaries, churn), ``bench`` (tables of
dnsbench runs: the loss sweep, connection reuse), ``plots`` (matplotlib figures),
``worldmap`` (offline world map), ``synth`` (seeded synthetic database), ``db`` (the
PostgreSQL server and schema for tests and benchmarks), ``report`` (headless notebook
execution).
"""

__all__ = ["names", "load", "stats", "bench", "plots", "worldmap", "synth", "report"]
