package testsupport

import "os"

// UnshareNet is unshare(1)'s flags for running a command in a network namespace of its
// own (no interface but a down loopback, so it can contact nothing): root creates one
// directly; any other user inside a user namespace of its own, mapped to root there.
func UnshareNet() []string {
	if os.Geteuid() == 0 {
		return []string{"--net"}
	}
	return []string{"--map-root-user", "--net"}
}
