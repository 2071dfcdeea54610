// Command idemlint runs idemlint's analyzers (txrpc, timeoutfail,
// tokenorder, blindupdate, checkthenact, serverkey, bypass) over packages:
//
//	idemlint ./...
//	idemlint -json ./...
//	idemlint -sarif ./... > idemlint.sarif
//	idemlint -version
//	idemlint lsp
//	idemlint -timeoutfail=false -txrpc.netfuncs='(*example.com/pay.Client).Charge' ./...
//	go vet -vettool=$(command -v idemlint) ./...
//
// Run directly, it loads the whole program and resolves calls through
// interfaces to their implementations in the loaded packages (see
// facts.Program); under go vet it analyzes one package at a time. Both read
// .idemlint.json from the module root (analyzer.ConfigFile); flags add to it.
//
// "idemlint lsp" runs it as a language server for editors (LSP over stdin
// and stdout), with the same driver: see internal/lsp.
//
// Text output is "file:line:col: message (rule)", under go vet too. A package that does not
// load is reported with its position and not analyzed; the others are.
//
// Exit status: 0 clean, 3 findings, 1 errors, such as a package that did
// not load (as every go/analysis checker; 0 or 1 with -json and -sarif).
// See docs/idemlint.md.
package main

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/tools/go/analysis/multichecker"

	"github.com/idemkit/idem/analyzer"
	"github.com/idemkit/idem/internal/version"
)

func main() {
	// Before the configuration, so that it answers anywhere. Not -V: that
	// is go vet's handshake (-V=full), which the per-package driver answers.
	if len(os.Args) == 2 && (os.Args[1] == "-version" || os.Args[1] == "--version") {
		fmt.Println("idemlint", version.Read())
		return
	}
	// The language server reads each module's configuration itself.
	if len(os.Args) >= 2 && os.Args[1] == "lsp" {
		os.Exit(serveLSP(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	settings, _, err := analyzer.LoadConfig(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, "idemlint:", err)
		os.Exit(1)
	}
	if modular(os.Args[1:]) {
		// go vet's protocol (-V=full, -flags, a .cfg unit) and -fix:
		// the standard per-package driver.
		as, err := analyzer.New(settings)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		nameFindings(as)
		multichecker.Main(as...)
		return
	}
	os.Exit(run(settings, os.Args[1:], os.Stdout, os.Stderr))
}

// modular reports whether the arguments ask for the per-package driver.
func modular(args []string) bool {
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "-V"), a == "-flags", strings.HasPrefix(a, "-fix"), strings.HasPrefix(a, "--fix"):
			return true
		}
	}
	return len(args) > 0 && strings.HasSuffix(args[len(args)-1], ".cfg")
}
