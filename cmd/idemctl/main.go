// Command idemctl is the operator's tool for idempotency records that need a
// person: it lists UNKNOWN, given-up and abandoned PROCESSING records, shows
// one with everything stored, and resolves one by hand (success, failed or
// released), by compare-and-set only. See docs/idemctl.md, or run idemctl -h.
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
