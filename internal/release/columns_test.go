package release

import (
	"encoding/binary"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/jackc/pgx/v5/pgtype"
)

// pgArray is PostgreSQL's binary array of int8 values (nil: a NULL element).
func pgArray(vals []*int64) []byte {
	b := binary.BigEndian.AppendUint32(nil, 1) // ndim
	b = binary.BigEndian.AppendUint32(b, 1)    // has nulls
	b = binary.BigEndian.AppendUint32(b, pgtype.Int8OID)
	b = binary.BigEndian.AppendUint32(b, uint32(len(vals)))
	b = binary.BigEndian.AppendUint32(b, 1) // lower bound
	for _, v := range vals {
		if v == nil {
			b = binary.BigEndian.AppendUint32(b, 0xffffffff)
			continue
		}
		b = binary.BigEndian.AppendUint32(b, 8)
		b = binary.BigEndian.AppendUint64(b, uint64(*v))
	}
	return b
}

func TestAppendArray(t *testing.T) {
	one, two := int64(1), int64(0x6b3343cf)
	lb := array.NewListBuilder(memory.DefaultAllocator, arrow.PrimitiveTypes.Int64)
	defer lb.Release()
	_, dec, _ := scalar(pgtype.Int8OID)
	if err := appendArray(lb, pgArray([]*int64{&one, nil, &two}), dec); err != nil {
		t.Fatal(err)
	}
	if err := appendArray(lb, pgArray(nil), dec); err != nil {
		t.Fatal(err)
	}
	arr := lb.NewListArray()
	defer arr.Release()
	vals := arr.ListValues().(*array.Int64)
	if arr.Len() != 2 || vals.Len() != 3 || vals.Value(0) != 1 || !vals.IsNull(1) || vals.Value(2) != 0x6b3343cf {
		t.Fatalf("decoded %v", arr)
	}
	if err := appendArray(lb, pgArray([]*int64{&one})[:30], dec); err == nil {
		t.Error("a cut array decoded without error")
	}
}

// FuzzAppendArray: any bytes give a list or an error, never a panic.
func FuzzAppendArray(f *testing.F) {
	one := int64(1)
	f.Add(pgArray([]*int64{&one, nil}))
	f.Add(pgArray(nil))
	f.Add([]byte{0, 0, 0, 2, 0, 0, 0, 0})
	_, dec, _ := scalar(pgtype.Int8OID)
	f.Fuzz(func(t *testing.T, b []byte) {
		lb := array.NewListBuilder(memory.DefaultAllocator, arrow.PrimitiveTypes.Int64)
		defer lb.Release()
		_ = appendArray(lb, b, dec)
	})
}
