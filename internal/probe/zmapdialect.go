package probe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"time"
)

// ZmapDialect is what differs between the zmap versions zprobe drives: flag names,
// output field names, the udp module's ICMP classification and the metadata keys. It is
// the one place that knows them (read from zmap's source: src/zopt.ggo.in,
// src/probe_modules/probe_modules.c, src/probe_modules/module_udp.c, src/summary.c of
// each release).
type ZmapDialect struct {
	Name string // "2.1", "3", "4"

	// Flags.
	PortFlag      string // one port (2.1, 3) or a comma-separated list (4)
	MultiPort     bool   // one run scans several ports (4.0: --target-ports)
	BlocklistFlag string // 3.0 renamed blacklist/whitelist
	AllowlistFlag string

	// Output fields of the udp module and the system fields.
	TimestampSec  string // timestamp-ts (2.1), timestamp_ts (3+)
	TimestampUsec string
	ICMPClass     string // the udp module's classification of an ICMP reply

	// Metadata (-m) keys.
	MetaSent    string // probes sent: total_sent (2.1), packets_sent (3+)
	MetaAllowed string // addresses allowed by the allow/blocklists

	// ValidationRace: validate_gen builds its AES input in a static buffer that the
	// send and receive threads share (2.x; zmap#519, fixed in 3.0.0 by zmap#612), so a
	// reply that arrives while zmap still sends can be checked against another target
	// and discarded (ZmapMeta.Discarded counts it).
	ValidationRace bool
}

// zmapDialects by major version: the one table of zmap's dialects.
//
// Common to all: --probe-module=udp, --probe-args=file:, --output-module=csv,
// --output-fields, --output-filter, --output-file, --metadata-file, --rate,
// --bandwidth, --seed, --shards, --shard, --interface, --gateway-mac, --source-ip,
// --cooldown-time, --probes, --max-targets, --sender-threads, --disable-syslog. From
// 3.0 giving --output-fields turns zmap's default filter off; zprobe always passes its
// own --output-filter, so this changes nothing. Every version prints the CSV header
// row (3.0+ unless --no-header-row, which zprobe never passes).
var zmapDialects = map[int]*ZmapDialect{
	2: {Name: "2.1", PortFlag: "--target-port", BlocklistFlag: "--blacklist-file", AllowlistFlag: "--whitelist-file",
		TimestampSec: "timestamp-ts", TimestampUsec: "timestamp-us", ICMPClass: "icmp-unreach",
		MetaSent: "total_sent", MetaAllowed: "blacklist_total_allowed", ValidationRace: true},
	3: {Name: "3", PortFlag: "--target-port", BlocklistFlag: "--blocklist-file", AllowlistFlag: "--allowlist-file",
		TimestampSec: "timestamp_ts", TimestampUsec: "timestamp_us", ICMPClass: "icmp",
		MetaSent: "packets_sent", MetaAllowed: "blocklist_total_allowed"},
	4: {Name: "4", PortFlag: "--target-ports", MultiPort: true, BlocklistFlag: "--blocklist-file", AllowlistFlag: "--allowlist-file",
		TimestampSec: "timestamp_ts", TimestampUsec: "timestamp_us", ICMPClass: "icmp",
		MetaSent: "packets_sent", MetaAllowed: "blocklist_total_allowed"},
}

// Zmap21 is Debian bookworm's zmap 2.1.1, the dialect of a ZmapRun that names none.
var Zmap21 = zmapDialects[2]

// ZmapVersion is what `zmap --version` says.
type ZmapVersion struct {
	Binary              string
	Raw                 string // the first line, e.g. "zmap 2.1.1", "zmap v4.3.4"
	Major, Minor, Patch int
	Dialect             *ZmapDialect
}

// String is "2.1.1".
func (v ZmapVersion) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// ErrZmapVersion says zmap's version is one zprobe does not know how to drive (or zmap
// did not say): a missing prerequisite (exit 5), never a guess.
var ErrZmapVersion = errors.New("unsupported zmap version")

var zmapVersionRE = regexp.MustCompile(`^zmap v?(\d+)\.(\d+)\.(\d+)`)

// ParseZmapVersion reads the output of `zmap --version` ("zmap 2.1.1" from 2.1.1,
// "zmap v4.3.4" from release builds of 3.x/4.x). A development build ("zmap
// Development Build. Commit ...") or a major version zprobe has no dialect for fails
// with ErrZmapVersion.
func ParseZmapVersion(out []byte) (ZmapVersion, error) {
	line, _, _ := bytes.Cut(bytes.TrimSpace(out), []byte("\n"))
	v := ZmapVersion{Raw: string(bytes.TrimSpace(line))}
	m := zmapVersionRE.FindStringSubmatch(v.Raw)
	if m == nil {
		return v, fmt.Errorf("%w: `zmap --version` said %q (want \"zmap X.Y.Z\")", ErrZmapVersion, v.Raw)
	}
	v.Major, _ = strconv.Atoi(m[1])
	v.Minor, _ = strconv.Atoi(m[2])
	v.Patch, _ = strconv.Atoi(m[3])
	v.Dialect = zmapDialects[v.Major]
	if v.Dialect == nil || (v.Major == 2 && v.Minor < 1) {
		return v, fmt.Errorf("%w: zmap %s (zprobe drives 2.1.x, 3.x and 4.x)", ErrZmapVersion, v)
	}
	return v, nil
}

// DetectZmap runs `binary --version` and returns the version and dialect zprobe will
// use with it. It is the one function that says which zmap a scan runs (the scan
// records it; provenance can call it too). A missing binary wraps ErrNoZmap, an
// unknown version ErrZmapVersion.
func DetectZmap(ctx context.Context, binary string) (ZmapVersion, error) {
	if binary == "" {
		binary = DefaultZmap
	}
	path, err := exec.LookPath(binary)
	if err != nil {
		return ZmapVersion{Binary: binary}, fmt.Errorf("%w (%s): %v", ErrNoZmap, binary, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return ZmapVersion{Binary: path}, fmt.Errorf("%w: %s --version: %v", ErrZmapVersion, path, err)
	}
	v, err := ParseZmapVersion(out)
	v.Binary = path
	if err != nil {
		return v, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}
