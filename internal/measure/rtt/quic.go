package rtt

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
)

// QUIC Version Negotiation probe (RFC 9000 §6, §17.2.1). A minimal builder: the probe
// team's internal/probe holds the canonical one.
const (
	vnProbeLen   = 1200 // RFC 9000 §14.1: servers ignore smaller Initials
	vnCIDLen     = 8    // quic-go and quinn need a DCID of 8..20 bytes
	longHeader   = 0x80 // RFC 9000 §17.2: Header Form bit
	fixedBit     = 0x40 // RFC 9000 §17.2: Fixed Bit
	reservedMask = 0x0f0f0f0f
	reservedBits = 0x0a0a0a0a // RFC 9000 §15: versions 0x?a?a?a?a are reserved to force VN
)

// vnProbe returns a probe with a random reserved version and random CIDs, and a check
// accepting only a Version Negotiation packet that echoes them (RFC 9000 §17.2.1).
func vnProbe() ([]byte, func([]byte) error) {
	p := make([]byte, vnProbeLen)
	_, _ = rand.Read(p)
	p[0] = longHeader | fixedBit | (p[0] & 0x3f)
	v := binary.BigEndian.Uint32(p[1:5])&^reservedMask | reservedBits
	binary.BigEndian.PutUint32(p[1:5], v)
	p[5] = vnCIDLen
	dcid := bytes.Clone(p[6 : 6+vnCIDLen])
	p[6+vnCIDLen] = vnCIDLen
	scid := bytes.Clone(p[7+vnCIDLen : 7+2*vnCIDLen])
	return p, func(r []byte) error { return checkVN(r, dcid, scid) }
}

var errNotVN = errors.New("not a version negotiation packet for this probe")

// checkVN accepts a VN packet whose DCID is our SCID and whose SCID is our DCID.
func checkVN(r, dcid, scid []byte) error {
	if len(r) < 7 || r[0]&longHeader == 0 || binary.BigEndian.Uint32(r[1:5]) != 0 {
		return errNotVN
	}
	dl := int(r[5])
	if len(r) < 6+dl+1 {
		return errNotVN
	}
	rd := r[6 : 6+dl]
	sl := int(r[6+dl])
	if len(r) < 7+dl+sl {
		return errNotVN
	}
	rs := r[7+dl : 7+dl+sl]
	if !bytes.Equal(rd, scid) || !bytes.Equal(rs, dcid) {
		return errNotVN
	}
	return nil
}
