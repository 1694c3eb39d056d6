package probe

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// DefaultZmap is Debian's zmap 2.1.1.
const DefaultZmap = "/usr/sbin/zmap"

// ZmapRun is one zmap invocation: one probe payload, one port (several with zmap 4.x).
type ZmapRun struct {
	Binary        string
	Dialect       *ZmapDialect // the detected zmap's (DetectZmap); nil: zmap 2.1.1
	Port          uint16
	Ports         []uint16 // several ports in one run (zmap 4.x); overrides Port
	ProbeFile     string   // --probe-args=file:PATH
	BlocklistFile string   // -b, required
	AllowlistFile string   // -w; required unless InternetWide
	InternetWide  bool     // deliberately scan everything not blocklisted
	Rate          int      // -r packets/s, required unless Bandwidth is set; RateUnlimited: -r 0, as fast as zmap can
	Bandwidth     string   // -B, e.g. 1G, 500M (zmap derives its rate from it; excludes Rate)
	Seed          *uint64
	Shards, Shard int
	Interface     string // -i
	GatewayMAC    string // -G
	SourceIP      string // -S
	Cooldown      int    // -c seconds
	ProbesPerHost int    // -P
	MaxTargets    string // -n
	MetadataFile  string // -m
	SenderThreads int    // -T
}

// Errors of Args: the safety rules.
var (
	ErrNoBlocklist = errors.New("zmap: refusing to run without a blocklist (-b)")
	ErrNoTargets   = errors.New("zmap: refusing to run without an allowlist or target list: zmap's default target is the whole IPv4 internet (pass --internet-wide to mean it)")
	ErrSeedShards  = errors.New("zmap: several shards need one shared --seed")
	ErrBadShard    = errors.New("zmap: bad shard")
	ErrBadRate     = errors.New("bad rate")
	ErrNoZmap      = errors.New("zmap not found")
)

// DefaultRate is the send rate (packets/s) of a scan that sets neither a rate nor a
// bandwidth: zmap's own default, passed explicitly.
const DefaultRate = 10000

