package probe

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
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

	rows      []store.ScanReply
	week      string                    // the scan's ISO week, every row's partition key (read once)
	Counts    map[uint16]map[Kind]int64 // per port, per kind
	Lines     int64                     // data lines read (the header not counted)
	Replies   int64                     // replies classified
	Inserted  int64                     // rows new in the database
	Bad       int64                     // lines that did not parse
	BadLines  []int64                   // line numbers (1 = the header) of the first maxBadLines bad lines
	Truncated bool                      // the last line had no newline (a writer cut off): not parsed
	Deferred  int64                     // lines only written to the raw file (database behind or away)
	NoPort    int64                     // replies of a several-port run that name no port (ErrNoPort): not stored

	// Ports are the ports of a several-port zmap run (4.x): each UDP reply is stored
	// under its source port. Empty: one port, given to StreamCSV/IngestCSV.
	Ports []uint16

	// beforeFlush runs before a batch goes to the database: the raw file must hold
	// every row of the batch first.
	beforeFlush func() error
}

// maxBadLines is how many bad line numbers an Ingest keeps (and logs).
const maxBadLines = 10

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
	if in.beforeFlush != nil {
		if err := in.beforeFlush(); err != nil {
			return fmt.Errorf("raw output: %w", err)
		}
	}
	if in.week == "" {
		if err := in.Store.Pool.QueryRow(ctx, `SELECT iso_week FROM scans WHERE scan_id = $1`, in.ScanID).Scan(&in.week); err != nil {
			return fmt.Errorf("ingest %d replies: week of scan %d: %w", len(in.rows), in.ScanID, store.Unavailable(err))
		}
	}
	for i := range in.rows {
		in.rows[i].ISOWeek = in.week
	}
	n, err := store.Insert(ctx, in.Store, store.TableScanReplies, in.rows)
	if err != nil {
		return fmt.Errorf("ingest %d replies: %w", len(in.rows), store.Unavailable(err))
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

// StreamDrainLimit bounds how long StreamCSV keeps copying zmap's output to the raw file
// after it was interrupted (zmap got SIGINT and normally exits at once).
var StreamDrainLimit = 30 * time.Second

// rawLog is the raw file zmap's output is copied to. Lines are buffered and written
// (write(2)) whenever the reader has nothing more buffered from zmap, so a killed zprobe
// leaves every line it read on disk; sync writes and fsyncs what is buffered, and runs
// before every database batch, so no row reaches the database before its line is on disk.
type rawLog struct {
	mu  sync.Mutex
	w   *bufio.Writer
	f   io.Writer
	err error
}

func newRawLog(w io.Writer) *rawLog {
	if w == nil {
		return nil
	}
	return &rawLog{w: bufio.NewWriterSize(w, 1<<20), f: w}
}

func (r *rawLog) write(line []byte) {
	r.mu.Lock()
	if r.err == nil {
		_, r.err = r.w.Write(line)
	}
	r.mu.Unlock()
}

// failed reports whether a write, flush or sync of the raw file failed.
func (r *rawLog) failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err != nil
}

// flush writes the buffered lines to the file.
func (r *rawLog) flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = r.w.Flush()
	}
	return r.err
}

// sync writes the buffered lines and, for a file, fsyncs it. The fsync runs outside the
// lock: the reader (and so zmap's output pipe) waits for a write, never for the disk.
func (r *rawLog) sync() error {
	if err := r.flush(); err != nil {
		return err
	}
	f, ok := r.f.(interface{ Sync() error })
	if !ok {
		return nil
	}
	err := f.Sync()
	if err != nil {
		r.mu.Lock()
		if r.err == nil {
			r.err = err
		}
		r.mu.Unlock()
	}
	return err
}

