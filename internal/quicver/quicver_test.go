package quicver

import "testing"

func TestName(t *testing.T) {
	for _, c := range []struct {
		v    uint32
		want string
		fam  Family
	}{
		{V1, "v1", FamilyIETF},
		{V2, "v2", FamilyIETF},
		{Draft29, "draft-29", FamilyDraft},
		{Draft34, "draft-34", FamilyDraft},
		{0xff00001b, "draft-27", FamilyDraft},
		{0x1a2a3a4a, "grease", FamilyGrease},
		{0xbabababa, "grease", FamilyGrease},
		{0x0a0a0a0a, "grease", FamilyGrease},
		{0x51303530, "Q050", FamilyGoogle},
		{0x54303531, "T051", FamilyGoogle},
		{0xfaceb002, "mvfst-d27", FamilyVendor},
		{0xfaceb005, "mvfst", FamilyVendor},
		{0xabcd0001, "msquic", FamilyVendor},
		{0x12345678, "0x12345678", FamilyUnknown},
		{0, "negotiation", FamilyReserved},
		{0xffffffff, "0xffffffff", FamilyReserved},
	} {
		if got := Name(c.v); got != c.want {
			t.Errorf("Name(%#08x) = %q, want %q", c.v, got, c.want)
		}
		if got := FamilyOf(c.v); got != c.fam {
			t.Errorf("FamilyOf(%#08x) = %q, want %q", c.v, got, c.fam)
		}
	}
}

func TestIsGrease(t *testing.T) {
	n := 0
	for hi := uint32(0); hi < 16; hi++ {
		v := hi<<28 | hi<<20 | hi<<12 | hi<<4 | 0x0a0a0a0a
		if !IsGrease(v) {
			t.Errorf("%#08x not grease", v)
		}
		n++
	}
	for _, v := range []uint32{V1, V2, Draft29, 0x1a2a3a4b, 0xffffffff, 0} {
		if IsGrease(v) {
			t.Errorf("%#08x grease", v)
		}
	}
}

func TestParse(t *testing.T) {
	for in, want := range map[string]uint32{
		"v1": V1, "V2": V2, "draft-29": Draft29, "draft-34": Draft34, "0x1a2a3a4a": 0x1a2a3a4a,
		"0xffffffff": 0xffffffff, "0": 0, "grease": ProbeGrease, "Q050": 0x51303530, "4294967295": 0xffffffff,
	} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %#x, %v; want %#x", in, got, err, want)
		}
	}
	for _, in := range []string{"", "v9", "0x1ffffffff", "draft-x", "4294967296", "Qabc", "-1"} {
		if _, err := Parse(in); err == nil {
			t.Errorf("Parse(%q): no error", in)
		}
	}
}

func TestNameParseRoundTrip(t *testing.T) {
	for _, v := range []uint32{V1, V2, Draft29, Draft32, 0x51303436} {
		got, err := Parse(Name(v))
		if err != nil || got != v {
			t.Errorf("Parse(Name(%#x)) = %#x, %v", v, got, err)
		}
	}
}
