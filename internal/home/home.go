// Package home resolves the project home: the one directory every doqscan tool derives
// its default paths from (bin/, blocklist/, var/scans, var/spill, var/postgres, ...).
// No tool resolves a default path against the working directory: under systemd, cron or
// a container that is not the installation.
package home

import (
	"bytes"
	"os"
	"path/filepath"
)

// Env names the variable that sets the project home explicitly.
const Env = "DOQSCAN_HOME"

// Fallback is the project home when nothing else names one.
const Fallback = "/var/lib/doqscan"

// Dir returns the project home: $DOQSCAN_HOME (made absolute), else the source tree the
// working directory or the executable is in (found by its schema.sql and go.mod), else
// the installation the executable is in (<home>/bin/<tool> next to <home>/schema.sql),
// else Fallback.
func Dir() string {
	wd, _ := os.Getwd()
	exe, err := os.Executable()
	if err == nil {
		if r, err := filepath.EvalSymlinks(exe); err == nil {
			exe = r
		}
	}
	return resolve(os.Getenv(Env), wd, exe)
}

// resolve is Dir given $DOQSCAN_HOME, the working directory and the executable's path
// ("" when unknown).
func resolve(env, wd, exe string) string {
	if env != "" {
		if !filepath.IsAbs(env) && wd != "" {
			return filepath.Join(wd, env)
		}
		return filepath.Clean(env)
	}
	var starts []string
	if wd != "" {
		starts = append(starts, wd)
	}
	exeDir := ""
	if exe != "" {
		exeDir = filepath.Dir(exe)
		starts = append(starts, exeDir)
	}
	for _, s := range starts {
		for d := s; ; d = filepath.Dir(d) {
			if isSourceTree(d) {
				return d
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	if exeDir != "" && filepath.Base(exeDir) == "bin" && exists(filepath.Join(filepath.Dir(exeDir), "schema.sql")) {
		return filepath.Dir(exeDir)
	}
	return Fallback
}

// Path joins elem onto the project home: Path("var", "scans").
func Path(elem ...string) string {
	return filepath.Join(append([]string{Dir()}, elem...)...)
}

func isSourceTree(d string) bool {
	mod, err := os.ReadFile(filepath.Join(d, "go.mod"))
	if err != nil {
		return false
	}
	return exists(filepath.Join(d, "schema.sql")) && bytes.Contains(mod, []byte("module github.com/doqscan/doqscan"))
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
