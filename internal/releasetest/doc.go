// Package releasetest checks that the idem module works for someone outside
// this repository, the way a release is used: TestOutsiderInstall packs the
// committed tree (HEAD) into a module zip with golang.org/x/mod/zip, serves
// it from a file-system module proxy as github.com/idemkit/idem@v0.0.0-test,
// and, in an empty GOPATH with no access to this checkout (GOWORK=off,
// GOENV=off, run from temporary directories),
// installs idemlint, idemgen and idemctl with go install ...@v0.0.0-test,
// checks that each reports v0.0.0-test, and builds and runs a small service
// that requires the module at that version and generates its wrapper with
// go generate and idemgen.
//
// It fails for what would break a user of a tag: a replace directive in
// go.mod (go install refuses the module), a package that needs a file that
// is not committed (a generated file left out of git, a gitignored one), a
// requirement missing from go.mod or go.sum, a version the tools do not
// report.
//
// The build and module caches are the machine's, so that only idem's own
// packages are compiled: the module cache never holds this checkout, and
// the test removes idem@v0.0.0-test from it before and after (under a
// lock, so that two checkouts on one machine take turns). Dependencies the
// cache lacks come from the usual proxy, and the checksum database is asked
// through it as for any user.
package releasetest
