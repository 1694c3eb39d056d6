package dataset

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/netip"
	"strconv"
	"time"
)

// miscDB is one SQLite file of the study's misc measurements (one week).
type miscDB struct {
	Versions []miscVersion
	Certs    []miscCert
	TFO      []miscSupport
	ZeroRTT  []miscSupport
	EDNS     []miscSupport // edns-tcp-keepalive (port not recorded: 0)
	First    *time.Time    // earliest created_at
}

type miscVersion struct {
	Addr    netip.Addr
	Port    int32
	Version *int64
	ALPN    string
}

type miscCert struct {
	Protocol string
	Port     int32
	Addr     netip.Addr
	DER      []byte
}

type miscSupport struct {
	Addr      netip.Addr
	Port      int32
	Supported *bool
	Detail    string
}

// miscTables are the tables of the misc schema (all must be present).
var miscTables = []string{"q_versions", "certificates", "fast_open_supports", "e_dns0", "q0_rtt_supports"}

func (m *miscDB) seen(t *time.Time) {
	if t != nil && (m.First == nil || t.Before(*m.First)) {
		m.First = t
	}
}

func readMisc(ctx context.Context, db *sql.DB) (*miscDB, int64, error) {
	m := &miscDB{}
	var n int64
	err := eachRow(ctx, db, "q_versions", []string{"created_at", "ip", "port", "q_version", "draft_version"}, func(r *sqlRow) error {
		n++
		m.seen(r.time("created_at"))
		m.Versions = append(m.Versions, miscVersion{Addr: r.addr("ip"), Port: r.port("port"), Version: r.int("q_version"), ALPN: r.str("draft_version")})
		return nil
	})
	if err != nil {
		return nil, n, err
	}
	err = eachRow(ctx, db, "certificates", []string{"created_at", "protocol", "port", "ip", "raw"}, func(r *sqlRow) error {
		n++
		m.seen(r.time("created_at"))
		c := miscCert{Protocol: r.str("protocol"), Port: r.port("port"), Addr: r.addr("ip"), DER: r.bytes("raw")}
		if !certProtocols[c.Protocol] {
			return malformed("column protocol: %q, want tls, https or quic", clip(c.Protocol))
		}
		m.Certs = append(m.Certs, c)
		return nil
	})
	if err != nil {
		return nil, n, err
	}
	for _, t := range []struct {
		table string
		dst   *[]miscSupport
	}{{"fast_open_supports", &m.TFO}, {"q0_rtt_supports", &m.ZeroRTT}} {
		err = eachRow(ctx, db, t.table, []string{"created_at", "ip", "port", "support"}, func(r *sqlRow) error {
			n++
			m.seen(r.time("created_at"))
			*t.dst = append(*t.dst, miscSupport{Addr: r.addr("ip"), Port: r.port("port"), Supported: r.boolean("support")})
			return nil
		})
		if err != nil {
			return nil, n, err
		}
	}
	err = eachRow(ctx, db, "e_dns0", []string{"created_at", "ip", "support", "timeout"}, func(r *sqlRow) error {
		n++
		m.seen(r.time("created_at"))
		s := miscSupport{Addr: r.addr("ip"), Supported: r.boolean("support"), Detail: "port not recorded"}
		if to := r.int("timeout"); to != nil {
			s.Detail += "; timeout " + strconv.FormatInt(*to, 10)
		}
		m.EDNS = append(m.EDNS, s)
		return nil
	})
	return m, n, err
}

// perfDB is the study's performance database (dns_measurements, traceroutes,
// q_log_outputs), read whole.
type perfDB struct {
	Measurements []perfMeasurement
	Traceroutes  []perfHop // only the hops that reached the destination (hop_ip = dest_ip)
	OtherHops    int64
	Qlogs        map[string][]byte // dns_measurement_id -> NDJSON
}

type perfMeasurement struct {
	ID                                   string
	Warmup                               bool
	Addr                                 netip.Addr
	Port                                 int32
	Protocol                             string // udp | tcp | tls | https | quic
	Created                              time.Time
	UDPSetup, TCPHandshake, TLSHandshake *int64
	TLSVersion, TLSError                 *int64
	QUICHandshake, QUICVersion, QUICErr  *int64
	ALPN, HTTPVersion                    string
	QueryTime, TotalTime                 *int64
	RCode                                *int64
	ResponseIP                           string
	Error                                string
}

