"""Session fixtures: the testbed instance the checks run against, and the population.

The suite brings up its own instance (name $DOQSCAN_PYTEST_TESTNET, default "pyt", so it
never collides with a developer's "dq") with `bin/testnet --name pyt up`,
runs every client inside `pyt-vantage`, and tears the instance down at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from doqscan_analysis import population

REPO = Path(__file__).resolve().parents[2]
INST = os.environ.get("DOQSCAN_PYTEST_TESTNET", "pyt")
PYTHON = REPO / ".venv" / "bin" / "python"
CLIENT = Path(__file__).resolve().parent / "vantage_client.py"


class Vantage:
    """Runs batches of independent client checks inside the vantage namespace."""

    def __init__(self, inst: str, peers_started: set[str] | None = None):
        self.inst = inst
        self.ns = f"{inst}-vantage"
        # The third-party peers the testbed started ("<kind>-<address>", their pid files'
        # names): an optional peer that is not installed is not among them.
        self.peers_started = peers_started or set()

    def run(self, checks: list[dict]) -> list[dict]:
        py = PYTHON if PYTHON.exists() else Path(sys.executable)
        out = subprocess.run(["ip", "netns", "exec", self.ns, str(py), str(CLIENT)],
                             input=json.dumps(checks), capture_output=True, text=True, timeout=900)
        if out.returncode != 0:
            raise RuntimeError(f"vantage client failed ({out.returncode}): {out.stderr[-2000:]}")
        return json.loads(out.stdout)


@pytest.fixture(scope="session")
def pop() -> population.Population:
    return population.load()


@pytest.fixture(scope="session")
def vantage() -> Vantage:
    if os.geteuid() != 0:
        pytest.skip("needs root: the testbed creates network namespaces")
    testnet = REPO / "bin" / "testnet"
    if not testnet.exists():
        pytest.skip("bin/testnet is not built (run ./dev build)")
    env = dict(os.environ, DOQSCAN_HOME=str(REPO))
    up = subprocess.run([str(testnet), "--name", INST, "up"], capture_output=True, text=True, timeout=900, env=env)
    if up.returncode != 0:
        subprocess.run([str(testnet), "--name", INST, "down"], capture_output=True, timeout=300, env=env)
        pytest.fail(f"testnet --name {INST} up failed ({up.returncode}):\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}")
    try:
        st = subprocess.run([str(testnet), "--name", INST, "--json", "status"], capture_output=True, text=True,
                            timeout=300, env=env)
        procs = json.loads(st.stdout).get("processes") or [] if st.stdout.strip() else []
        started = {p["name"].removeprefix("peer ") for p in procs if p.get("name", "").startswith("peer ")}
        yield Vantage(INST, started)
    finally:
        down = subprocess.run([str(testnet), "--name", INST, "down"], capture_output=True, text=True, timeout=300,
                              env=env)
        if down.returncode != 0:
            print(f"testnet down failed: {down.stderr[-2000:]}", file=sys.stderr)


@pytest.fixture(autouse=True)
def _peer_started(request):
    """Skips a check of a third-party peer's class when the testbed did not start that
    peer (an optional peer, peers.Optional, that is not installed: its address is silent).
    A peer that was started and died still fails its checks."""
    spec = getattr(request.node, "callspec", None)
    cls = spec.params.get("cls") if spec else None
    if not cls:
        return
    import expect
    h = expect.representatives(population.load()).get(cls)
    if h is None or not h.peer:
        return
    v = request.getfixturevalue("vantage")
    if f"{h.peer}-{h.first}" not in v.peers_started:
        pytest.skip(f"{cls}: the testbed did not start peer {h.peer} at {h.first} "
                    f"(optional and not installed: scripts/install-peers.sh {h.peer})")