// StreamCSV reads zmap CSV from r while zmap writes it, copies every line to raw (the
// on-disk record for replays; may be nil) before anything else, classifies and ingests
// each reply, and writes a batch at least every flushEvery so rows land while the scan
// runs. A batch is written only after the raw file holds its lines (rawLog.sync).
//
// It returns when r ends (zmap exited), so the raw file is complete. When the database
// becomes unavailable (store.IsUnavailable), the rest goes to the raw file only, counted
// in in.Deferred, and StreamCSV still returns nil once r ends: the caller replays the raw
// file when the database is back. Any other database error is returned after r ends.
// When ctx is cancelled (zmap got SIGINT), it keeps copying to the raw file until r ends
// or StreamDrainLimit passes, and returns ctx's error.
//
// readLines reads r and writes the raw file; the loop here hands each line, each tick
// and the end to a csvStream.
func StreamCSV(ctx context.Context, r io.Reader, raw io.Writer, port uint16, in *Ingest, flushEvery time.Duration) error {
	lines := make(chan []byte, StreamQueue)
	readErr := make(chan error, 1)
	var deferred atomic.Int64
	rl := newRawLog(raw)
	if rl != nil {
		in.beforeFlush = rl.sync
		defer func() { in.beforeFlush = nil }()
	}
	go readLines(r, rl, lines, readErr, &deferred)
	if flushEvery <= 0 {
		flushEvery = time.Second
	}
	tick := time.NewTicker(flushEvery)
	defer tick.Stop()
	st := &csvStream{in: in, rl: rl, cr: &CSVReader{Port: port, Ports: in.Ports}}
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				in.Deferred += deferred.Load()
				return st.end(ctx, readErr)
			}
			st.line(ctx, line)
		case <-tick.C:
			st.tick(ctx)
		case <-ctx.Done():
			st.drain(ctx, lines)
			in.Deferred += deferred.Load()
			return ctx.Err()
		}
	}
}