// Args returns zmap's command line. It never omits -b, and never omits -w unless the
// run is deliberately internet-wide.
func (z ZmapRun) Args() ([]string, error) {
	if z.BlocklistFile == "" {
		return nil, ErrNoBlocklist
	}
	if z.AllowlistFile == "" && !z.InternetWide {
		return nil, ErrNoTargets
	}
	if z.ProbeFile == "" {
		return nil, errors.New("zmap: no probe file")
	}
	d := z.Dialect
	if d == nil {
		d = Zmap21
	}
	ports := z.Ports
	if len(ports) == 0 {
		ports = []uint16{z.Port}
	}
	var portList []string
	for _, p := range ports {
		if p == 0 {
			return nil, errors.New("zmap: no target port")
		}
		portList = append(portList, strconv.Itoa(int(p)))
	}
	if len(ports) > 1 && !d.MultiPort {
		return nil, fmt.Errorf("zmap %s scans one port per run, not %d", d.Name, len(ports))
	}
	shards := max(z.Shards, 1)
	if z.Shards < 0 || z.Shard < 0 || z.Shard >= shards {
		return nil, fmt.Errorf("%w: --shard %d of --shards %d (want 0 <= shard < shards)", ErrBadShard, z.Shard, z.Shards)
	}
	switch {
	case z.Rate == 0 && z.Bandwidth == "":
		return nil, fmt.Errorf("%w: zmap needs a rate (packets/s) or a bandwidth: without either it sends at its built-in default, never an unstated rate", ErrBadRate)
	case z.Rate != 0 && z.Bandwidth != "":
		return nil, fmt.Errorf("%w: give zmap a rate or a bandwidth, not both (zmap derives its rate from the bandwidth)", ErrBadRate)
	case (z.Rate < 0 && z.Rate != RateUnlimited) || z.Rate > MaxRate:
		return nil, fmt.Errorf("%w: %d packets/s, want 1..%d", ErrBadRate, z.Rate, MaxRate)
	}
	if shards > 1 && z.Seed == nil {
		return nil, ErrSeedShards
	}
	if strings.ContainsAny(z.ProbeFile, ",") {
		return nil, fmt.Errorf("zmap: probe file path %q contains a comma", z.ProbeFile)
	}
	a := []string{
		"--probe-module=udp",
		d.PortFlag + "=" + strings.Join(portList, ","),
		"--probe-args=file:" + z.ProbeFile,
		d.BlocklistFlag + "=" + z.BlocklistFile,
		"--output-module=csv",
		"--output-fields=" + strings.Join(d.Fields(), ","),
		"--output-filter=" + ZmapOutputFilter,
		"--output-file=-",
		"--disable-syslog",
	}
	if z.AllowlistFile != "" {
		a = append(a, d.AllowlistFlag+"="+z.AllowlistFile)
	}
	switch {
	case z.Rate > 0:
		a = append(a, "--rate="+strconv.Itoa(z.Rate))
	case z.Rate == RateUnlimited:
		a = append(a, "--rate=0")
	}
	if z.Bandwidth != "" {
		if !regexp.MustCompile(`^[0-9]+[GMK]?$`).MatchString(z.Bandwidth) {
			return nil, fmt.Errorf("zmap: bandwidth %q: want a number with an optional G, M or K", z.Bandwidth)
		}
		a = append(a, "--bandwidth="+z.Bandwidth)
	}
	if z.Seed != nil {
		a = append(a, "--seed="+strconv.FormatUint(*z.Seed, 10))
	}
	if shards > 1 {
		a = append(a, "--shards="+strconv.Itoa(shards), "--shard="+strconv.Itoa(z.Shard))
	}
	for _, kv := range []struct{ flag, v string }{
		{"--interface=", z.Interface}, {"--gateway-mac=", z.GatewayMAC}, {"--source-ip=", z.SourceIP},
		{"--max-targets=", z.MaxTargets}, {"--metadata-file=", z.MetadataFile},
	} {
		if kv.v != "" {
			a = append(a, kv.flag+kv.v)
		}
	}
	if z.Cooldown > 0 {
		a = append(a, "--cooldown-time="+strconv.Itoa(z.Cooldown))
	}
	if z.ProbesPerHost > 1 {
		a = append(a, "--probes="+strconv.Itoa(z.ProbesPerHost))
	}
	if z.SenderThreads > 1 {
		a = append(a, "--sender-threads="+strconv.Itoa(z.SenderThreads))
	}
	return a, nil
}

// RateUnlimited as ZmapRun.Rate (zprobe scan --rate -1) sends as fast as zmap can
// (zmap -r 0): the benchmark's setting, never a production one.
const RateUnlimited = -1

// Bounds of a scan's settings (zprobe's flags). zmap reads its numbers into C ints and
// narrower (a --rate of 2^32 reached it as 0, "no limit"): every value handed to it is
// checked against these first.
const (
	// MaxRate bounds ZmapRun.Rate and SendConfig.Rate (packets/s): beyond what any link
	// zmap drives carries (10 GbE is 14.9 M minimum-size frames/s), far inside an int32
	// (zmap's -r, scans.rate_pps).
	MaxRate = 100_000_000
	// MinSendRate is the slowest rate of the built-in sender (packets/s; scans.rate_pps
	// stores whole packets per second).
	MinSendRate = 1
	// MaxShards bounds ZmapRun.Shards (zmap --shards).
	MaxShards = 255
	// MaxSenderThreads bounds ZmapRun.SenderThreads (zmap -T; zmap numbers its sender
	// threads in 8 bits).
	MaxSenderThreads = 255
	// MaxProbesPerHost bounds ZmapRun.ProbesPerHost (zmap -P).
	MaxProbesPerHost = 255
	// MaxCooldownSeconds bounds ZmapRun.Cooldown (zmap -c), a day.
	MaxCooldownSeconds = 86400
)

