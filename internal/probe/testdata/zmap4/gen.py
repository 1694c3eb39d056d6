#!/usr/bin/env python3
"""Derives zmap 4.x recordings from the zmap 2.1.1 recordings in ../zmap (see README.md).

Run from this directory: python3 gen.py. Output is deterministic.
"""
import json

FIELDS = ["saddr", "sport", "dport", "classification", "success", "repeat", "icmp_type",
          "icmp_code", "icmp_responder", "udp_pkt_size", "data", "timestamp_ts", "timestamp_us"]
OLD = ["saddr", "sport", "dport", "classification", "success", "repeat", "icmp_type",
       "icmp_code", "icmp_responder", "udp_pkt_size", "data", "timestamp-ts", "timestamp-us"]
QUIC_PORTS = [784, 853, 8853]


def rows(name):
    lines = open("../zmap/" + name).read().splitlines()
    assert lines[0].split(",") == OLD, lines[0]
    return [dict(zip(OLD, l.split(","))) for l in lines[1:]]


def csv_line(r):
    # module_csv.c csv_process: fields joined by ",", FS_NULL printed as nothing, a
    # string holding a comma quoted (none of these does), "\n" after each row.
    out = []
    for f in FIELDS:
        v = r.get(f, "")
        assert "," not in v
        out.append(v)
    return ",".join(out) + "\n"


def to4(r):
    r = dict(r)
    r["timestamp_ts"], r["timestamp_us"] = r.pop("timestamp-ts"), r.pop("timestamp-us")
    if r["classification"] == "icmp-unreach":
        # module_udp.c udp_process_packet: classification "icmp", success 0, sport,
        # dport, udp_pkt_size and data FS_NULL.
        r["classification"] = "icmp"
    return r


def jsonc(v):
    """json_object_to_json_string (JSON_C_TO_STRING_SPACED): '{ "k": v, ... }',
    '[ a, b ]', '/' escaped as '\\/', doubles "%.17g" with ".0" added when integral."""
    if isinstance(v, dict):
        if not v:
            return "{ }"
        return "{ " + ", ".join(json.dumps(k) + ": " + jsonc(x) for k, x in v.items()) + " }"
    if isinstance(v, list):
        if not v:
            return "[ ]"
        return "[ " + ", ".join(jsonc(x) for x in v) + " ]"
    if isinstance(v, float):
        s = "%.17g" % v
        if "." not in s and "e" not in s:
            s += ".0"
        return s
    if isinstance(v, str):
        return json.dumps(v).replace("/", "\\/")
    return str(v)


def meta(ports, sent, success, dedup, probe_file):
    # Keys and order of summary.c json_metadata (zmap 4.3.4) for a udp scan with
    # -i, -G, -S, --output-filter, --probe-args, -o -, -b, -w and no -I, -l, -L,
    # --notes, --user-metadata, --probe-ttl, --output-args.
    m = {
        "local_hostname": "vm", "full_hostname": "vm",
        "source_port_first": 32768, "source_port_last": 61000,
        "target_ports": ports,
        "max_targets": 0, "max_runtime": 0, "max_results": 0, "output_results": success,
        "iface": "prbx-v", "rate": 500, "bandwidth": 0, "cooldown_secs": 1, "senders": 1,
        "seed": 42, "seed_provided": 1, "generator": 3,
        "hitrate": 100.0 * success / sent,
        "shard_num": 0, "total_shards": 1, "min_hitrate": 0.0, "max_sendto_failures": -1,
        "syslog": 0, "default_mode": 0,
        "pcap_recv": success + 6, "pcap_drop": 0, "pcap_ifdrop": 0, "ip_fragments": 0,
        "blocklist_total_allowed": 256, "blocklist_total_not_allowed": 4294967040,
        "validation_passed": success + 6, "validation_failed": 0,
        "first_scanned": 3323920169, "send_to_failures": 0,
        "packets_sent": sent, "targets_scanned": sent,
        "success_total": success, "success_unique": success,
        "success_cooldown_total": 0, "success_cooldown_unique": 0, "failure_total": 6,
        "packet_streams": 1, "probe_module": "udp", "output_module": "csv",
        "send_start_time": "2026-11-23T10:30:01+0000", "send_end_time": "2026-11-23T10:30:03+0000",
        "recv_start_time": "2026-11-23T10:30:01+0000", "recv_end_time": "2026-11-23T10:30:04+0000",
        "output_filter": "repeat = 0",
        "probe_args": "file:" + probe_file,
        "gateway_mac": "02:00:00:00:00:01",
        "source_mac": "02:00:00:00:00:02",
        "source_ips": ["198.18.0.2"],
        "output_filename": "-",
        "blocklist_filename": "/scan/blocklist.conf",
        "allowlist_filename": "/scan/allowlist.conf",
        "dryrun": 0, "quiet": 0, "log_level": 2,
        "deduplication_method": dedup,
    }
    if dedup == "window":
        m["deduplication_window_size"] = 1000000
    m["blocklisted_networks"] = ["0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10"]
    m["allowlisted_networks"] = ["198.19.0.0/24"]
    return jsonc(m) + "\n"


# QUIC: one zmap 4.x run of 784, 853 and 8853: every recorded VN reply from each port
# (sport), then the ICMP unreachables (no port field in 4.x).
quic = [to4(r) for r in rows("quic-784.csv")]
icmp = [to4(r) for r in rows("icmp-9999.csv")]
with open("784_853_8853.csv", "w") as f:
    f.write(",".join(FIELDS) + "\n")
    for r in quic:
        for p in QUIC_PORTS:
            x = dict(r)
            x["sport"] = str(p)
            f.write(csv_line(x))
    for r in icmp:
        f.write(csv_line(r))
with open("784_853_8853.meta.json", "w") as f:
    f.write(meta(QUIC_PORTS, 256 * 3, len(quic) * 3, "window", "/scan/quic.pkt"))

# DNS: one run of port 53 alone.
dns = [to4(r) for r in rows("dns-53.csv")]
with open("53.csv", "w") as f:
    f.write(",".join(FIELDS) + "\n")
    for r in dns:
        f.write(csv_line(r))
with open("53.meta.json", "w") as f:
    f.write(meta([53], 256, len(dns), "full", "/scan/dns.pkt"))

with open("stderr", "w") as f:
    # monitor.c onscreen_generic, the last (complete) line.
    f.write(" 0:03 100% (0s left); send: 768 done (384 p/s avg); recv: 294 0 p/s (98 p/s avg); "
            "drops: 0 p/s (0 p/s avg); hitrate: 38.28%\n")
