package campaign

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/store"
)

func spillSample() (spillCampaign, *batch) {
	c := spillCampaign{CampaignID: 7, VantageID: "vp", Label: "hourly", RoundHour: time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)}
	a := netip.MustParseAddr("198.19.0.1")
	key := store.MeasurementKey{CampaignID: 7, Address: a, Protocol: "doq", Port: 853, Mode: "fresh", Phase: PhaseMeasured}
	hs, rc, ratio := int64(12345), int16(0), float32(1.5)
	qid := key.QlogID()
	ok := true
	b := &batch{targets: 1,
		qlogs: []store.Qlog{{QlogID: qid, CampaignID: 7, Address: a, Port: 853, Encoding: "gzip", Format: "sqlog",
			RawSize: 3, Data: []byte{1, 2, 3}, CreatedAt: time.Unix(1, 5).UTC(), RoundHour: c.RoundHour}},
		meas: []store.Measurement{{MeasurementID: key.ID(), CampaignID: 7, Address: a, Protocol: "doq", Port: 853,
			Mode: "fresh", Phase: PhaseMeasured, StartedAt: time.Unix(2, 7).UTC(), HandshakeNS: &hs, Status: "ok",
			Rcode: &rc, Answers: []string{}, QlogID: &qid, TokenReceived: &ok, RoundHour: c.RoundHour}},
		rtts: []store.RTTSample{{CampaignID: 7, Address: a, Transport: "quic", Port: 853, SentAt: time.Unix(3, 0).UTC(), Status: "ok",
			RoundHour: c.RoundHour}},
		analyses: []store.HandshakeAnalysis{{MeasurementID: key.ID(), Ratio: &ratio, Cause: "1rtt", Detail: []byte(`{"x":1}`),
			RoundHour: c.RoundHour}},
		features: []store.ResolverFeature{{CampaignID: 7, Address: a, Protocol: "doq", Port: 853, Feature: "retry", Supported: &ok}},
	}
	return c, b
}

// TestSpillWithoutHourGetsTheCampaigns: rows spilled before the tables were partitioned
// carry no round_hour; read back, they get their campaign's, which is their partition.
func TestSpillWithoutHourGetsTheCampaigns(t *testing.T) {
	c, b := spillSample()
	b.qlogs[0].RoundHour, b.meas[0].RoundHour, b.rtts[0].RoundHour, b.analyses[0].RoundHour =
		time.Time{}, time.Time{}, time.Time{}, time.Time{}
	w, err := createSpill(t.TempDir(), c)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.add(b); err != nil {
		t.Fatal(err)
	}
	w.close()
	data, err := os.ReadFile(w.path)
	if err != nil {
		t.Fatal(err)
	}
	var got *batch
	if _, _, err := readSpill(bytes.NewReader(data), func(_ spillCampaign, b *batch) error { got = b; return nil }); err != nil {
		t.Fatal(err)
	}
	for _, h := range []time.Time{got.qlogs[0].RoundHour, got.meas[0].RoundHour, got.rtts[0].RoundHour, got.analyses[0].RoundHour} {
		if !h.Equal(c.RoundHour) {
			t.Fatalf("row hour %v, want the campaign's %v", h, c.RoundHour)
		}
	}
}

// TestSpillRoundTrip: a batch read back from a spill file is the batch written, a
// final status follows it, and a file cut inside its last record gives back every
// complete record and says it is cut.
func TestSpillRoundTrip(t *testing.T) {
	c, b := spillSample()
	w, err := createSpill(t.TempDir(), c)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.add(b); err != nil {
		t.Fatal(err)
	}
	if err := w.append(spillRecord{Finish: &spillFinish{Status: "interrupted", Summary: json.RawMessage(`{"a":1}`)}}); err != nil {
		t.Fatal(err)
	}
	w.close()
	data, err := os.ReadFile(w.path)
	if err != nil {
		t.Fatal(err)
	}
	var got []*batch
	hdr, fin, err := readSpill(bytes.NewReader(data), func(_ spillCampaign, b *batch) error { got = append(got, b); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if !hdr.RoundHour.Equal(c.RoundHour) || hdr.CampaignID != c.CampaignID || hdr.Label != c.Label || hdr.VantageID != c.VantageID {
		t.Errorf("header %+v, want %+v", hdr, c)
	}
	if fin == nil || fin.Status != "interrupted" {
		t.Errorf("final status %+v", fin)
	}
	if len(got) != 1 {
		t.Fatalf("%d batches read, want 1", len(got))
	}
	// Times come back as the same instants (json drops the monotonic clock reading).
	if !reflect.DeepEqual(got[0], b) {
		t.Errorf("read back\n%+v\nwrote\n%+v", got[0], b)
	}
	// Cut inside the last record (the finish line): the batch is still there.
	cut := data[:len(data)-5]
	got = nil
	_, fin, err = readSpill(bytes.NewReader(cut), func(_ spillCampaign, b *batch) error { got = append(got, b); return nil })
	if !errors.Is(err, errPartialRecord) || len(got) != 1 || fin != nil {
		t.Errorf("cut file: %v, %d batches, final %v", err, len(got), fin)
	}
	// Rows of another campaign are refused.
	other := strings.Replace(string(data), `"CampaignID":7,"Address":"198.19.0.1","Protocol":"doq"`, `"CampaignID":8,"Address":"198.19.0.1","Protocol":"doq"`, 1)
	if other == string(data) {
		t.Fatal("the sample's measurement was not found in the file")
	}
	if _, _, err := readSpill(strings.NewReader(other), func(spillCampaign, *batch) error { return nil }); err == nil {
		t.Errorf("a measurement of another campaign was accepted")
	}
}

// FuzzReadSpill: any bytes give records or an error, never a panic.
func FuzzReadSpill(f *testing.F) {
	c, b := spillSample()
	dir := f.TempDir()
	w, err := createSpill(dir, c)
	if err != nil {
		f.Fatal(err)
	}
	w.add(b)
	w.close()
	data, _ := os.ReadFile(w.path)
	f.Add(data)
	f.Add([]byte("{\"campaign\":{\"campaign_id\":1}}\n{\"batch\":{\"resolvers\":-1}}\n"))
	f.Add([]byte("\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		readSpill(bytes.NewReader(in), func(spillCampaign, *batch) error { return nil })
	})
}
