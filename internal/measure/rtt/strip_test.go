package rtt

import "testing"

// FuzzStripIPv4: any bytes a raw socket could hand over give a payload inside the
// packet or false, never a panic.
func FuzzStripIPv4(f *testing.F) {
	f.Add([]byte{0x45, 0, 0, 40, 0, 0, 0, 0, 64, 6, 0, 0, 198, 19, 0, 1, 198, 18, 0, 2, 0, 53})
	f.Add([]byte{0x4f})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, ok := stripIPv4(b)
		if ok && (len(p) > len(b) || len(b)-len(p) < 20) {
			t.Fatalf("payload of %d bytes from a %d-byte packet", len(p), len(b))
		}
	})
}
