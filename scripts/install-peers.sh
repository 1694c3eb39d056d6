#!/usr/bin/env bash
# Installs the third-party DNS/DoQ/QUIC servers the testbed runs next to its own servers
# (see docs/peers.md). Called by `./dev install`; safe to run by hand.
#
#   CoreDNS v1.15.0         -> bin/coredns                    (Go module proxy; quic-go)
#   hickory-dns 0.26.3      -> var/peers/bin/hickory-dns      (crates.io; quinn, Rust)
#   aioquic 1.7.2 examples  -> var/peers/aioquic-1.7.2/       (PyPI sdist; doq_server.py)
#   ngtcp2 server/client    -> /usr/sbin/gtlsserver, /usr/bin/gtlsclient (Debian packages)
#   AdGuard dnsproxy v0.78.0 -> var/peers/bin/dnsproxy        (Go module proxy, pinned in testbed/tools/dnsproxy)
#   lazydns 0.2.63          -> var/peers/bin/lazydns          (crates.io; quinn, Rust; DoQ without ALPN;
#                              optional: only `install-peers.sh lazydns` or DOQSCAN_PEERS_OPTIONAL=lazydns)
#
# Idempotent and quiet when everything is installed at the right version: it rebuilds
# only what is missing or at another version. Slow builds are cached where the machine
# keeps them (Go build cache; ~/.cargo registry plus a cargo target directory under
# ${XDG_CACHE_HOME:-~/.cache}/doqscan), so a fresh clone reinstalls in seconds.
# Fails loudly (exit 5, "missing prerequisite") with the step that failed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
export PATH="$PATH:/usr/local/go/bin:$HOME/.cargo/bin"

COREDNS_VERSION=v1.15.0
HICKORY_VERSION=0.26.3
HICKORY_FEATURES=quic-ring,resolver
AIOQUIC_VERSION=1.7.2
DNSPROXY_VERSION=v0.78.0
LAZYDNS_VERSION=0.2.63
LAZYDNS_FEATURES=doq,log

PEERS="$ROOT/var/peers"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/doqscan"

log() { printf '\n== install-peers: %s\n' "$*" >&2; }
fail() {
	printf '\ninstall-peers: FAILED: %s\n' "$*" >&2
	exit 5
}

# reports PATTERN CMD...: CMD's output (captured whole) matches PATTERN. Never pipe a
# version command into `grep -q` under pipefail: grep exits at the first match, the
# command's next write gets SIGPIPE, and the pipeline fails at random (CoreDNS prints
# its version in two writes; CI failed this way on a faster machine).
reports() {
	local pattern=$1 out
	shift
	out=$("$@" 2>/dev/null) || return 1
	grep -q -- "$pattern" <<<"$out"
}

# --- CoreDNS (quic-go) ------------------------------------------------------------
install_coredns() {
	local bin="$ROOT/bin/coredns"
	if [ -x "$bin" ] && reports "CoreDNS-${COREDNS_VERSION#v}" "$bin" -version; then
		return 0
	fi
	command -v go >/dev/null || fail "go not on PATH (needed for CoreDNS $COREDNS_VERSION)"
	log "CoreDNS $COREDNS_VERSION (go install; a few minutes the first time, then cached)"
	mkdir -p "$ROOT/bin"
	GOBIN="$ROOT/bin" GOFLAGS=-buildvcs=false go install "github.com/coredns/coredns@$COREDNS_VERSION" ||
		fail "go install github.com/coredns/coredns@$COREDNS_VERSION"
	reports "CoreDNS-${COREDNS_VERSION#v}" "$bin" -version ||
		fail "bin/coredns -version does not report ${COREDNS_VERSION#v}"
}

# --- hickory-dns (quinn) ----------------------------------------------------------
install_hickory() {
	local bin="$PEERS/bin/hickory-dns"
	if [ -x "$bin" ] && reports " $HICKORY_VERSION\$" "$bin" --version; then
		return 0
	fi
	command -v cargo >/dev/null || fail "cargo not on PATH (needed for hickory-dns $HICKORY_VERSION; install Rust with rustup)"
	log "hickory-dns $HICKORY_VERSION (cargo install; ~3 min on 2 cores the first time, then cached)"
	mkdir -p "$PEERS" "$CACHE/cargo-target"
	# The cargo target directory is shared by every checkout on the machine: two installs
	# at once (a demo and a test run in two clones) removed each other's build output
	# ("failed to copy .../cargo-target/release/hickory-dns"). flock serialises them.
	flock "$CACHE/cargo-target.lock" env CARGO_TARGET_DIR="$CACHE/cargo-target" cargo install --quiet --locked \
		hickory-dns --version "$HICKORY_VERSION" \
		--no-default-features --features "$HICKORY_FEATURES" \
		--root "$PEERS" --force ||
		fail "cargo install hickory-dns --version $HICKORY_VERSION"
	reports " $HICKORY_VERSION\$" "$bin" --version ||
		fail "$bin --version does not report $HICKORY_VERSION"
}

