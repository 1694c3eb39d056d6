"""Print, as JSON, the numbers the report's notebooks plot, computed by the analysis
package's own load functions against the database in $DOQSCAN_REPORT_DB.

Run by TestReportFromPipeline (report_test.go), which compares them with the ground truth
of testbed/population.txt for the targets it scanned:
  pairs   load.verified_by_pair  (adoption.ipynb, the study's Fig. 1)
  ports   load.port_shares       (adoption.ipynb, port shares 784/853/8853)
  causes  load.doq_causes        (response_times.ipynb, DoQ handshakes by cause), summed
                                 over implementations
  ratios  load.ratio_classes     (response_times.ipynb, Fig. 3b round-trip classes), DoQ
"""
import json
import os
import sys

from doqscan_analysis import load


def main() -> int:
    conn = load.connect(os.environ["DOQSCAN_REPORT_DB"])
    pairs = load.verified_by_pair(conn)
    ports = load.port_shares(conn)
    causes = load.doq_causes(conn)
    causes = causes.groupby(["vantage_id", "phase", "mode", "key_share", "cause"], as_index=False)["handshakes"].sum()
    ratios = load.ratio_classes(conn)
    ratios = ratios[ratios["protocol"] == "doq"]
    out = {
        "pairs": [{"week": r.iso_week, "alpn": r.alpn, "quic_version": int(r.quic_version),
                   "resolvers": int(r.resolvers), "pair": r.pair} for r in pairs.itertuples()],
        "ports": [{"week": r.iso_week, "port": int(r.port), "resolvers": int(r.resolvers),
                   "total": int(r.total), "share": float(r.share)} for r in ports.itertuples()],
        "causes": [{"vantage": r.vantage_id, "phase": r.phase, "mode": r.mode, "key_share": r.key_share,
                    "cause": r.cause, "handshakes": int(r.handshakes)} for r in causes.itertuples()],
        "ratios": [{"vantage": r.vantage_id, "phase": r.phase, "mode": r.mode,
                    "round_trips": int(r.round_trips), "measurements": int(r.measurements)}
                   for r in ratios.itertuples()],
    }
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
