// Package pgcluster starts (or reuses) a private PostgreSQL cluster for doqscan when no
// DATABASE_URL is given: the installed server binaries, run as an unprivileged user
// (initdb refuses root), under a data directory of the project, listening only on a Unix
// socket (reachable from every network namespace of the testbed, no TCP port to clash).
package pgcluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/doqscan/doqscan/internal/home"
)

// Database and role the private cluster holds.
const (
	DBName = "doqscan"
	DBUser = "doqscan"
)

// Cluster is a private PostgreSQL cluster under Dir.
type Cluster struct {
	Dir    string // var/postgres of the project
	BinDir string // PostgreSQL server binaries
	OSUser string // the unprivileged account that runs the server ("" = the current one)
	// Netns, if set, is the network namespace the server runs in (the testbed's
	// database namespace); its Unix socket stays reachable from everywhere.
	Netns string
}

// DataDir is the cluster's data directory.
func (c *Cluster) DataDir() string { return filepath.Join(c.Dir, "data") }

// SocketDir holds the server's Unix socket.
func (c *Cluster) SocketDir() string { return filepath.Join(c.Dir, "run") }

// LogFile is the server log.
func (c *Cluster) LogFile() string { return filepath.Join(c.Dir, "postgres.log") }

// URL is the connection string of the cluster's doqscan database.
func (c *Cluster) URL() string {
	return fmt.Sprintf("host=%s dbname=%s user=%s sslmode=disable", c.SocketDir(), DBName, DBUser)
}

// Default returns the cluster of the project home, with the newest installed server.
func Default() (*Cluster, error) {
	bin, err := findBinDir()
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: filepath.Join(home.Dir(), "var", "postgres"), BinDir: bin}
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("postgres"); err != nil {
			return nil, errors.New("running as root and there is no unprivileged 'postgres' account to run the private " +
				"PostgreSQL cluster (apt-get install postgresql creates it), or set DATABASE_URL")
		}
		c.OSUser = "postgres"
		// A checkout under a directory the postgres account cannot enter (e.g. /root,
		// mode 700) cannot hold its data: use a directory of its own under /var/lib,
		// one per project home, and say so in the log line that names the data directory.
		if !reachableBy(c.OSUser, home.Dir()) {
			sum := sha256.Sum256([]byte(home.Dir()))
			c.Dir = filepath.Join("/var/lib/doqscan", "postgres-"+hex.EncodeToString(sum[:4]))
		}
	}
	return c, nil
}

// reachableBy reports whether account osUser can enter dir (every parent searchable).
func reachableBy(osUser, dir string) bool {
	return exec.Command("runuser", "-u", osUser, "--", "/usr/bin/test", "-x", dir).Run() == nil
}

// BinDir is the directory of the newest installed PostgreSQL server binaries (initdb,
// pg_ctl, pg_dump, pg_restore).
func BinDir() (string, error) { return findBinDir() }

// findBinDir finds the newest /usr/lib/postgresql/N/bin holding initdb, or initdb on PATH.
func findBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
	if len(dirs) > 0 {
		return filepath.Dir(dirs[0]), nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("no PostgreSQL server binaries found (apt-get install postgresql), or set DATABASE_URL")
}

func pgMajor(initdb string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return v
}