# --- lazydns (quinn) --------------------------------------------------------------
# Only its DoQ server and logging are built (no admin API, metrics or web UI). Its own
# cargo target directory: the first build compiles ~300 crates (~25 min on 2 busy
# cores), later ones relink in seconds.
install_lazydns() {
	local bin="$PEERS/bin/lazydns"
	if [ -x "$bin" ] && reports "^lazydns $LAZYDNS_VERSION\$" "$bin" --version; then
		return 0
	fi
	command -v cargo >/dev/null || fail "cargo not on PATH (needed for lazydns $LAZYDNS_VERSION; install Rust with rustup)"
	log "lazydns $LAZYDNS_VERSION (cargo install; long the first time, then cached)"
	mkdir -p "$PEERS" "$CACHE/cargo-target-lazydns"
	flock "$CACHE/cargo-target-lazydns.lock" env CARGO_TARGET_DIR="$CACHE/cargo-target-lazydns" cargo install --quiet --locked \
		lazydns --version "$LAZYDNS_VERSION" \
		--no-default-features --features "$LAZYDNS_FEATURES" \
		--root "$PEERS" --force ||
		fail "cargo install lazydns --version $LAZYDNS_VERSION"
	reports "^lazydns $LAZYDNS_VERSION\$" "$bin" --version ||
		fail "$bin --version does not report $LAZYDNS_VERSION"
}

# --- aioquic examples (Python) ----------------------------------------------------
install_aioquic() {
	local dir="$PEERS/aioquic-$AIOQUIC_VERSION"
	local py="$ROOT/.venv/bin/python"
	[ -x "$py" ] || fail ".venv missing: run ./dev install (it creates .venv from requirements.txt first)"
	if [ ! -f "$dir/examples/doq_server.py" ]; then
		log "aioquic $AIOQUIC_VERSION examples (pip download of the sdist)"
		local sd="$CACHE/sdist"
		mkdir -p "$sd" "$PEERS"
		local tgz="$sd/aioquic-$AIOQUIC_VERSION.tar.gz"
		if [ ! -f "$tgz" ]; then
			"$py" -m pip download -q --no-binary :all: --no-deps -d "$sd" "aioquic==$AIOQUIC_VERSION" ||
				fail "pip download aioquic==$AIOQUIC_VERSION (sdist)"
		fi
		tar -xzf "$tgz" -C "$PEERS" "aioquic-$AIOQUIC_VERSION/examples" ||
			fail "unpack examples/ from $tgz"
		[ -f "$dir/examples/doq_server.py" ] || fail "$tgz has no examples/doq_server.py"
	fi
	if ! "$py" -c "import aioquic, dnslib, sys; sys.exit(aioquic.__version__ != '$AIOQUIC_VERSION')" 2>/dev/null; then
		log "aioquic==$AIOQUIC_VERSION and dnslib into .venv"
		"$py" -m pip install -q "aioquic==$AIOQUIC_VERSION" dnslib ||
			fail "pip install aioquic==$AIOQUIC_VERSION dnslib"
	fi
}

# --- AdGuard dnsproxy (quic-go; the server behind AdGuard Home) ---------------------
# `go install ...@version` is refused (the proxy serves the module, not its version
# list), so testbed/tools/dnsproxy pins it as a tool of a module of its own. The version
# check reads the module version the binary was built from (`dnsproxy --version` prints
# an empty version without the upstream's ldflags).
install_dnsproxy() {
	local bin="$PEERS/bin/dnsproxy" mod="$ROOT/testbed/tools/dnsproxy"
	if [ -x "$bin" ] && reports "mod[[:space:]]*github.com/AdguardTeam/dnsproxy[[:space:]]*$DNSPROXY_VERSION[[:space:]]" go version -m "$bin"; then
		return 0
	fi
	command -v go >/dev/null || fail "go not on PATH (needed for dnsproxy $DNSPROXY_VERSION)"
	grep -q "github.com/AdguardTeam/dnsproxy $DNSPROXY_VERSION" "$mod/go.mod" ||
		fail "$mod/go.mod does not pin dnsproxy $DNSPROXY_VERSION"
	log "AdGuard dnsproxy $DNSPROXY_VERSION (go build in testbed/tools/dnsproxy; ~1 min the first time, then cached)"
	mkdir -p "$PEERS/bin"
	(cd "$mod" && GOFLAGS=-buildvcs=false go build -o "$bin" github.com/AdguardTeam/dnsproxy) ||
		fail "go build github.com/AdguardTeam/dnsproxy@$DNSPROXY_VERSION"
	reports "mod[[:space:]]*github.com/AdguardTeam/dnsproxy[[:space:]]*$DNSPROXY_VERSION[[:space:]]" go version -m "$bin" ||
		fail "$bin was not built from dnsproxy $DNSPROXY_VERSION"
}

# --- ngtcp2 (Debian) --------------------------------------------------------------
install_ngtcp2() {
	if [ -x /usr/sbin/gtlsserver ] && [ -x /usr/bin/gtlsclient ]; then
		return 0
	fi
	log "ngtcp2-server ngtcp2-client (apt-get)"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends ngtcp2-server ngtcp2-client ||
		fail "apt-get install ngtcp2-server ngtcp2-client"
}

only="${1:-all}"
case "$only" in
all)
	install_ngtcp2
	install_coredns
	install_aioquic
	install_hickory
	install_dnsproxy
	# lazydns is optional (peers.Optional): ~25 min of cargo build the first time, so
	# only when asked: scripts/install-peers.sh lazydns, or DOQSCAN_PEERS_OPTIONAL=lazydns.
	case " ${DOQSCAN_PEERS_OPTIONAL:-} " in *" lazydns "*) install_lazydns ;; esac
	;;
lazydns) install_lazydns ;;
dnsproxy) install_dnsproxy ;;
coredns) install_coredns ;;
hickory) install_hickory ;;
aioquic) install_aioquic ;;
ngtcp2) install_ngtcp2 ;;
*)
	sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
	echo "usage: $0 [all|coredns|hickory|aioquic|ngtcp2|dnsproxy|lazydns]" >&2
	exit 2
	;;
esac