// readLines reads zmap's output from r, copies each line to the raw file first (rl,
// may be nil; written out whenever the reader has nothing more buffered from zmap) and
// passes it on to lines, or, when lines is full, leaves it to a replay of the raw file:
// it counts in deferred once the raw file holds it (the header always reaches the
// parser). Once the raw file fails, no line reaches the parser or the count: none of
// them can be replayed; r is still read to its end, so zmap is not blocked. When r ends
// it syncs the raw file, sends a read or raw-file error to readErr, and closes lines.
func readLines(r io.Reader, rl *rawLog, lines chan<- []byte, readErr chan<- error, deferred *atomic.Int64) {
	defer close(lines)
	br := bufio.NewReaderSize(r, 1<<20)
	first := true
	var pending int64 // deferred lines not yet known to be on disk
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && (rl == nil || !rl.failed()) {
			if rl != nil {
				rl.write(line)
			}
			switch {
			case first: // the header must reach the parser
				lines <- line
				first = false
			default:
				select {
				case lines <- line:
				default:
					pending++
				}
			}
			if rl == nil {
				deferred.Add(pending)
				pending = 0
			} else if br.Buffered() == 0 && rl.flush() == nil { // the next read may block: put what we have on disk
				deferred.Add(pending)
				pending = 0
			}
		}
		if err != nil {
			var werr error
			if rl != nil {
				if werr = rl.sync(); werr == nil {
					deferred.Add(pending)
				}
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
}

// csvStream is the state of StreamCSV's loop.
type csvStream struct {
	in      *Ingest
	rl      *rawLog // nil: no raw file
	cr      *CSVReader
	lineNo  int64 // of the lines that reached the classifier (a replay numbers every line)
	stopErr error // a database error other than unavailability
	dbAway  bool  // the database went away: lines are deferred to the raw file
}

// stopped says lines no longer go to the database (it went away, or failed).
func (st *csvStream) stopped() bool { return st.stopErr != nil || st.dbAway }

// deferLines counts n lines as left to a replay of the raw file, unless the raw file
// failed: then it holds none of them to replay.
func (st *csvStream) deferLines(n int64) {
	if st.rl == nil || !st.rl.failed() {
		st.in.Deferred += n
	}
}

// dbFailed handles a database error: unavailability defers the queued rows and the
// rest to the raw file (nil); any other error stops the ingest and is returned.
func (st *csvStream) dbFailed(err error) error {
	in := st.in
	if store.IsUnavailable(err) {
		if !st.dbAway {
			in.Log.Warn("database unavailable: the rest of this port goes to the raw file only and is ingested when the database is back",
				"err", err, "rows_pending", len(in.rows))
		}
		st.dbAway = true
		st.deferLines(int64(len(in.rows)))
		in.rows = in.rows[:0]
		return nil
	}
	st.stopErr = err
	return err
}

// line ingests one line of zmap's output, or counts it as deferred once stopped.
func (st *csvStream) line(ctx context.Context, line []byte) {
	st.lineNo++
	if st.stopped() {
		if st.lineNo > 1 {
			st.deferLines(1)
		}
		return
	}
	if err := st.in.addLine(ctx, st.cr, line, st.lineNo); err != nil {
		st.dbFailed(err) //nolint:errcheck // kept in stopErr
	}
}

// tick syncs the raw file and writes the queued rows.
func (st *csvStream) tick(ctx context.Context) {
	if st.stopped() {
		return
	}
	if st.rl != nil {
		if err := st.rl.sync(); err != nil {
			st.stopErr = fmt.Errorf("raw output: %w", err)
			return
		}
	}
	if err := st.in.Flush(ctx); err != nil {
		st.dbFailed(err) //nolint:errcheck // kept in stopErr
	}
}

// end runs when zmap's output ended: the raw file synced, the last rows written (unless
// stopped); it returns the reader's error, else the database error that stopped the
// ingest.
func (st *csvStream) end(ctx context.Context, readErr <-chan error) error {
	if !st.stopped() {
		if st.rl != nil {
			if err := st.rl.sync(); err != nil {
				return fmt.Errorf("raw output: %w", err)
			}
		}
		if err := st.in.Flush(ctx); err != nil && st.dbFailed(err) != nil {
			return err
		}
	}
	select {
	case err := <-readErr:
		return err
	default:
	}
	return st.stopErr
}

// drain runs when ctx is cancelled (zmap got SIGINT): it writes what was read, then
// counts as deferred the lines that still come while zmap's remaining output reaches
// the raw file through the reader, until the output ends or StreamDrainLimit passes.
func (st *csvStream) drain(ctx context.Context, lines <-chan []byte) {
	if !st.stopped() {
		st.in.Flush(context.WithoutCancel(ctx)) // on failure the raw file still holds the rows
	}
	limit := time.NewTimer(StreamDrainLimit)
	defer limit.Stop()
	for {
		select {
		case _, ok := <-lines:
			if ok {
				st.deferLines(1)
				continue
			}
		case <-limit.C:
		}
		return
	}
}

// addLine handles line number lineNo: the header, a reply, or a bad line (counted).
func (in *Ingest) addLine(ctx context.Context, cr *CSVReader, line []byte, lineNo int64) error {
	if len(bytes.TrimSpace(line)) == 0 {
		return nil
	}
	if !cr.HasHeader() {
		if err := cr.Header(line); err != nil {
			in.bad(lineNo, err)
		}
		return nil
	}
	in.Lines++
	rep, err := cr.Parse(line)
	if errors.Is(err, ErrNoPort) {
		in.NoPort++
		return nil
	}
	if err != nil {
		in.bad(lineNo, err)
		return nil
	}
	return in.Add(ctx, rep)
}

func (in *Ingest) bad(lineNo int64, err error) {
	in.Bad++
	if len(in.BadLines) < maxBadLines {
		in.BadLines = append(in.BadLines, lineNo)
		in.Log.Warn("zmap csv: bad line", "line", lineNo, "err", err)
	}
}

// IngestCSV replays a recorded zmap CSV file (no streaming, no raw copy). A last line
// without a newline was cut off by its writer: it is not parsed (a cut payload could
// classify as something it is not), and in.Truncated says so.
func IngestCSV(ctx context.Context, r io.Reader, port uint16, in *Ingest) error {
	br := bufio.NewReaderSize(r, 1<<20)
	cr := &CSVReader{Port: port, Ports: in.Ports}
	var lineNo int64
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			lineNo++
			if err == io.EOF { // no newline: cut off
				in.Truncated = true
				in.Log.Warn("zmap csv: last line cut off (no newline); not parsed", "line", lineNo, "bytes", len(line))
				break
			}
			if err := in.addLine(ctx, cr, line, lineNo); err != nil {
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
