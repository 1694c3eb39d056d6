// Command fakezmap stands in for zmap 4.x, which does not install here: it checks that
// its command line is one zmap 4.3.4 accepts and that zprobe must give it, then replays
// a recorded run (../zmap4, see its README.md). It sends nothing.
//
//	FAKEZMAP_VERSION  what --version prints (default "zmap v4.3.4")
//	FAKEZMAP_DIR      the recordings: <ports joined by _>.csv and .meta.json, stderr
//	FAKEZMAP_LOG      each run's argv is appended to it, one line per run
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// options are the long options of zmap 4.3.4's src/zopt.ggo.in.
var options = map[string]bool{}

func init() {
	for _, o := range strings.Fields(`target-ports output-file blocklist-file allowlist-file list-of-ips-file rate
		bandwidth batch max-targets max-runtime max-results probes cooldown-time seed retries dryrun fast-dryrun
		shards shard source-port validate-source-port source-ip gateway-mac source-mac interface iplayer
		netmap-wait-ping probe-module probe-args probe-ttl list-probe-modules output-fields output-module
		output-args output-filter list-output-modules list-output-fields no-header-row dedup-method
		dedup-window-size verbosity log-file log-directory metadata-file status-updates-file quiet disable-syslog
		notes user-metadata config max-sendto-failures min-hitrate sender-threads cores ignore-blocklist-errors
		help version`) {
		options[o] = true
	}
}

// wantFields are the udp module's and the system fields zprobe must ask zmap 4.x for
// (module_udp.c fields[], probe_modules.c system fields: underscores since 3.0).
const wantFields = "saddr,sport,dport,classification,success,repeat,icmp_type,icmp_code,icmp_responder,udp_pkt_size,data,timestamp_ts,timestamp_us"

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "fakezmap: "+format+"\n", a...)
	os.Exit(1)
}

func main() {
	args := os.Args[1:]
	if len(args) == 1 && args[0] == "--version" {
		v := os.Getenv("FAKEZMAP_VERSION")
		if v == "" {
			v = "zmap v4.3.4"
		}
		fmt.Println(v)
		return
	}
	if log := os.Getenv("FAKEZMAP_LOG"); log != "" {
		f, err := os.OpenFile(log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			fail("%v", err)
		}
		fmt.Fprintln(f, strings.Join(args, " "))
		f.Close()
	}
	got := map[string]string{}
	for _, a := range args {
		name, val, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !options[name] {
			// gengetopt's getopt_long would take an unambiguous prefix; zprobe must
			// give full names (--target-port is not 4.x's --target-ports).
			fail("unrecognized option '%s' (not a zmap 4.3.4 option)", a)
		}
		if _, dup := got[name]; dup {
			fail("option '%s' given twice", name)
		}
		got[name] = val
	}
	for name, want := range map[string]string{"probe-module": "udp", "output-module": "csv", "output-file": "-",
		"output-fields": wantFields, "output-filter": "repeat = 0"} {
		if got[name] != want {
			fail("--%s=%q, want %q", name, got[name], want)
		}
	}
	if _, ok := got["no-header-row"]; ok {
		fail("--no-header-row: zprobe reads the header")
	}
	for _, name := range []string{"blocklist-file", "allowlist-file", "metadata-file", "target-ports", "probe-args", "rate"} {
		if got[name] == "" {
			fail("--%s missing", name)
		}
	}
	for _, name := range []string{"blocklist-file", "allowlist-file"} {
		b, err := os.ReadFile(got[name])
		if err != nil || len(strings.TrimSpace(string(b))) == 0 {
			fail("--%s: %v (empty or unreadable)", name, err)
		}
	}
	probe := strings.TrimPrefix(got["probe-args"], "file:")
	if _, err := os.Stat(probe); err != nil || probe == got["probe-args"] {
		fail("--probe-args=%s: want file:PATH of an existing file", got["probe-args"])
	}
	if !strings.HasSuffix(got["metadata-file"], ".part") {
		fail("--metadata-file=%s: zprobe writes it as .part", got["metadata-file"])
	}
	dir := os.Getenv("FAKEZMAP_DIR")
	base := strings.ReplaceAll(got["target-ports"], ",", "_")
	csv, err := os.ReadFile(filepath.Join(dir, base+".csv"))
	if err != nil {
		fail("no recording for --target-ports=%s: %v", got["target-ports"], err)
	}
	meta, err := os.ReadFile(filepath.Join(dir, base+".meta.json"))
	if err != nil {
		fail("%v", err)
	}
	if st, err := os.ReadFile(filepath.Join(dir, "stderr")); err == nil {
		os.Stderr.Write(st)
	}
	if _, err := os.Stdout.Write(csv); err != nil {
		fail("%v", err)
	}
	if err := os.WriteFile(got["metadata-file"], meta, 0o644); err != nil {
		fail("%v", err)
	}
}
