package measure

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/qlogwriter/jsontext"

	"github.com/doqscan/doqscan/internal/kstamp"
	"github.com/doqscan/doqscan/internal/measure/qlogana"
)

// textEvent is a qlog event carrying one string.
type textEvent string

func (textEvent) Name() string { return "test:text" }

func (e textEvent) Encode(enc *jsontext.Encoder, _ time.Time) error {
	if err := enc.WriteToken(jsontext.BeginObject); err != nil {
		return err
	}
	if err := enc.WriteToken(jsontext.String("text")); err != nil {
		return err
	}
	if err := enc.WriteToken(jsontext.String(string(e))); err != nil {
		return err
	}
	return enc.WriteToken(jsontext.EndObject)
}

// recordQlog writes events into a qlogBuffer of the given limit through quic-go's qlog
// writer, over traces connection attempts, and returns what the buffer holds.
func recordQlog(t testing.TB, limit, traces int, events []string) ([]byte, bool) {
	t.Helper()
	b := newQlogBufferLimit(limit)
	for i := 0; i < traces; i++ {
		tr := b.tracer(context.Background(), true, quic.ConnectionIDFromBytes([]byte{1, 2, 3, 4, 5, 6, 7, byte(i)}))
		if tr == nil {
			t.Fatal("no trace")
		}
		r := tr.AddProducer()
		for _, e := range events {
			r.RecordEvent(textEvent(e))
		}
		_ = r.Close() // the last producer: the trace drains and closes
	}
	return b.bytes(nil)
}

// checkRecords: every record of out is a complete JSON object; all but a final
// truncation record are trace headers or the events written, in order.
func checkRecords(t testing.TB, out []byte, events []string, truncated bool) {
	t.Helper()
	recs := bytes.Split(out, []byte{0x1e})
	if len(recs) == 0 || len(recs[0]) != 0 {
		t.Fatalf("qlog does not start with a record separator: %q", out[:min(len(out), 20)])
	}
	recs = recs[1:]
	next := 0
	for i, rec := range recs {
		var r struct {
			Name string `json:"name"`
			Data struct {
				Text string `json:"text"`
			} `json:"data"`
			Trace json.RawMessage `json:"trace"`
		}
		if err := json.Unmarshal(rec, &r); err != nil {
			t.Fatalf("record %d of %d is not whole JSON (%v): %q", i, len(recs), err, rec)
		}
		switch {
		case r.Trace != nil:
			next = 0 // a new trace repeats the events
		case r.Name == qlogana.TruncatedEvent:
			if !truncated || i != len(recs)-1 {
				t.Fatalf("truncation record %d of %d, truncated %v", i, len(recs), truncated)
			}
		default:
			if next >= len(events) || r.Data.Text != events[next] {
				t.Fatalf("record %d: %q, want event %d", i, r.Data.Text, next)
			}
			next++
		}
	}
	if truncated && !bytes.Contains(recs[len(recs)-1], []byte(qlogana.TruncatedEvent)) {
		t.Fatal("truncated qlog without the truncation record")
	}
}

func TestQlogBufferCutsAtARecord(t *testing.T) {
	events := make([]string, 2000)
	for i := range events {
		events[i] = string(bytes.Repeat([]byte{'a' + byte(i%26)}, 40+i%50))
	}
	const limit = 16 << 10
	for _, traces := range []int{1, 3} {
		out, truncated := recordQlog(t, limit, traces, events)
		if !truncated || len(out) > limit || len(out) < limit/2 {
			t.Errorf("%d traces: %d bytes (limit %d), truncated %v", traces, len(out), limit, truncated)
		}
		checkRecords(t, out, events, true)
	}
	// Under the limit: everything, no mark.
	out, truncated := recordQlog(t, 1<<20, 2, events[:50])
	if truncated || bytes.Contains(out, []byte(qlogana.TruncatedEvent)) {
		t.Errorf("untruncated qlog marked: %v", truncated)
	}
	checkRecords(t, out, events[:50], false)
	if n := bytes.Count(out, []byte{0x1e}); n != 2+2*50 {
		t.Errorf("%d records, want %d", n, 2+2*50)
	}
}

// FuzzQlogBuffer: any events, any limit: the qlog never passes the limit and holds only
// whole records, the events in order, and the truncation record last when cut.
func FuzzQlogBuffer(f *testing.F) {
	f.Add([]byte("one\x00two\x00three"), uint16(600), uint8(1))
	f.Add(bytes.Repeat([]byte("event\x00"), 300), uint16(2000), uint8(2))
	f.Add([]byte("\x1e\n\"\\\x00\xff\xfe"), uint16(0), uint8(4))
	f.Fuzz(func(t *testing.T, in []byte, limit uint16, traces uint8) {
		events := []string{}
		for _, e := range bytes.Split(in, []byte{0}) {
			events = append(events, string(e))
		}
		n := int(traces%maxTraces) + 1
		out, truncated := recordQlog(t, int(limit), n, events)
		if len(out) > max(int(limit), qlogMarkReserve) {
			t.Fatalf("%d bytes for limit %d", len(out), limit)
		}
		if len(out) == 0 {
			return // not even a header fitted
		}
		checkRecords(t, out, events, truncated)
	})
}

// TestQlogBufferEndsAtDeadline: a writer that has not finished (its connection not
// closed, the writer inside a record, e.g. starved of CPU) does not hold the exchange
// past its deadline: bytes returns within qlogTraceGrace of it with the complete records
// and the truncation mark.
func TestQlogBufferEndsAtDeadline(t *testing.T) {
	b := newQlogBuffer()
	b.deadline = time.Now()
	tr := b.tracer(context.Background(), true, quic.ConnectionIDFromBytes([]byte{1, 2, 3, 4, 5, 6, 7, 8}))
	r := tr.AddProducer() // not closed before bytes returns: the writer has not finished
	defer r.Close()
	// No event was recorded, so the writer goroutine writes nothing; a record begun:
	tb := b.traces[0]
	_, _ = tb.Write([]byte{0x1e})
	_, _ = tb.Write([]byte(`{"time":1,"name":"test:te`))
	begin := time.Now()
	out, truncated := b.bytes(nil)
	if took := time.Since(begin); took >= qlogTraceWait {
		t.Errorf("bytes took %v with the deadline passed (grace %v)", took, qlogTraceGrace)
	}
	if !truncated {
		t.Error("a qlog whose writer had not finished is not marked truncated")
	}
	checkRecords(t, out, nil, truncated)
	if bytes.Contains(out, []byte("test:te")) {
		t.Errorf("the unfinished record is kept: %q", out)
	}
}

// TestQlogReserveHoldsDoqscansRecords: the part of QlogLimit kept from quic-go's records
// holds the largest arrivals record (every datagram a Log keeps, the largest values) and
// the truncation record.
func TestQlogReserveHoldsDoqscansRecords(t *testing.T) {
	arr := make([]qlogana.Arrival, kstamp.MaxDatagrams)
	for i := range arr {
		arr[i] = qlogana.Arrival{Checksum: math.MaxUint32, At: time.Unix(0, math.MaxInt64)}
	}
	n := len(qlogana.ArrivalsRecord(arr)) + len(qlogana.TruncatedRecord(1e9, QlogLimit, math.MaxInt64))
	if n > qlogMarkReserve {
		t.Errorf("doqscan's records take %d bytes, the reserve is %d", n, qlogMarkReserve)
	}
}
