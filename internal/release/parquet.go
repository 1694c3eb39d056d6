package release

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/doqscan/doqscan/internal/release/manifest"
)

// RowGroupRows is the number of rows per Parquet row group (and per Arrow batch held in
// memory while writing): large enough for good compression, small enough that DuckDB and
// Spark read a file in parallel and the writer holds ~50 MB.
const RowGroupRows = 1 << 18

// CreatedBy is the writer name in every file's footer: fixed, so that a week written
// again is the same bytes.
const CreatedBy = "doqscan release (apache arrow-go parquet v18)"

// writerProps are the Parquet settings of every file: zstd, dictionary encoding for
// repetitive strings (protocol, status), min/max statistics for pruning.
func writerProps() (*parquet.WriterProperties, pqarrow.ArrowWriterProperties) {
	return parquet.NewWriterProperties(
			parquet.WithCompression(compress.Codecs.Zstd),
			parquet.WithCompressionLevel(3),
			parquet.WithMaxRowGroupLength(RowGroupRows),
			parquet.WithCreatedBy(CreatedBy),
			parquet.WithDictionaryDefault(true),
			parquet.WithStats(true),
		),
		pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())
}

// query is one SQL statement with its arguments; a table's rows are the rows of its
// queries, in order.
type query struct {
	sql  string
	args []any
}

// tableWriter writes the rows of queries into one Parquet file: to a temporary name
// first, renamed when complete, so a crash never leaves a half file under the real name.
type tableWriter struct {
	path    string
	tmp     *os.File
	sum     func() []byte
	cols    []column
	schema  *arrow.Schema
	rb      *array.RecordBuilder
	fw      *pqarrow.FileWriter
	pending int
	rows    int64
	counter *atomic.Int64 // rows written so far by the whole export (progress)
}

type hashingFile struct {
	f *os.File
	h io.Writer
}

func (w hashingFile) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	_, _ = w.h.Write(p[:n])
	return n, err
}

// writeTable runs the queries and writes their rows to path; returns the file's
// manifest entry. The Arrow schema comes from the first query's result columns; every
// query of a table must return the same columns.
func writeTable(ctx context.Context, pool *pgxpool.Pool, path, table string, queries []query, counter *atomic.Int64) (manifest.File, error) {
	tw := &tableWriter{path: path, counter: counter}
	defer tw.abort()
	for _, q := range queries {
		if err := tw.run(ctx, pool, q); err != nil {
			return manifest.File{}, fmt.Errorf("%s: %w", table, err)
		}
	}
	if tw.schema == nil {
		// No query: nothing to describe the columns with. Callers give at least one.
		return manifest.File{}, fmt.Errorf("%s: no query", table)
	}
	return tw.finish(table)
}

func (tw *tableWriter) start(fds []pgconn.FieldDescription) error {
	fields := make([]arrow.Field, len(fds))
	tw.cols = make([]column, len(fds))
	for i, fd := range fds {
		c, err := columnOf(fd)
		if err != nil {
			return err
		}
		tw.cols[i] = c
		fields[i] = arrow.Field{Name: fd.Name, Type: c.typ, Nullable: true}
	}
	tw.schema = arrow.NewSchema(fields, nil)
	if err := os.MkdirAll(filepath.Dir(tw.path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(tw.path), "."+filepath.Base(tw.path)+".*.tmp")
	if err != nil {
		return err
	}
	tw.tmp = f
	h := sha256.New()
	tw.sum = func() []byte { return h.Sum(nil) }
	props, aprops := writerProps()
	tw.fw, err = pqarrow.NewFileWriter(tw.schema, hashingFile{f: f, h: h}, props, aprops)
	if err != nil {
		return err
	}
	tw.rb = array.NewRecordBuilder(memory.DefaultAllocator, tw.schema)
	return nil
}

func (tw *tableWriter) run(ctx context.Context, pool *pgxpool.Pool, q query) error {
	// Binary results for every column: the decoders above read the wire format.
	args := append([]any{pgx.QueryResultFormats{pgx.BinaryFormatCode}}, q.args...)
	rows, err := pool.Query(ctx, q.sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	fds := rows.FieldDescriptions()
	if tw.schema == nil {
		if err := tw.start(fds); err != nil {
			return err
		}
	} else if len(fds) != len(tw.cols) {
		return fmt.Errorf("query returns %d columns, the table has %d", len(fds), len(tw.cols))
	}
	for rows.Next() {
		raw := rows.RawValues()
		for i, v := range raw {
			b := tw.rb.Field(i)
			if v == nil {
				b.AppendNull()
				continue
			}
			if err := tw.cols[i].append(b, v); err != nil {
				return fmt.Errorf("column %s: %w", fds[i].Name, err)
			}
		}
		tw.pending++
		if tw.pending == RowGroupRows {
			if err := tw.flush(); err != nil {
				return err
			}
		}
	}
	return rows.Err()
}

func (tw *tableWriter) flush() error {
	if tw.pending == 0 {
		return nil
	}
	rec := tw.rb.NewRecordBatch()
	defer rec.Release()
	if err := tw.fw.Write(rec); err != nil {
		return err
	}
	tw.rows += int64(tw.pending)
	if tw.counter != nil {
		tw.counter.Add(int64(tw.pending))
	}
	tw.pending = 0
	return nil
}

func (tw *tableWriter) finish(table string) (manifest.File, error) {
	if err := tw.flush(); err != nil {
		return manifest.File{}, err
	}
	if err := tw.fw.Close(); err != nil {
		return manifest.File{}, err
	}
	tw.fw = nil
	if err := tw.tmp.Sync(); err != nil {
		return manifest.File{}, err
	}
	st, err := tw.tmp.Stat()
	if err != nil {
		return manifest.File{}, err
	}
	if err := tw.tmp.Close(); err != nil {
		return manifest.File{}, err
	}
	if err := os.Chmod(tw.tmp.Name(), 0o644); err != nil { // published: readable by all
		return manifest.File{}, err
	}
	if err := os.Rename(tw.tmp.Name(), tw.path); err != nil {
		return manifest.File{}, err
	}
	tw.tmp = nil
	return manifest.File{Table: table, Rows: tw.rows, Bytes: st.Size(), SHA256: hex.EncodeToString(tw.sum())}, nil
}

// abort removes the temporary file of a table that was not finished.
func (tw *tableWriter) abort() {
	if tw.rb != nil {
		tw.rb.Release()
		tw.rb = nil
	}
	if tw.tmp != nil {
		if tw.fw != nil {
			_ = tw.fw.Close()
		}
		_ = tw.tmp.Close()
		_ = os.Remove(tw.tmp.Name())
		tw.tmp = nil
	}
}

// since formats a duration for progress lines.
func since(t time.Time) time.Duration { return time.Since(t).Round(100 * time.Millisecond) }
