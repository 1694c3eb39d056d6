package release

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// A column of a query result turned into an Arrow column: the PostgreSQL type (OID) of
// the result field decides the Arrow type, and its binary wire format is decoded
// straight into the builder (no per-value interface{}: the export's rows/s depends on
// it). Types outside this table are cast in the table's SQL (inet -> host(), uuid,
// jsonb -> text, bytea hashes -> hex).
type column struct {
	oid    uint32
	typ    arrow.DataType
	append func(b array.Builder, v []byte) error
}

// pgEpoch is timestamptz's zero: 2000-01-01 UTC; values are microseconds since then.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()

// TimestampType is how every timestamptz is written: microseconds, UTC.
var TimestampType = &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}

var errShort = errors.New("short binary value")

func be16(v []byte) (int16, error) {
	if len(v) != 2 {
		return 0, errShort
	}
	return int16(binary.BigEndian.Uint16(v)), nil
}

func be32(v []byte) (int32, error) {
	if len(v) != 4 {
		return 0, errShort
	}
	return int32(binary.BigEndian.Uint32(v)), nil
}

func be64(v []byte) (int64, error) {
	if len(v) != 8 {
		return 0, errShort
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

// scalar returns the Arrow type and the decoder of one binary value of a scalar OID.
func scalar(oid uint32) (arrow.DataType, func(b array.Builder, v []byte) error, bool) {
	switch oid {
	case pgtype.BoolOID:
		return arrow.FixedWidthTypes.Boolean, func(b array.Builder, v []byte) error {
			if len(v) != 1 {
				return errShort
			}
			b.(*array.BooleanBuilder).Append(v[0] != 0)
			return nil
		}, true
	case pgtype.Int2OID:
		return arrow.PrimitiveTypes.Int16, func(b array.Builder, v []byte) error {
			x, err := be16(v)
			b.(*array.Int16Builder).Append(x)
			return err
		}, true
	case pgtype.Int4OID:
		return arrow.PrimitiveTypes.Int32, func(b array.Builder, v []byte) error {
			x, err := be32(v)
			b.(*array.Int32Builder).Append(x)
			return err
		}, true
	case pgtype.Int8OID:
		return arrow.PrimitiveTypes.Int64, func(b array.Builder, v []byte) error {
			x, err := be64(v)
			b.(*array.Int64Builder).Append(x)
			return err
		}, true
	case pgtype.Float4OID:
		return arrow.PrimitiveTypes.Float32, func(b array.Builder, v []byte) error {
			x, err := be32(v)
			b.(*array.Float32Builder).Append(math.Float32frombits(uint32(x)))
			return err
		}, true
	case pgtype.Float8OID:
		return arrow.PrimitiveTypes.Float64, func(b array.Builder, v []byte) error {
			x, err := be64(v)
			b.(*array.Float64Builder).Append(math.Float64frombits(uint64(x)))
			return err
		}, true
	case pgtype.TextOID, pgtype.VarcharOID:
		return arrow.BinaryTypes.String, func(b array.Builder, v []byte) error {
			b.(*array.StringBuilder).BinaryBuilder.Append(v)
			return nil
		}, true
	case pgtype.ByteaOID:
		return arrow.BinaryTypes.Binary, func(b array.Builder, v []byte) error {
			b.(*array.BinaryBuilder).Append(v)
			return nil
		}, true
	case pgtype.TimestamptzOID:
		return TimestampType, func(b array.Builder, v []byte) error {
			x, err := be64(v)
			if x == math.MaxInt64 || x == math.MinInt64 {
				return fmt.Errorf("infinite timestamp")
			}
			b.(*array.TimestampBuilder).Append(arrow.Timestamp(x + pgEpoch))
			return err
		}, true
	}
	return nil, nil, false
}

// arrayElem maps an array OID to its element OID.
var arrayElem = map[uint32]uint32{
	pgtype.Int2ArrayOID:    pgtype.Int2OID,
	pgtype.Int4ArrayOID:    pgtype.Int4OID,
	pgtype.Int8ArrayOID:    pgtype.Int8OID,
	pgtype.Float8ArrayOID:  pgtype.Float8OID,
	pgtype.TextArrayOID:    pgtype.TextOID,
	pgtype.VarcharArrayOID: pgtype.VarcharOID,
	pgtype.ByteaArrayOID:   pgtype.ByteaOID,
}

// columnOf returns the column of a result field (binary format).
func columnOf(fd pgconn.FieldDescription) (column, error) {
	if fd.Format != pgtype.BinaryFormatCode {
		return column{}, fmt.Errorf("column %s: text format result", fd.Name)
	}
	if t, f, ok := scalar(fd.DataTypeOID); ok {
		return column{oid: fd.DataTypeOID, typ: t, append: f}, nil
	}
	elem, ok := arrayElem[fd.DataTypeOID]
	if !ok {
		return column{}, fmt.Errorf("column %s: PostgreSQL type OID %d has no Parquet mapping (cast it in the query)", fd.Name, fd.DataTypeOID)
	}
	et, ef, _ := scalar(elem)
	return column{oid: fd.DataTypeOID, typ: arrow.ListOf(et), append: func(b array.Builder, v []byte) error {
		return appendArray(b.(*array.ListBuilder), v, ef)
	}}, nil
}

// appendArray decodes PostgreSQL's binary array format (ndim, has-null flag, element
// OID, then per dimension length and lower bound, then length-prefixed elements) as one
// list; a multi-dimensional array is flattened in storage order, NULL elements stay NULL.
func appendArray(lb *array.ListBuilder, v []byte, elem func(array.Builder, []byte) error) error {
	if len(v) < 12 {
		return errShort
	}
	ndim := int(binary.BigEndian.Uint32(v[0:4]))
	p := 12
	n := 1
	if ndim == 0 {
		n = 0
	}
	for i := 0; i < ndim; i++ {
		if len(v) < p+8 {
			return errShort
		}
		n *= int(binary.BigEndian.Uint32(v[p : p+4]))
		p += 8
	}
	lb.Append(true)
	vb := lb.ValueBuilder()
	for i := 0; i < n; i++ {
		if len(v) < p+4 {
			return errShort
		}
		l := int(int32(binary.BigEndian.Uint32(v[p : p+4])))
		p += 4
		if l < 0 {
			vb.AppendNull()
			continue
		}
		if len(v) < p+l {
			return errShort
		}
		if err := elem(vb, v[p:p+l]); err != nil {
			return err
		}
		p += l
	}
	return nil
}
