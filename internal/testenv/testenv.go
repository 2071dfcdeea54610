// Package testenv gives tests the servers that scripts/test.sh starts.
//
// A test that needs a server asks for it here. When the variable naming it
// is unset the test is skipped, except under CI (CI=true), where a missing
// server is a failure: CI must never pass by skipping the real-store tests.
package testenv

import (
	"os"
	"strings"
	"testing"
	"time"
)

// Variables read by the helpers.
const (
	PostgresURLVar       = "IDEM_TEST_POSTGRES_URL"
	RedisURLVar          = "IDEM_TEST_REDIS_URL"
	RedisClusterAddrsVar = "IDEM_TEST_REDIS_CLUSTER_ADDRS"
)

// InCI reports whether the tests run under CI.
func InCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v == "true" || v == "1"
}

// Need returns the value of the environment variable name, skipping the test
// when it is unset locally and failing it under CI.
func Need(t testing.TB, name, what string) string {
	t.Helper()
	v := os.Getenv(name)
	if v != "" {
		return v
	}
	if InCI() {
		t.Fatalf("%s is not set: %s is required under CI (scripts/test.sh starts it)", name, what)
	}
	t.Skipf("%s is not set: skipping the %s tests (run scripts/test.sh to start one)", name, what)
	return ""
}

// PostgresURL returns the DSN of the test PostgreSQL server.
func PostgresURL(t testing.TB) string { return Need(t, PostgresURLVar, "PostgreSQL") }

// RedisURL returns the URL of the standalone test Redis server.
func RedisURL(t testing.TB) string { return Need(t, RedisURLVar, "Redis") }

// RedisClusterAddrs returns the addresses of the test Redis Cluster masters.
func RedisClusterAddrs(t testing.TB) []string {
	return strings.Split(Need(t, RedisClusterAddrsVar, "Redis Cluster"), ",")
}

// ChildRaceVar names the environment variable that asks ChildGoFlags for
// -race in a test binary built without the race detector. scripts/test.sh
// sets it to 1 for its batch without -race, whose cmd/idemlint tests start
// go vet and the idemlint driver (which runs go list -export) on modules of
// their own: with it, those children read the packages go vet -race
// already compiled (the standard library above all) instead of compiling
// them once more without it. The analyses do not depend on the mode: no
// file of those modules has a race build constraint.
const ChildRaceVar = "IDEM_TEST_CHILD_RACE"

// ChildFlagsVar names the environment variable whose value (space-separated
// flags, as in GOFLAGS) ChildGoFlags appends for every go command a test
// starts. scripts/test.sh sets it to -ldflags=-w: the binaries the tests
// build and run (generated code, the idemlint and idemgen commands, the
// language server) are linked without DWARF, which only a debugger reads,
// and each link takes about a quarter less CPU; compiled packages do not
// depend on it, so the build cache is shared as before.
const ChildFlagsVar = "IDEM_TEST_CHILD_GOFLAGS"

// Race reports whether the test binary was built with the race detector.
func Race() bool { return race }

// ChildGoFlags returns the value of GOFLAGS for a go command a test starts
// (a build, go vet, go test or go install of a module it made, or a tool
// that runs go list -export): flags, and -race when the test binary itself
// was built with the race detector or ChildRaceVar is 1, then the flags of
// ChildFlagsVar. So a test in
// scripts/test.sh compiles its children's packages in the mode go vet
// -race and the -race test builds already compiled them, and a cold build
// cache compiles them once: without it the examples/adopt test alone
// compiled pgx, go-redis and the runtime again (162 s of CPU against 42 s,
// measured after go vet -race on an empty cache).
func ChildGoFlags(flags ...string) string {
	if race || os.Getenv(ChildRaceVar) == "1" {
		flags = append(flags, "-race")
	}
	flags = append(flags, strings.Fields(os.Getenv(ChildFlagsVar))...)
	return strings.Join(flags, " ")
}

// Within runs fn on a goroutine of its own and fails the test when fn has
// not returned after d: a test of a promise that something ends (a call, a
// wait, a walk) fails on a hang instead of running into go test's timeout.
// fn reports with t.Error, not t.Fatal (it is not the test's goroutine).
func Within(t testing.TB, d time.Duration, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		t.Fatalf("did not return within %v", d)
	}
}

// SetPanicNil sets GODEBUG=panicnil=1 for the test (the default of a main
// module whose go.mod says go 1.20 or older: recover returns nil for
// panic(nil), and stops it) and fails it when the setting did not take.
func SetPanicNil(t testing.TB) {
	t.Helper()
	t.Setenv("GODEBUG", "panicnil=1")
	v := func() (v any) {
		defer func() { v = recover() }()
		panic(nil)
	}()
	if v != nil {
		t.Fatalf("GODEBUG=panicnil=1 did not take (recover returned %v); GODEBUG=%q", v, os.Getenv("GODEBUG"))
	}
}