// ZmapStatus is one of zmap's once-a-second status lines on stderr, e.g.
// " 0:01 97%; send: 256 done (1.28 Kp/s avg); recv: 98 96 p/s (84 p/s avg); drops: 0 p/s (0 p/s avg); hitrate: 38.28%".
type ZmapStatus struct {
	Elapsed  string
	Percent  float64
	Sent     int64
	Done     bool
	SendRate string
	Recv     int64
	HitRate  float64
}

var statusRE = regexp.MustCompile(`^\s*(\S+)\s+(?:([0-9.]+)%\s*(?:\([^)]*\))?;\s*)?send:\s+(\d+)\s+(done|[0-9.]+ [KMG]?p/s)\s+\(([0-9.]+ [KMG]?p/s) avg\);\s+recv:\s+(\d+)\s.*hitrate:\s+([0-9.]+)%`)

// ParseZmapStatus parses a status line; ok is false for other lines (log lines).
func ParseZmapStatus(line string) (ZmapStatus, bool) {
	m := statusRE.FindStringSubmatch(line)
	if m == nil {
		return ZmapStatus{}, false
	}
	var s ZmapStatus
	s.Elapsed = m[1]
	s.Percent, _ = strconv.ParseFloat(m[2], 64)
	s.Sent, _ = strconv.ParseInt(m[3], 10, 64)
	s.Done = m[4] == "done"
	s.SendRate = m[5]
	s.Recv, _ = strconv.ParseInt(m[6], 10, 64)
	s.HitRate, _ = strconv.ParseFloat(m[7], 64)
	return s, true
}

// ParseRate reads zmap's rate notation ("87 p/s", "1.45 Kp/s", "1.2 Mp/s") as packets/s.
func ParseRate(s string) (float64, bool) {
	num, unit, ok := strings.Cut(strings.TrimSpace(s), " ")
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, false
	}
	switch unit {
	case "p/s":
	case "Kp/s":
		v *= 1e3
	case "Mp/s":
		v *= 1e6
	case "Gp/s":
		v *= 1e9
	default:
		return 0, false
	}
	return v, true
}

// ZmapMeta is what zprobe reads from zmap's metadata file (-m). The keys 3.0 renamed
// are read under either name (the file says which zmap wrote it).
type ZmapMeta struct {
	TotalSent       int64    `json:"total_sent"` // 2.1; packets_sent from 3.0
	SuccessUnique   int64    `json:"success_unique"`
	FailureTotal    int64    `json:"failure_total"`
	HitRate         float64  `json:"hitrate"`
	Allowed         int64    `json:"blacklist_total_allowed"`     // 2.1; blocklist_total_allowed from 3.0
	NotAllowed      int64    `json:"blacklist_total_not_allowed"` // 2.1; blocklist_total_not_allowed from 3.0
	SendToFailures  int64    `json:"send_to_failures"`
	PcapDrop        int64    `json:"pcap_drop"`
	PcapRecv        int64    `json:"pcap_recv"`     // packets the capture filter passed
	SuccessTotal    int64    `json:"success_total"` // replies validated as successes (repeats included)
	SendStartTime   string   `json:"send_start_time"`
	SendEndTime     string   `json:"send_end_time"`
	Seed            uint64   `json:"seed"`
	Rate            int64    `json:"rate"`
	Shard           int      `json:"shard_num"`
	TotalShards     int      `json:"total_shards"`
	BlacklistedNets []string `json:"blacklisted_networks"` // 2.1; blocklisted_networks from 3.0
	WhitelistedNets []string `json:"whitelisted_networks"` // 2.1; allowlisted_networks from 3.0
	TargetPorts     []uint16 `json:"target_ports"`         // 4.x (2.1: target_port)
}

// Discarded is how many packets zmap's capture passed that it counted neither as a
// success nor as a failure: replies that failed its validation (on zmap 2.x also
// good replies lost to ZmapDialect.ValidationRace).
func (m *ZmapMeta) Discarded() int64 { return m.PcapRecv - m.SuccessTotal - m.FailureTotal }

