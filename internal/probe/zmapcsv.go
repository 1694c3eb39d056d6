package probe

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"time"
)

// ZmapFields are the output fields zprobe asks zmap 2.1.1's udp module for (`zmap
// --probe-module=udp --list-output-fields`); ZmapDialect.Fields gives them per version.
// For an ICMP unreachable the module rewrites saddr to the probed address and puts the
// ICMP sender in icmp_responder.
var ZmapFields = Zmap21.Fields()

// Fields are the output fields zprobe asks this zmap for: the same fields in every
// version, under the version's names.
func (d *ZmapDialect) Fields() []string {
	return []string{"saddr", "sport", "dport", "classification", "success", "repeat",
		"icmp_type", "icmp_code", "icmp_responder", "udp_pkt_size", "data", d.TimestampSec, d.TimestampUsec}
}

// icmpClasses are the udp module's classifications of an ICMP reply in every dialect.
var icmpClasses = func() map[string]bool {
	m := map[string]bool{}
	for _, d := range zmapDialects {
		m[d.ICMPClass] = true
	}
	return m
}()

// timestampFields are the (seconds, microseconds) field names of every dialect.
var timestampFields = func() (out [][2]string) {
	seen := map[string]bool{}
	for _, v := range []int{2, 3, 4} {
		d := zmapDialects[v]
		if !seen[d.TimestampSec] {
			seen[d.TimestampSec] = true
			out = append(out, [2]string{d.TimestampSec, d.TimestampUsec})
		}
	}
	return out
}()

// ErrNoPort is returned for a reply of a several-port run that names no port: zmap 4.x's
// udp module gives an ICMP unreachable no port field, so it cannot be told which of the
// run's ports it answers. Such lines are counted (Ingest.NoPort), not stored.
var ErrNoPort = errors.New("zmap csv: reply of a several-port run without a port")

// ZmapOutputFilter keeps every first response (UDP and ICMP), dropping repeats; zmap's
// default filter ("success = 1 && repeat = 0") would drop the ICMP unreachables.
const ZmapOutputFilter = "repeat = 0"

// CSVReader parses zmap's CSV output lines (header first) into Replies.
type CSVReader struct {
	Port  uint16   // the run's target port (ICMP rows carry no dport)
	Ports []uint16 // the ports of a several-port run (zmap 4.x): a UDP reply's sport says which
	col   map[string]int
	cols  [][]byte
}

// ErrNoHeader is returned for a data line before the header.
var ErrNoHeader = errors.New("zmap csv: data before the header line")

// Header reads the header line; it must name saddr.
func (r *CSVReader) Header(line []byte) error {
	r.col = map[string]int{}
	for i, f := range bytes.Split(bytes.TrimRight(line, "\r\n"), []byte{','}) {
		r.col[string(f)] = i
	}
	if _, ok := r.col["saddr"]; !ok {
		r.col = nil
		return fmt.Errorf("zmap csv: header %q has no saddr", line)
	}
	return nil
}

// HasHeader says whether the header was read.
func (r *CSVReader) HasHeader() bool { return r.col != nil }

func (r *CSVReader) field(name string) []byte {
	i, ok := r.col[name]
	if !ok || i >= len(r.cols) {
		return nil
	}
	return r.cols[i]
}

// Parse turns one data line into a Reply. The fields zprobe requests never contain a
// comma or quote; a line with a different column count is an error (counted, logged).
func (r *CSVReader) Parse(line []byte) (Reply, error) {
	var rep Reply
	if r.col == nil {
		return rep, ErrNoHeader
	}
	line = bytes.TrimRight(line, "\r\n")
	r.cols = r.cols[:0]
	for {
		i := bytes.IndexByte(line, ',')
		if i < 0 {
			r.cols = append(r.cols, line)
			break
		}
		r.cols = append(r.cols, line[:i])
		line = line[i+1:]
	}
	if len(r.cols) != len(r.col) {
		return rep, fmt.Errorf("zmap csv: %d columns, header has %d", len(r.cols), len(r.col))
	}
	a, err := netip.ParseAddr(string(r.field("saddr")))
	if err != nil {
		return rep, fmt.Errorf("zmap csv: saddr: %w", err)
	}
	rep.Addr = a
	rep.Port = r.Port
	rep.Sport = -1
	if sp := r.field("sport"); len(sp) > 0 {
		n, err := strconv.Atoi(string(sp))
		if err != nil || n < 0 || n > 65535 {
			return rep, fmt.Errorf("zmap csv: sport %q", sp)
		}
		rep.Sport = n
	}
	isICMP := icmpClasses[string(r.field("classification"))] || len(r.field("icmp_type")) > 0
	if len(r.Ports) > 1 {
		if isICMP || rep.Sport < 0 {
			return rep, ErrNoPort
		}
		found := false
		for _, p := range r.Ports {
			if int(p) == rep.Sport {
				found = true
				break
			}
		}
		if !found {
			return rep, fmt.Errorf("zmap csv: sport %d is none of the run's ports %v", rep.Sport, r.Ports)
		}
		rep.Port = uint16(rep.Sport)
	}
	rep.ICMPType = -1
	if isICMP {
		t, err1 := strconv.Atoi(string(r.field("icmp_type")))
		c, err2 := strconv.Atoi(string(r.field("icmp_code")))
		if err1 != nil || err2 != nil || t < 0 || t > 255 || c < 0 || c > 255 {
			return rep, fmt.Errorf("zmap csv: icmp type/code %q/%q", r.field("icmp_type"), r.field("icmp_code"))
		}
		rep.ICMPType, rep.ICMPCode = t, c
	} else if d := r.field("data"); len(d) > 0 {
		rep.Payload = make([]byte, hex.DecodedLen(len(d)))
		if _, err := hex.Decode(rep.Payload, d); err != nil {
			return rep, fmt.Errorf("zmap csv: data: %w", err)
		}
	} else {
		rep.Payload = []byte{}
	}
	for _, tf := range timestampFields {
		if ts := r.field(tf[0]); len(ts) > 0 {
			s, err := strconv.ParseInt(string(ts), 10, 64)
			if err != nil {
				return rep, fmt.Errorf("zmap csv: %s %q", tf[0], ts)
			}
			us, _ := strconv.ParseInt(string(r.field(tf[1])), 10, 64)
			rep.Received = time.Unix(s, us*1000).UTC()
			break
		}
	}
	return rep, nil
}
