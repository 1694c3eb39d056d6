package store

import (
	"crypto/sha1"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Rows that children reference before the database has seen them (measurements, qlogs)
// get a UUIDv5 (RFC 9562 §5.5) derived from their natural key: the same measurement
// always has the same id, so a re-run's COPY collides with the first run's row instead
// of adding a second one.

// namespaceDoqscan is the UUIDv5 namespace of doqscan ids (a random UUIDv4, fixed).
var namespaceDoqscan = [16]byte{0x5e, 0x1b, 0x2f, 0x8c, 0x3a, 0x44, 0x4d, 0x21, 0x9b, 0x60, 0x7c, 0x0e, 0x51, 0xd2, 0x83, 0x17}

func uuidV5(name string) [16]byte {
	h := sha1.New()
	h.Write(namespaceDoqscan[:])
	h.Write([]byte(name))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = (u[6] & 0x0f) | 0x50 // version 5
	u[8] = (u[8] & 0x3f) | 0x80 // RFC 9562 variant
	return u
}

// MeasurementKey is the natural key of a measurement row.
type MeasurementKey struct {
	CampaignID int64
	Address    netip.Addr
	Protocol   string
	Port       int32
	Variant    string
	Mode       string
	KeyShare   string
	Phase      string
	Seq        int16
}

// ID returns the measurement's UUIDv5.
func (k MeasurementKey) ID() [16]byte {
	return uuidV5(strings.Join([]string{"measurement", strconv.FormatInt(k.CampaignID, 10), k.Address.String(),
		k.Protocol, strconv.Itoa(int(k.Port)), k.Variant, k.Mode, k.KeyShare, k.Phase, strconv.Itoa(int(k.Seq))}, "|"))
}

// QlogID returns the id of the qlog of the QUIC connection that carried the measurement
// with key k (one connection may carry several measurements in persistent mode; they
// share the key of its first query).
func (k MeasurementKey) QlogID() [16]byte {
	id := k.ID()
	return uuidV5("qlog|" + UUIDString(id))
}

// UUIDString formats a UUID in its canonical text form.
func UUIDString(u [16]byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}
