// Package facts computes what idemlint's rules know about functions, and
// exports it as analysis facts so that a helper two packages away is seen:
// which functions (transitively) do network I/O and through which chain,
// which run a callback inside a database transaction, which tell a timeout
// apart, which take a definite-failure action (write a FAILED status, refund,
// delete an idempotency token, return a permanent error) and which delete an
// idempotency token.
//
// One facts analyzer is shared by every rule of a suite (a fact type may be
// declared by only one analyzer); rules reach it through [Facts].
package facts

import (
	"flag"
	"fmt"
	"reflect"
	"strings"

	"golang.org/x/tools/go/analysis"
)

// NetIO marks a function that may do network I/O, directly or through
// helpers. Chain lists the callees from the function down to the leaf
// network call, for example ["postJSON", "(*http.Client).Do"]; Leaf is the
// position (file:line:col) of the leaf call.
type NetIO struct {
	Chain []string
	Leaf  string
	// Handoff, when another goroutine does the I/O: where the work is
	// handed off (a goroutine start, a send on a channel).
	Handoff string
}

func (*NetIO) AFact() {}
func (f *NetIO) String() string {
	return "netio(" + strings.Join(f.Chain, " -> ") + ")"
}

// TxRunner marks a function that begins a transaction, calls its func
// parameter Param (an index in the SSA parameter list, receiver first) while
// the transaction is open, and ends it.
type TxRunner struct{ Param int }

func (*TxRunner) AFact()           {}
func (f *TxRunner) String() string { return fmt.Sprintf("txrunner(%d)", f.Param) }

// TimeoutCheck marks a function that tells a timeout apart
// (errors.Is(err, context.DeadlineExceeded), os.IsTimeout, net.Error's
// Timeout, gRPC DeadlineExceeded/Unavailable).
type TimeoutCheck struct{}

func (*TimeoutCheck) AFact()         {}
func (*TimeoutCheck) String() string { return "timeoutcheck" }

// FailAction marks a function that takes a definite-failure action: it
// writes a FAILED status, refunds, deletes an idempotency token or returns a
// permanent failure, without telling a timeout apart.
type FailAction struct {
	What  string // e.g. "writes a FAILED status"
	Chain []string
}

func (*FailAction) AFact() {}
func (f *FailAction) String() string {
	return "failaction(" + f.What + ": " + strings.Join(f.Chain, " -> ") + ")"
}

// StatusWriter marks a function that writes its parameter Param (an index
// in the SSA parameter list, receiver first), or the field Field of it,
// into a state/status column: setState(ctx, id, st) doing UPDATE .. SET
// state = $2, or UpdatePayout(ctx, p) doing UPDATE payouts SET status = $2
// with p.Status. Column is "table.column" when the SQL names it.
type StatusWriter struct {
	Param  int
	Field  string
	Column string
}

func (*StatusWriter) AFact() {}
func (f *StatusWriter) String() string {
	s := fmt.Sprintf("writes param %d", f.Param)
	if f.Field != "" {
		s += " (field " + f.Field + ")"
	}
	if f.Column != "" {
		return s + " into " + f.Column
	}
	return s + " as a status"
}

// FieldSet marks a setter: a function that sets the state/status field
// Field of its pointer parameter Param (receiver first) once, on every
// path that returns, to the constant Value or, when Arg >= 0, to its
// parameter Arg, and gives that parameter to no call:
// func (p *Payout) Fail(reason string) { p.Status = StatusFailed; ... }.
// A caller that sets a struct's status through it, then writes the struct
// through a status writer, writes that status.
type FieldSet struct {
	Param int
	Field string
	Arg   int
	Value string
}

func (*FieldSet) AFact() {}
func (f *FieldSet) String() string {
	s := fmt.Sprintf("sets field %s of param %d to ", f.Field, f.Param)
	if f.Arg >= 0 {
		return s + fmt.Sprintf("param %d", f.Arg)
	}
	return s + fmt.Sprintf("%q", f.Value)
}

// TokenDelete marks a function that deletes an idempotency token or record.
type TokenDelete struct{ Chain []string }

func (*TokenDelete) AFact() {}
func (f *TokenDelete) String() string {
	return "tokendelete(" + strings.Join(f.Chain, " -> ") + ")"
}

// TokenClaim marks a function that claims an idempotency token atomically
// (SET NX, SetArgs, a Lua script, INSERT/UPDATE on a token table, SELECT ..
// FOR UPDATE).
type TokenClaim struct{}

func (*TokenClaim) AFact()         {}
func (*TokenClaim) String() string { return "tokenclaim" }

// CallsParams marks a function that calls its func parameters Params
// (index in the SSA parameter list), such as a retry helper: a closure
// given to it runs when it is called.
type CallsParams struct{ Params []int }

func (*CallsParams) AFact()           {}
func (f *CallsParams) String() string { return fmt.Sprintf("callsparams(%v)", f.Params) }

// ClosesTx marks a function that commits or rolls back a transaction it
// receives (as a parameter or a parameter's field): Params before every
// normal return, OnErr exactly on the returns whose error result is not
// nil, OnArg exactly where an error it is given is set (or nil). One that
// ends it only where it panics or exits is not marked.
type ClosesTx struct {
	Params, OnErr []int
	OnArg         []ArgEnd
}

func (*ClosesTx) AFact() {}
func (f *ClosesTx) String() string {
	s := fmt.Sprintf("closestx(%v", f.Params)
	if len(f.OnErr) > 0 {
		s += fmt.Sprintf(", on error %v", f.OnErr)
	}
	for _, a := range f.OnArg {
		cond := "set"
		if a.Nil {
			cond = "nil"
		}
		s += fmt.Sprintf(", %d when %d is %s", a.Tx, a.Err, cond)
	}
	return s + ")"
}