type perfHop struct {
	MeasurementID string
	At            *time.Time
	Dest          netip.Addr
	Port          int32
	RTT           *int64
}

var perfProtocols = map[string]string{"udp": "doudp", "tcp": "dotcp", "tls": "dot", "https": "doh", "quic": "doq"}

var perfMeasurementColumns = []string{"id", "cache_warming", "ip", "port", "protocol", "created",
	"udp_socket_setup_duration", "tcp_handshake_duration", "tls_handshake_duration", "tls_version", "tls_error",
	"q_ui_c_handshake_duration", "q_ui_c_version", "q_ui_c_negotiated_protocol", "q_ui_c_error", "http_version",
	"query_time", "total_time", "r_code", "response_ip", "error"}

func readPerf(ctx context.Context, db *sql.DB) (*perfDB, int64, error) {
	p := &perfDB{Qlogs: map[string][]byte{}}
	var n int64
	err := eachRow(ctx, db, "dns_measurements", perfMeasurementColumns, func(r *sqlRow) error {
		n++
		m := perfMeasurement{ID: r.str("id"), Addr: r.addr("ip"), Port: r.port("port"), Protocol: r.str("protocol"),
			UDPSetup: r.int("udp_socket_setup_duration"), TCPHandshake: r.int("tcp_handshake_duration"),
			TLSHandshake: r.int("tls_handshake_duration"), TLSVersion: r.int("tls_version"), TLSError: r.int("tls_error"),
			QUICHandshake: r.int("q_ui_c_handshake_duration"), QUICVersion: r.int("q_ui_c_version"),
			ALPN: r.str("q_ui_c_negotiated_protocol"), QUICErr: r.int("q_ui_c_error"), HTTPVersion: r.str("http_version"),
			QueryTime: r.int("query_time"), TotalTime: r.int("total_time"), RCode: r.int("r_code"),
			ResponseIP: r.str("response_ip"), Error: r.str("error")}
		if w := r.boolean("cache_warming"); w != nil {
			m.Warmup = *w
		}
		if c := r.time("created"); c != nil {
			m.Created = *c
		} else {
			return malformed("column created: missing")
		}
		if m.ID == "" {
			return malformed("column id: empty")
		}
		if _, ok := perfProtocols[m.Protocol]; !ok {
			return malformed("column protocol: %q, want udp, tcp, tls, https or quic", clip(m.Protocol))
		}
		p.Measurements = append(p.Measurements, m)
		return nil
	})
	if err != nil {
		return nil, n, err
	}
	err = eachRow(ctx, db, "traceroutes", []string{"dns_measurement_id", "timestamp", "dest_ip", "dest_port", "hop_ip", "rtt"}, func(r *sqlRow) error {
		n++
		h := perfHop{MeasurementID: r.str("dns_measurement_id"), At: r.time("timestamp"), Dest: r.addr("dest_ip"),
			Port: r.port("dest_port"), RTT: r.int("rtt")}
		hop := r.str("hop_ip")
		if a, err := netip.ParseAddr(hop); err != nil || a.Unmap() != h.Dest {
			p.OtherHops++
			return nil
		}
		p.Traceroutes = append(p.Traceroutes, h)
		return nil
	})
	if err != nil {
		return nil, n, err
	}
	err = eachRow(ctx, db, "q_log_outputs", []string{"dns_measurement_id", "content"}, func(r *sqlRow) error {
		n++
		id, content := r.str("dns_measurement_id"), r.str("content")
		var lines []json.RawMessage
		if err := json.Unmarshal([]byte(content), &lines); err != nil {
			return malformed("column content: want a JSON array of qlog lines: %v", err)
		}
		var nd []byte
		for _, l := range lines {
			var text string
			if json.Unmarshal(l, &text) == nil { // a line stored as a JSON string
				l = json.RawMessage(text)
			}
			nd = append(nd, l...)
			nd = append(nd, '\n')
		}
		p.Qlogs[id] = nd
		return nil
	})
	return p, n, err
}
