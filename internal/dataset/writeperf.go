package dataset

import (
	"bytes"
	"compress/gzip"
	"net/netip"
	"sort"
	"time"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/store"
)

// writePerf stores the performance database: one campaign per hour of measurements, the
// measurements (warm-up and measured), the destination hop of each traceroute as an RTT
// sample, and the qlogs of measured DoQ queries.
func (w *writer) writePerf(cfg Config, ds int64, pf perfFile) error {
	hours, err := w.perfCampaigns(cfg, ds, pf)
	if err != nil {
		return err
	}
	byID, err := w.writeMeasurements(pf.DB, hours)
	if err != nil {
		return err
	}
	return w.writeRTTs(pf.DB, hours, byID)
}

// perfHours are the campaigns of a performance database, one per hour of measurements.
type perfHours struct {
	campaign map[time.Time]int64 // round hour -> campaign
	hourOf   map[int64]time.Time // campaign -> its round_hour, its rows' partition key
}

// perfCampaigns stores a campaign for each hour of the database's measurements, from
// its first to its last measurement of the hour, in time order.
func (w *writer) perfCampaigns(cfg Config, ds int64, pf perfFile) (perfHours, error) {
	type hourSpan struct{ start, end time.Time }
	spans := map[time.Time]*hourSpan{}
	for _, m := range pf.DB.Measurements {
		h := m.Created.Truncate(time.Hour)
		s := spans[h]
		if s == nil {
			s = &hourSpan{m.Created, m.Created}
			spans[h] = s
		}
		if m.Created.Before(s.start) {
			s.start = m.Created
		}
		if m.Created.After(s.end) {
			s.end = m.Created
		}
	}
	hours := perfHours{campaign: map[time.Time]int64{}, hourOf: map[int64]time.Time{}}
	var hs []time.Time
	for h := range spans {
		hs = append(hs, h)
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i].Before(hs[j]) })
	for _, h := range hs {
		id, err := w.campaign(cfg, cfg.Label, h, spans[h].start, spans[h].end, ds, pf.Path)
		if err != nil {
			return hours, err
		}
		hours.campaign[h] = id
		hours.hourOf[id] = h
	}
	return hours, nil
}

// writeMeasurements stores the measurements in (created, id) order (several of one
// natural key in one hour get seq 0, 1, 2, ...) and the qlogs of the measured DoQ
// queries. It returns each dns_measurement_id's key: its measured row's, else its
// first warm-up's.
func (w *writer) writeMeasurements(db *perfDB, hours perfHours) (map[string]store.MeasurementKey, error) {
	ms := append([]perfMeasurement(nil), db.Measurements...)
	sort.SliceStable(ms, func(i, j int) bool {
		if !ms[i].Created.Equal(ms[j].Created) {
			return ms[i].Created.Before(ms[j].Created)
		}
		return ms[i].ID < ms[j].ID
	})
	seqs := map[store.MeasurementKey]int16{}
	byID := map[string]store.MeasurementKey{} // dns_measurement_id -> the measured row's key
	var rows []store.Measurement
	var qlogs []store.Qlog
	for _, m := range ms {
		proto := perfProtocols[m.Protocol]
		phase := "measured"
		if m.Warmup {
			phase = "warmup"
		}
		k := store.MeasurementKey{CampaignID: hours.campaign[m.Created.Truncate(time.Hour)], Address: m.Addr,
			Protocol: proto, Port: m.Port, Mode: "fresh", Phase: phase}
		base := k
		k.Seq = seqs[base]
		seqs[base]++
		if !m.Warmup {
			byID[m.ID] = k
		} else if _, ok := byID[m.ID]; !ok {
			byID[m.ID] = k
		}
		row := perfRow(k, hours.hourOf[k.CampaignID], m)
		if nd, ok := db.Qlogs[m.ID]; ok && proto == "doq" && !m.Warmup {
			q, err := gzipQlog(k, hours.hourOf[k.CampaignID], m, nd)
			if err != nil {
				return nil, err
			}
			qlogs = append(qlogs, q)
			id := q.QlogID
			row.QlogID = &id
		}
		rows = append(rows, row)
	}
	if err := insert(w, store.TableQlogs, qlogs); err != nil {
		return nil, err
	}
	return byID, insert(w, store.TableMeasurements, rows)
}