// Ensure makes the cluster exist and run, creates the doqscan database, and returns its
// URL. started says whether this call started the server. Concurrent callers serialise
// on a lock file.
func (c *Cluster) Ensure(ctx context.Context) (url string, started bool, err error) {
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return "", false, fmt.Errorf("private database: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(c.Dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", false, fmt.Errorf("private database: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", false, fmt.Errorf("private database: lock: %w", err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing the file releases the lock anyway

	if err := c.prepareDirs(); err != nil {
		return "", false, err
	}
	if _, err := os.Stat(filepath.Join(c.DataDir(), "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		if err := c.initdb(ctx); err != nil {
			return "", false, err
		}
	}
	if !c.Running(ctx) {
		if _, err := c.run(ctx, "pg_ctl", "-D", c.DataDir(), "-l", c.LogFile(), "-w", "-t", "60", "start"); err != nil {
			return "", false, fmt.Errorf("start private PostgreSQL (log %s): %w", c.LogFile(), err)
		}
		started = true
	}
	if err := c.createDB(ctx); err != nil {
		return "", started, err
	}
	return c.URL(), started, nil
}

// Running reports whether the cluster's server is up.
func (c *Cluster) Running(ctx context.Context) bool {
	_, err := c.run(ctx, "pg_ctl", "-D", c.DataDir(), "status")
	return err == nil
}

// Stop stops the server (fast shutdown) if it runs.
func (c *Cluster) Stop(ctx context.Context) error {
	if !c.Running(ctx) {
		return nil
	}
	_, err := c.run(ctx, "pg_ctl", "-D", c.DataDir(), "-m", "fast", "-w", "stop")
	return err
}

func (c *Cluster) prepareDirs() error {
	for _, d := range []string{c.DataDir(), c.SocketDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("private database: %w", err)
		}
	}
	if c.OSUser == "" {
		return nil
	}
	u, err := user.Lookup(c.OSUser)
	if err != nil {
		return err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for _, d := range []string{c.DataDir(), c.SocketDir()} {
		if err := os.Chown(d, uid, gid); err != nil {
			return fmt.Errorf("private database: chown %s: %w", d, err)
		}
	}
	// The server's log is written by pg_ctl as that user.
	f, err := os.OpenFile(c.LogFile(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("private database: %w", err)
	}
	f.Close()
	if err := os.Chown(c.LogFile(), uid, gid); err != nil {
		return err
	}
	// The unprivileged user must be able to reach the directory (not under /root).
	if _, err := c.run(context.Background(), "/usr/bin/test", "-w", c.DataDir()); err != nil {
		return fmt.Errorf("private database: user %s cannot reach %s (a parent directory is closed to it); "+
			"set DOQSCAN_HOME to a directory it can reach, or set DATABASE_URL", c.OSUser, c.DataDir())
	}
	return nil
}

func (c *Cluster) initdb(ctx context.Context) error {
	if _, err := c.run(ctx, "initdb", "-D", c.DataDir(), "-U", DBUser, "-A", "trust", "-E", "UTF8", "--no-locale"); err != nil {
		return fmt.Errorf("initdb: %w", err)
	}
	conf := fmt.Sprintf(`
# doqscan private cluster: Unix socket only, reachable from every testbed namespace.
listen_addresses = ''
unix_socket_directories = '%s'
unix_socket_permissions = 0777
max_connections = 200
shared_buffers = 512MB
max_wal_size = 4GB
log_min_messages = warning
`, c.SocketDir())
	f, err := os.OpenFile(filepath.Join(c.DataDir(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(conf)
	return err
}

func (c *Cluster) createDB(ctx context.Context) error {
	out, err := c.run(ctx, "psql", "-h", c.SocketDir(), "-U", DBUser, "-d", "postgres", "-Atc",
		"SELECT 1 FROM pg_database WHERE datname = '"+DBName+"'")
	if err != nil {
		return fmt.Errorf("private database: %w", err)
	}
	if strings.TrimSpace(out) == "1" {
		return nil
	}
	if _, err := c.run(ctx, "createdb", "-h", c.SocketDir(), "-U", DBUser, DBName); err != nil {
		return fmt.Errorf("private database: createdb: %w", err)
	}
	return nil
}

// run runs a PostgreSQL binary (or an absolute path) as the cluster's OS user.
func (c *Cluster) run(ctx context.Context, name string, args ...string) (string, error) {
	path := name
	if !filepath.IsAbs(name) {
		path = filepath.Join(c.BinDir, name)
		if _, err := os.Stat(path); err != nil {
			if p, err := exec.LookPath(name); err == nil {
				path = p
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	argv := append([]string{path}, args...)
	if c.OSUser != "" {
		argv = append([]string{"runuser", "-u", c.OSUser, "--"}, argv...)
	}
	if c.Netns != "" {
		argv = append([]string{"ip", "netns", "exec", c.Netns}, argv...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = "/"
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg == "" {
			msg = strings.TrimSpace(out.String())
		}
		if msg == "" {
			msg = err.Error()
		}
		return out.String(), fmt.Errorf("%s: %s", name, lastLine(msg))
	}
	return out.String(), nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// fleetConf is the configuration file ServeFleet writes beside postgresql.conf.
const fleetConf = "doqscan_fleet.conf"

// ServeFleet makes the cluster serve a fleet of vantage points: TCP on listen (an
// address, port 5432) with TLS, the server certificate and CA of fleetDir (dbctl fleet
// init), and client-certificate logins only (pg_hba "hostssl ... cert": the
// certificate's common name is the role). The Unix socket keeps serving the admin. The
// cluster is started, or restarted to take the settings.
func (c *Cluster) ServeFleet(ctx context.Context, listen, fleetDir string) error {
	if _, _, err := c.Ensure(ctx); err != nil {
		return err
	}
	uid, gid := -1, -1
	if c.OSUser != "" {
		u, err := user.Lookup(c.OSUser)
		if err != nil {
			return err
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
	}
	for src, dst := range map[string]string{"server.crt": "fleet-server.crt", "server.key": "fleet-server.key", "ca.crt": "fleet-ca.crt"} {
		b, err := os.ReadFile(filepath.Join(fleetDir, src))
		if err != nil {
			return fmt.Errorf("fleet certificates (dbctl fleet-init): %w", err)
		}
		path := filepath.Join(c.DataDir(), dst)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return err
		}
		if uid >= 0 {
			if err := os.Chown(path, uid, gid); err != nil {
				return err
			}
		}
	}
	conf := fmt.Sprintf(`# doqscan fleet: vantage points connect over TCP with TLS and client certificates.
listen_addresses = '%s'
ssl = on
ssl_cert_file = 'fleet-server.crt'
ssl_key_file = 'fleet-server.key'
ssl_ca_file = 'fleet-ca.crt'
`, listen)
	if err := c.writeOwned(filepath.Join(c.DataDir(), fleetConf), conf, uid, gid); err != nil {
		return err
	}
	if err := appendOnce(filepath.Join(c.DataDir(), "postgresql.conf"), "include_if_exists '"+fleetConf+"'"); err != nil {
		return err
	}
	if err := appendOnce(filepath.Join(c.DataDir(), "pg_hba.conf"), "hostssl all all 0.0.0.0/0 cert"); err != nil {
		return err
	}
	if _, err := c.run(ctx, "pg_ctl", "-D", c.DataDir(), "-l", c.LogFile(), "-w", "-t", "60", "restart"); err != nil {
		return fmt.Errorf("restart private PostgreSQL for the fleet (log %s): %w", c.LogFile(), err)
	}
	return nil
}

func (c *Cluster) writeOwned(path, content string, uid, gid int) error {
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		return err
	}
	if uid >= 0 {
		return os.Chown(path, uid, gid)
	}
	return nil
}

// appendOnce appends line to the file unless a line equal to it is there.
func appendOnce(path, line string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(l) == line {
			return nil
		}
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintf(f, "\n%s\n", line)
	return err
}
