package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/idemkit/idem/internal/version"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // a store error, or a resolution refused
	exitUsage = 2
)

const usage = `usage: idemctl <command> [flags]

idemctl finds and resolves idempotency records that need a person: UNKNOWN
outcomes no query could converge, records a reconciler gave up on, and
PROCESSING records whose worker died.

Commands:
  list      list UNKNOWN / given-up / abandoned PROCESSING records
  show      show one record with everything stored
  resolve   decide a record's outcome by hand: success, failed or released
  version   print the idem version idemctl was built from

Every command needs exactly one store, with the same settings as the service:
  -postgres DSN            (or IDEM_POSTGRES_URL)
  -redis URL               (or IDEM_REDIS_URL)
  -redis-cluster h:p,...   (or IDEM_REDIS_CLUSTER_ADDRS)
A store flag on the command line wins over the environment.

Examples:
  idemctl list -postgres "$DSN" -stuck -older-than 10m
  idemctl list -redis redis://localhost:6379 -gave-up 20 -json
  idemctl show -scope tenant-1 -op Payments.Charge -key k-1
  idemctl resolve -scope tenant-1 -op Payments.Charge -key k-1 \
      -to success -response '{"charge_id":"ch_1"}' -reason "charge ch_1 found in the gateway dashboard"

Run idemctl <command> -h for the command's flags. Reference: docs/idemctl.md.
Exit codes: 0 ok, 1 error (store, or resolution refused), 2 usage.
`

func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runEnv(ctx, args, stdout, stderr, os.Getenv)
}

// usageError is bad input: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// errHelpShown: -h was asked for and the usage printed.
var errHelpShown = errors.New("help shown")

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"list", "list records that need a person", runList},
		{"show", "show one record", runShow},
		{"resolve", "resolve one record by hand", runResolve},
	}
}

func runEnv(ctx context.Context, args []string, stdout, stderr io.Writer, env func(string) string) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case "version", "-version", "--version":
		if len(args) > 1 {
			fmt.Fprintf(stderr, "idemctl version takes no arguments\n")
			return exitUsage
		}
		fmt.Fprintln(stdout, "idemctl", version.Read())
		return exitOK
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], env, stdout, stderr)
		var ue usageError
		switch {
		case err == nil, errors.Is(err, errHelpShown):
			return exitOK
		case errors.Is(err, flag.ErrHelp): // the flag package printed the usage
			return exitOK
		case errors.As(err, &ue):
			fmt.Fprintf(stderr, "idemctl %s: %v\nRun 'idemctl %s -h' for usage.\n", c.name, err, c.name)
			return exitUsage
		case errors.Is(err, errFlagParse):
			return exitUsage // the flag package said what is wrong
		}
		fmt.Fprintf(stderr, "idemctl %s: %v\n", c.name, err)
		return exitError
	}
	fmt.Fprintf(stderr, "idemctl: unknown command %q (want list, show, resolve or version)\nRun 'idemctl -h' for usage.\n", args[0])
	return exitUsage
}

var errFlagParse = errors.New("bad flags")

// newFlagSet returns a flag set for a command, its usage printing head and
// the flags.
func newFlagSet(name, head string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("idemctl "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), head)
		fmt.Fprintln(fs.Output(), "\nFlags:")
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args: -h prints the usage to stdout; a bad flag (the
// flag package prints why and the usage) or a stray argument is a usage
// error.
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	for _, a := range args {
		if a == "--" || !strings.HasPrefix(a, "-") {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" || a == "--h" {
			fs.SetOutput(stdout)
			fs.Usage()
			return errHelpShown
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelpShown
		}
		return errFlagParse
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q (flags only)", fs.Arg(0))
	}
	return nil
}

// isSet reports whether the flag was given on the command line.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