// BeginsTx marks a function that returns a freshly begun transaction (a
// begin helper such as repo.GetTx(ctx)): its caller holds it open until
// its Commit or Rollback.
type BeginsTx struct{}

func (*BeginsTx) AFact()         {}
func (*BeginsTx) String() string { return "beginstx" }

// NoReturn marks a function that never returns: every path panics, exits
// or loops forever (fail(err) { panic(err) }). A helper that rolls back
// only before calling one leaves the transaction open when it returns.
type NoReturn struct{}

func (*NoReturn) AFact()         {}
func (*NoReturn) String() string { return "noreturn" }

// Config is the shared configuration of the facts analyzer. Lists accept
// comma-separated values when set through flags.
type Config struct {
	// NetFuncs are extra functions that do network I/O, spelled like
	// "example.com/pay.Charge", "(*example.com/pay.Client).Do" or
	// "example.com/pay.Gateway.Charge".
	NetFuncs []string
	// TxRunners are extra functions that run their last func argument inside
	// a transaction, spelled like NetFuncs.
	TxRunners []string
	// TokenTables are SQL table names that hold idempotency tokens or
	// records. Tables whose name contains "idempot", "token" or "dedup" are
	// always recognized.
	TokenTables []string
	// TxTypes are extra transaction types, spelled "example.com/store.Tx"
	// (a pointer to it is a transaction too).
	TxTypes []string
	// FailFuncs are extra functions that take a definite-failure action
	// (mark an operation failed, compensate), spelled like NetFuncs.
	FailFuncs []string
	// TokenDels are extra functions that delete an idempotency token or
	// record, spelled like NetFuncs.
	TokenDels []string

	// Program, set by the standalone command, resolves interface calls
	// to their implementations in the whole loaded program. While
	// Recording, the analyzer records the summaries of concrete methods
	// into it instead (the command's first pass).
	Program   *Program
	Recording bool
	// Consumers is how many rules read each root's result; when each
	// has called [Result.Done], the result's SSA form is dropped. Zero
	// keeps it (drivers that may run other analyzers on it).
	Consumers int
	// NoRelated drops the related positions of diagnostics (their
	// messages name every position): golangci-lint turns each related
	// position into an issue of its own.
	NoRelated bool
}

// Facts is one facts analyzer together with the configuration it reads.
// Rules that share a Facts see the same facts; a Facts must be shared by all
// rules run together, since a fact type may be declared by one analyzer only.
type Facts struct {
	Analyzer *analysis.Analyzer
	Config   *Config
}

// New returns a facts analyzer reading cfg (copied).
func New(cfg Config) *Facts {
	c := &Config{
		NetFuncs:    append([]string(nil), cfg.NetFuncs...),
		TxRunners:   append([]string(nil), cfg.TxRunners...),
		TokenTables: append([]string(nil), cfg.TokenTables...),
		TxTypes:     append([]string(nil), cfg.TxTypes...),
		FailFuncs:   append([]string(nil), cfg.FailFuncs...),
		TokenDels:   append([]string(nil), cfg.TokenDels...),
		Program:     cfg.Program,
		Recording:   cfg.Recording,
		Consumers:   cfg.Consumers,
		NoRelated:   cfg.NoRelated,
	}
	f := &Facts{Config: c}
	a := &analysis.Analyzer{
		Name: "idemfacts",
		Doc:  "computes idemlint's shared facts (network I/O chains, transaction runners, timeout checks, failure actions, token deletes)",
		FactTypes: []analysis.Fact{
			new(NetIO), new(TxRunner), new(TimeoutCheck), new(FailAction),
			new(StatusWriter), new(FieldSet), new(TokenDelete), new(TokenClaim), new(CallsParams), new(ClosesTx), new(BeginsTx), new(NoReturn),
		},
		ResultType: reflect.TypeOf((*Result)(nil)),
		Run: func(pass *analysis.Pass) (any, error) {
			return run(pass, c)
		},
	}
	a.Flags.Var(ListFlag(&c.NetFuncs), "netfuncs", "extra network functions, comma-separated (e.g. (*example.com/pay.Client).Do)")
	a.Flags.Var(ListFlag(&c.TxRunners), "txrunners", "extra transaction runners, comma-separated")
	a.Flags.Var(ListFlag(&c.TokenTables), "tables", "idempotency token/record tables, comma-separated")
	a.Flags.Var(ListFlag(&c.TxTypes), "txtypes", "extra transaction types, comma-separated (e.g. example.com/store.Tx)")
	a.Flags.Var(ListFlag(&c.FailFuncs), "failfuncs", "extra definite-failure functions, comma-separated")
	a.Flags.Var(ListFlag(&c.TokenDels), "tokendels", "extra idempotency token delete functions, comma-separated")
	f.Analyzer = a
	return f
}

// Shared is the facts analyzer used by the default rule analyzers.
var Shared = New(Config{})

// ListFlag returns a flag.Value that appends comma-separated values to *dst.
func ListFlag(dst *[]string) flag.Value { return &listFlag{dst} }

type listFlag struct{ dst *[]string }

func (l *listFlag) String() string {
	if l == nil || l.dst == nil {
		return ""
	}
	return strings.Join(*l.dst, ",")
}

func (l *listFlag) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l.dst = append(*l.dst, v)
		}
	}
	return nil
}