// perfRow is the measurements row of the study's measurement m under key k.
func perfRow(k store.MeasurementKey, hour time.Time, m perfMeasurement) store.Measurement {
	row := store.Measurement{MeasurementID: k.ID(), CampaignID: k.CampaignID, Address: m.Addr, Protocol: k.Protocol,
		Port: m.Port, Mode: "fresh", Phase: k.Phase, Seq: k.Seq, StartedAt: m.Created,
		HandshakeNS: perfHandshake(k.Protocol, m), ResolveNS: m.QueryTime, TLSVersion: int32Ptr(m.TLSVersion),
		RoundHour: hour}
	if m.Error == "" {
		row.Status = "ok"
		row.Rcode = int16Ptr(m.RCode)
		if m.ResponseIP != "" {
			row.Answers = []string{m.ResponseIP}
		}
	} else {
		row.Status, row.Error = "error", m.Error
	}
	if k.Protocol == "doq" {
		row.QUICVersion = m.QUICVersion
		row.ALPN = strPtr(m.ALPN)
	}
	return row
}

// writeRTTs stores the RTT of each measurement: its traceroute's destination hop, over
// the transport the measurement's protocol uses (a hop without a positive RTT is a
// timeout).
func (w *writer) writeRTTs(db *perfDB, hours perfHours, byID map[string]store.MeasurementKey) error {
	type rttKey struct {
		c int64
		a netip.Addr
		t string
		p int32
	}
	rseq := map[rttKey]int16{}
	var samples []store.RTTSample
	hops := append([]perfHop(nil), db.Traceroutes...)
	sort.SliceStable(hops, func(i, j int) bool { return hops[i].MeasurementID < hops[j].MeasurementID })
	for _, h := range hops {
		k, ok := byID[h.MeasurementID]
		if !ok {
			continue
		}
		t := string(measure.Protocol(k.Protocol).Transport())
		rk := rttKey{k.CampaignID, h.Dest, t, h.Port}
		seq := rseq[rk]
		rseq[rk]++
		at := time.Time{}
		if h.At != nil {
			at = *h.At
		}
		s := store.RTTSample{CampaignID: k.CampaignID, Address: h.Dest, Transport: t, Port: h.Port, Seq: seq,
			SentAt: at, RTTNS: h.RTT, Status: "ok", Detail: "traceroute destination hop", RoundHour: hours.hourOf[k.CampaignID]}
		if h.RTT == nil || *h.RTT <= 0 {
			s.Status, s.RTTNS = "timeout", nil
		}
		samples = append(samples, s)
	}
	return insert(w, store.TableRTTSamples, samples)
}

// perfHandshake applies the study's definitions: DoTCP the TCP handshake, DoT/DoH TCP +
// TLS, DoQ the QUIC dial (VN and Retry included); DoUDP has none.
func perfHandshake(proto string, m perfMeasurement) *int64 {
	switch proto {
	case "dotcp":
		return m.TCPHandshake
	case "dot", "doh":
		if m.TCPHandshake == nil || m.TLSHandshake == nil {
			return nil
		}
		v := *m.TCPHandshake + *m.TLSHandshake
		return &v
	case "doq":
		return m.QUICHandshake
	}
	return nil
}

func gzipQlog(k store.MeasurementKey, hour time.Time, m perfMeasurement, nd []byte) (store.Qlog, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(nd) //nolint:errcheck // a bytes.Buffer does not fail
	if err := zw.Close(); err != nil {
		return store.Qlog{}, err
	}
	return store.Qlog{QlogID: k.QlogID(), CampaignID: k.CampaignID, Address: m.Addr, Port: m.Port,
		Encoding: "gzip", Format: "qlog-ndjson", RawSize: int32(len(nd)), Data: buf.Bytes(), CreatedAt: m.Created,
		RoundHour: hour}, nil
}
