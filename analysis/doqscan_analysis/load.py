"""Load aggregated results from doqscan's PostgreSQL database (schema.sql) or from a
data release (lake.Lake): the analysis' public API, one namespace for the notebooks,
the report, the benchmarks and the tests. The functions live in modules by subject and
are re-exported here unchanged (their helpers stay in the modules; measurement_facts
reads facts.PARALLEL):

  source        connect, default_source, describe (and the helpers every query uses)
  catalog       weeks, vantage_points, datasets, provenance, sources
  census        verified resolvers by version pair, family, port; QUIC versions and
                fingerprints; certificates and providers; membership churn; geography
  rtt           rtt_medians: RTTs paired with measurements
  facts         measurement_facts: one compact record per successful measurement
  measurements  response_times (exact distributions), answering, doq_causes,
                ratio_classes, features, per_resolver_medians, testbed peers
  benchruns     bench_runs (dnsbench)

Most functions run one SQL statement that aggregates inside PostgreSQL and return a
small pandas DataFrame: counts per week, per version pair, per port. The response-time
functions share measurement_facts, from which numpy computes exact distributions.

Filters common to all functions:
  weeks     list of ISO weeks ('2026-W47'); None = every week in the database.
  vantages  list of vantage_id; None = all vantage points.
"""

from __future__ import annotations

from .benchruns import (
    BENCH_COLUMNS,
    bench_runs,
)
from .catalog import (
    PROVENANCE_COLUMNS,
    VANTAGE_COLUMNS,
    datasets,
    provenance,
    sources,
    vantage_points,
    weeks,
)
from .census import (
    DOUDP_RCODES,
    PORT_PREFERENCE,
    PORT_UNKNOWN,
    VERIFIED,
    certificate_counts,
    geo_counts,
    geo_points,
    membership_by_week,
    port_shares,
    ports_not_recorded,
    read_siblings,
    scan_versions,
    stack_fingerprints,
    top_providers,
    verification_outcomes,
    verified_by_family,
    verified_by_pair,
)
from .facts import (
    CAUSES,
    PARALLEL,
    Facts,
    address_key,
    has_measurement_facts,
    measurement_facts,
    refresh_measurement_facts,
)
from .measurements import (
    DEFAULT_POINTS,
    GROUP_COLUMNS,
    METRICS,
    PEER_COLUMNS,
    ROUND_TRIP_CLASSES,
    answering,
    doq_causes,
    features,
    peer_response_times,
    per_resolver_medians,
    ratio_classes,
    response_times,
    response_times_sql,
    testbed_peers,
)
from .rtt import (
    has_rtt_medians,
    refresh_rtt_medians,
)
from .source import (
    connect,
    default_source,
    describe,
)

__all__ = [
    "connect",
    "default_source",
    "describe",
    "weeks",
    "vantage_points",
    "VANTAGE_COLUMNS",
    "datasets",
    "PROVENANCE_COLUMNS",
    "provenance",
    "sources",
    "PORT_PREFERENCE",
    "PORT_UNKNOWN",
    "VERIFIED",
    "DOUDP_RCODES",
    "verification_outcomes",
    "verified_by_pair",
    "verified_by_family",
    "read_siblings",
    "port_shares",
    "ports_not_recorded",
    "scan_versions",
    "stack_fingerprints",
    "top_providers",
    "certificate_counts",
    "membership_by_week",
    "geo_counts",
    "geo_points",
    "has_rtt_medians",
    "refresh_rtt_medians",
    "PARALLEL",
    "CAUSES",
    "address_key",
    "Facts",
    "has_measurement_facts",
    "refresh_measurement_facts",
    "measurement_facts",
    "DEFAULT_POINTS",
    "METRICS",
    "ROUND_TRIP_CLASSES",
    "GROUP_COLUMNS",
    "response_times",
    "response_times_sql",
    "ratio_classes",
    "answering",
    "doq_causes",
    "features",
    "per_resolver_medians",
    "PEER_COLUMNS",
    "testbed_peers",
    "peer_response_times",
    "BENCH_COLUMNS",
    "bench_runs",
]
