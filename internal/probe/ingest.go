package probe

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/doqscan/doqscan/internal/store"
)

// DefaultBatch is how many rows one COPY carries.
const DefaultBatch = 5000

// Ingest classifies replies and writes them to scan_replies in batches (idempotently:
// the table's key is (scan, port, address), so a replay adds nothing). With a nil
// store it only classifies and counts (dry runs, benchmarks).
type Ingest struct {
	Store      *store.Store
	ScanID     int64
	Classifier *Classifier
	Batch      int
	Log        *slog.Logger

	rows     []store.ScanReply
	Counts   map[uint16]map[Kind]int64 // per port, per kind
	Replies  int64                     // replies classified
	Inserted int64                     // rows new in the database
	Bad      int64                     // lines that did not parse
	Deferred int64                     // lines only written to the raw file (database behind)
}

// NewIngest returns an Ingest for one scan.
func NewIngest(s *store.Store, scanID int64, c *Classifier, log *slog.Logger) *Ingest {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Ingest{Store: s, ScanID: scanID, Classifier: c, Batch: DefaultBatch, Log: log, Counts: map[uint16]map[Kind]int64{}}
}

// Add classifies one reply and queues its row; a full batch is written.
func (in *Ingest) Add(ctx context.Context, r Reply) error {
	if r.Received.IsZero() {
		r.Received = time.Now().UTC()
	}
	res := in.Classifier.Classify(r)
	m := in.Counts[r.Port]
	if m == nil {
		m = map[Kind]int64{}
		in.Counts[r.Port] = m
	}
	m[res.Kind]++
	in.Replies++
	if in.Store == nil {
		return nil
	}
	in.rows = append(in.rows, Row(in.ScanID, r, res))
	if len(in.rows) >= in.Batch {
		return in.Flush(ctx)
	}
	return nil
}

// Flush writes the queued rows.
func (in *Ingest) Flush(ctx context.Context) error {
	if len(in.rows) == 0 || in.Store == nil {
		return nil
	}
	n, err := store.Insert(ctx, in.Store, store.TableScanReplies, in.rows)
	if err != nil {
		return fmt.Errorf("ingest %d replies: %w", len(in.rows), err)
	}
	in.Inserted += n
	in.rows = in.rows[:0]
	return nil
}

// StreamQueue is how many CSV lines may wait between zmap's stdout and the classifier.
// When the database falls this far behind, further lines are only written to the raw
// file (counted in Ingest.Deferred) so zmap is never blocked on its output pipe (a
// blocked zmap drops replies in its capture buffer); the caller replays the raw file.
var StreamQueue = 1 << 18

// StreamCSV reads zmap CSV from r while zmap writes it, copies every line to raw (the
// on-disk record for replays; may be nil) before anything else, classifies and ingests
// each reply, and writes a batch at least every flushEvery so rows land while the scan
// runs.
func StreamCSV(ctx context.Context, r io.Reader, raw io.Writer, port uint16, in *Ingest, flushEvery time.Duration) error {
	lines := make(chan []byte, StreamQueue)
	readErr := make(chan error, 1)
	var deferred atomic.Int64
	go func() {
		defer close(lines)
		var rawW *bufio.Writer
		if raw != nil {
			rawW = bufio.NewWriterSize(raw, 1<<20)
		}
		var werr error
		br := bufio.NewReaderSize(r, 1<<20)
		first := true
		for {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 {
				if rawW != nil && werr == nil {
					_, werr = rawW.Write(line)
				}
				if first { // the header must reach the parser
					lines <- line
					first = false
				} else {
					select {
					case lines <- line:
					default:
						deferred.Add(1)
					}
				}
			}
			if err != nil {
				if rawW != nil && werr == nil {
					werr = rawW.Flush()
				}
				switch {
				case err != io.EOF:
					readErr <- fmt.Errorf("read zmap output: %w", err)
				case werr != nil:
					readErr <- fmt.Errorf("raw output: %w", werr)
				}
				return
			}
		}
	}()
	if flushEvery <= 0 {
		flushEvery = time.Second
	}
	tick := time.NewTicker(flushEvery)
	defer tick.Stop()
	cr := &CSVReader{Port: port}
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				in.Deferred += deferred.Load()
				if err := in.Flush(ctx); err != nil {
					return err
				}
				select {
				case err := <-readErr:
					return err
				default:
				}
				return nil
			}
			if err := in.addLine(ctx, cr, line); err != nil {
				return err
			}
		case <-tick.C:
			if err := in.Flush(ctx); err != nil {
				return err
			}
		case <-ctx.Done():
			// Keep what was read; the caller stops zmap, whose remaining output still
			// reaches the raw file through the reader.
			in.Deferred += deferred.Load()
			in.Flush(context.WithoutCancel(ctx)) //nolint:errcheck
			return ctx.Err()
		}
	}
}

// addLine handles one CSV line: the header, a reply, or a bad line (counted).
func (in *Ingest) addLine(ctx context.Context, cr *CSVReader, line []byte) error {
	if len(bytes.TrimSpace(line)) == 0 {
		return nil
	}
	if !cr.HasHeader() {
		if err := cr.Header(line); err != nil {
			in.Bad++
			in.Log.Warn("zmap csv: bad header", "err", err)
		}
		return nil
	}
	rep, err := cr.Parse(line)
	if err != nil {
		in.Bad++
		if in.Bad <= 10 {
			in.Log.Warn("zmap csv: bad line", "err", err)
		}
		return nil
	}
	return in.Add(ctx, rep)
}

// IngestCSV replays a recorded zmap CSV file (no streaming, no raw copy).
func IngestCSV(ctx context.Context, r io.Reader, port uint16, in *Ingest) error {
	br := bufio.NewReaderSize(r, 1<<20)
	cr := &CSVReader{Port: port}
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			if err := in.addLine(ctx, cr, line); err != nil {
				return err
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	return in.Flush(ctx)
}
