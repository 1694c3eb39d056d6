package kstamp

import (
	"hash/crc32"
	"testing"
	"time"
)

// TestArrivalOfDatagram: long-header datagrams (and only those) are found by their
// CRC-32C, the first arrival of a duplicate at or after since counts, the socket's first
// write survives Arm, and a flood after the first MaxDatagrams does not push them out.
func TestArrivalOfDatagram(t *testing.T) {
	var l Log
	base := time.Now()
	long1 := append([]byte{0xc0, 0, 0, 0, 1}, make([]byte, 100)...)
	long2 := append([]byte{0xe0, 0, 0, 0, 1}, make([]byte, 50)...)
	short := []byte{0x40, 1, 2, 3}
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	l.ReceivedDatagram(long1, at(1))
	l.ReceivedDatagram(short, at(2))
	l.ReceivedDatagram(long2, at(3))
	l.ReceivedDatagram(long2, at(4)) // a duplicate
	if got, ok := l.ArrivalOfDatagram(DatagramChecksum(long2), at(0)); !ok || !got.Equal(at(3)) {
		t.Errorf("long2: %v, %v; want its first arrival %v", got, ok, at(3))
	}
	if got, ok := l.ArrivalOfDatagram(DatagramChecksum(long2), at(4)); !ok || !got.Equal(at(4)) {
		t.Errorf("long2 since its second arrival: %v, %v", got, ok)
	}
	if _, ok := l.ArrivalOfDatagram(DatagramChecksum(long1), at(2)); ok {
		t.Error("long1 found after since")
	}
	if _, ok := l.ArrivalOfDatagram(DatagramChecksum(short), time.Time{}); ok {
		t.Error("a short-header datagram is kept")
	}
	if want := crc32.Checksum(long1, crc32.MakeTable(crc32.Castagnoli)); DatagramChecksum(long1) != want {
		t.Errorf("checksum %x, want CRC-32C %x", DatagramChecksum(long1), want)
	}
	for i := range 10 * MaxDatagrams {
		l.ReceivedDatagram(append([]byte{0xc0, byte(i), byte(i >> 8)}, long1...), at(10+i))
	}
	if got, ok := l.ArrivalOfDatagram(DatagramChecksum(long1), at(0)); !ok || !got.Equal(at(1)) {
		t.Errorf("long1 after a flood: %v, %v", got, ok)
	}
	l.ReceivedDatagram(long1, time.Time{}) // no kernel stamp: not recorded

	if _, ok := l.FirstSent(); ok {
		t.Fatal("FirstSent before any write")
	}
	l.Arm()
	l.Wrote()
	first, ok := l.FirstSent()
	l.Arm()
	l.Wrote()
	if again, ok2 := l.FirstSent(); !ok || !ok2 || !again.Equal(first) {
		t.Errorf("FirstSent moved with Arm: %v then %v", first, again)
	}
	if sent, _ := l.Sent(); sent.Before(first) {
		t.Errorf("Sent %v before the first write %v", sent, first)
	}
}
