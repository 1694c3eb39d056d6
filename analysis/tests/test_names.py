"""Go and Python name QUIC versions alike: the examples in quic_versions.json carry
Go's quicver.Name and FamilyOf (internal/quicver/shared_test.go keeps the file current)."""

import json

import pytest

from doqscan_analysis import names

TABLE = json.loads(names.QUIC_VERSIONS_FILE.read_text())


@pytest.mark.parametrize("ex", TABLE["examples"], ids=lambda ex: f"0x{ex['value']:08x}")
def test_short_name_and_family_match_go(ex):
    assert names.quic_version_short(ex["value"]) == ex["name"]
    assert names.quic_version_family(ex["value"]) == ex["family"]


def test_known_versions_round_trip():
    assert TABLE["known"], "empty version table"
    for k in TABLE["known"]:
        assert names.KNOWN_VERSIONS[k["name"]] == k["value"]
        assert names.quic_version_short(k["value"]) == k["name"]


def test_labels_prefix_short_names():
    assert names.quic_version_name(1) == "QUIC v1"
    assert names.quic_version_name(0xFF00001D) == "QUIC draft-29"
    assert names.quic_version_name(0x51303530) == "gQUIC Q050"
    assert names.quic_version_name(0x1A2A3A4A) == "grease"
    assert names.quic_version_name(None) == "unknown"