// zmapMeta3 holds the keys 3.0 renamed.
type zmapMeta3 struct {
	PacketsSent    *int64   `json:"packets_sent"`
	Allowed        *int64   `json:"blocklist_total_allowed"`
	NotAllowed     *int64   `json:"blocklist_total_not_allowed"`
	BlocklistedNet []string `json:"blocklisted_networks"`
	AllowlistedNet []string `json:"allowlisted_networks"`
	TargetPort     *uint16  `json:"target_port"`
}

// ReadZmapMeta reads a metadata file.
func ReadZmapMeta(path string) (*ZmapMeta, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m ZmapMeta
	var m3 zmapMeta3
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("zmap metadata %s: %w", path, err)
	}
	if err := json.Unmarshal(b, &m3); err != nil {
		return nil, fmt.Errorf("zmap metadata %s: %w", path, err)
	}
	setIfPresent(&m.TotalSent, m3.PacketsSent)
	setIfPresent(&m.Allowed, m3.Allowed)
	setIfPresent(&m.NotAllowed, m3.NotAllowed)
	if m3.BlocklistedNet != nil {
		m.BlacklistedNets = m3.BlocklistedNet
	}
	if m3.AllowlistedNet != nil {
		m.WhitelistedNets = m3.AllowlistedNet
	}
	if len(m.TargetPorts) == 0 && m3.TargetPort != nil {
		m.TargetPorts = []uint16{*m3.TargetPort}
	}
	return &m, nil
}

// setIfPresent sets *dst to *v when v is present (not nil): a field a source may leave out.
func setIfPresent[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

// StartZmap starts zmap with args; stdout is returned for streaming, stderr status
// lines are relayed through log (progress at info every interval, the rest at debug).
func StartZmap(ctx context.Context, binary string, args []string, log *slog.Logger) (*exec.Cmd, io.ReadCloser, <-chan ZmapStatus, error) {
	if binary == "" {
		binary = DefaultZmap
	}
	if _, err := exec.LookPath(binary); err != nil {
		return nil, nil, nil, fmt.Errorf("%w (%s): %v", ErrNoZmap, binary, err)
	}
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 15 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, nil, fmt.Errorf("start zmap: %w", err)
	}
	status := make(chan ZmapStatus, 1)
	go func() {
		defer close(status)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			if st, ok := ParseZmapStatus(line); ok {
				select { // keep only the latest
				case <-status:
				default:
				}
				status <- st
				continue
			}
			if line = strings.TrimSpace(line); line != "" {
				log.Log(context.Background(), zmapLineLevel(line), "zmap", "line", line)
			}
		}
	}()
	return cmd, stdout, status, nil
}

// PacketsPerSecond is the send rate of z for a probe payload of payloadLen bytes: Rate,
// or Bandwidth turned into packets per second as zmap does (rateFromBandwidth);
// negative for RateUnlimited.
func (z ZmapRun) PacketsPerSecond(payloadLen int) (float64, error) {
	if z.Bandwidth == "" {
		return float64(z.Rate), nil
	}
	return rateFromBandwidth(z.Bandwidth, payloadLen)
}

// zmapLineLevel is the log level for a line zmap wrote to stderr (other than a status
// line): its own [FATAL]/[ERROR] and [WARN] lines at error and warn, its other tagged
// lines at debug, and an untagged line at warn: zmap tags everything it logs itself, so
// an untagged line comes from elsewhere, such as the C library's message before an
// abort ("double free or corruption", a failed assertion), and says why zmap died.
func zmapLineLevel(line string) slog.Level {
	switch {
	case strings.Contains(line, "[FATAL]") || strings.Contains(line, "[ERROR]"):
		return slog.LevelError
	case strings.Contains(line, "[WARN]"):
		return slog.LevelWarn
	case strings.Contains(line, "[INFO]") || strings.Contains(line, "[DEBUG]") || strings.Contains(line, "[TRACE]"):
		return slog.LevelDebug
	default:
		return slog.LevelWarn
	}
}
