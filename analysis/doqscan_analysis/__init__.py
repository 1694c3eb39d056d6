"""doqscan analysis: load aggregated results from PostgreSQL, compute the study's
statistics, and plot them (Kosek et al., PAM 2022, Figs. 1-3, and their extensions).

Modules: ``names`` (QUIC/DoQ version names), ``load`` (SQL aggregation, psycopg 3),
``stats`` (ECDFs, summaries, churn), ``bench`` (tables of dnsbench runs: the loss
sweep, connection reuse), ``plots`` (matplotlib figures), ``worldmap``
(offline world map), ``synth`` (seeded synthetic database), ``report`` (headless
notebook execution).
"""

__all__ = ["names", "load", "stats", "bench", "plots", "worldmap", "synth", "report"]
