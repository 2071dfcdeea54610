// Command idemgen turns annotated Go interfaces into typed idempotent
// wrappers on the idem runtime. Run it with go generate:
//
//	//go:generate go run github.com/idemkit/idem/cmd/idemgen
//
// See docs/idemgen.md, or run idemgen -h.
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
