package testsupport

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// NetnsSNMP reads the counters of one protocol line of a network namespace's
// /proc/net/snmp (proto "Ip", "Udp", ...) by name: the first such line names them, the
// second holds their values. A namespace without that line, or a value that is not a
// number, is an error.
func NetnsSNMP(ns, proto string) (map[string]int64, error) {
	out, err := exec.Command("ip", "netns", "exec", ns, "cat", "/proc/net/snmp").Output()
	if err != nil {
		return nil, fmt.Errorf("/proc/net/snmp of %s: %w", ns, err)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != proto+":" {
			continue
		}
		if names == nil {
			names = f[1:]
			continue
		}
		res := map[string]int64{}
		for i, v := range f[1:] {
			if i >= len(names) {
				break
			}
			if res[names[i]], err = strconv.ParseInt(v, 10, 64); err != nil {
				return nil, fmt.Errorf("/proc/net/snmp of %s: %s %s: %w", ns, proto, names[i], err)
			}
		}
		return res, nil
	}
	return nil, fmt.Errorf("/proc/net/snmp of %s: no %s: counters:\n%s", ns, proto, out)
}
