// Package txrpc defines an analyzer that reports calls that may do network
// I/O while a database transaction is open.
package txrpc

import (
	"fmt"
	"go/token"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/ssa"

	"github.com/idemkit/idem/analyzer/facts"
	"github.com/idemkit/idem/analyzer/internal/directive"
)

// Name is the analyzer's name (part of idemlint's interface).
const Name = "txrpc"

// Doc documents the analyzer.
const Doc = `report network I/O while a database transaction is open

A remote call (HTTP, gRPC, SMTP, net.Dial, go-redis, or any function that
transitively does one, in any package) made while a database/sql or pgx
transaction is open cannot be rolled back with it: when the call times out or
the transaction rolls back, the remote effect (an email, an SMS, a charge,
a webhook) may have happened while the database says it has not, so a
retry repeats it or it is lost, and the
transaction holds its locks for the whole round trip. Transactions are
database/sql *sql.Tx and pgx.Tx (Begin/BeginTx on a DB, conn or pool, nested
Begin savepoints), types embedding *sql.Tx (sqlx, bun), ent's generated Tx,
gorm Begin and Transaction, pop Transaction and NewTransaction, bun RunInTx,
sqlx Beginx/MustBegin, Firestore RunTransaction, types listed with
-txtypes, and user helpers that run a callback inside a transaction
(inferred through any number of layers, or listed with -txrunners).
Persist PROCESSING in its own transaction, commit, then call, and record the
outcome in a second transaction.

A hand-off (a goroutine started, or a worker fed through a channel, whose
work leads to network I/O) inside the transaction is reported with its own
message: the webhook or message may go out before the commit or for a
change that rolls back (a dual write). Write it to an outbox table in the
same transaction, or hand it off after the commit.

Suppress with //idemlint:ignore txrpc <reason>.`

// Config configures a txrpc analyzer.
type Config struct {
	// Facts is the shared facts analyzer; nil means a private one.
	Facts *facts.Facts
	// NetFuncs and TxRunners are added to the facts configuration.
	NetFuncs  []string
	TxRunners []string
}

// Analyzer is the default txrpc analyzer, using facts.Shared.
var Analyzer = New(Config{Facts: facts.Shared})

// New returns a txrpc analyzer for cfg.
func New(cfg Config) *analysis.Analyzer {
	f := cfg.Facts
	if f == nil {
		f = facts.New(facts.Config{})
	}
	f.Config.NetFuncs = append(f.Config.NetFuncs, cfg.NetFuncs...)
	f.Config.TxRunners = append(f.Config.TxRunners, cfg.TxRunners...)
	a := &analysis.Analyzer{
		Name:     Name,
		Doc:      Doc,
		URL:      "https://github.com/idemkit/idem/blob/main/docs/idemlint.md#txrpc",
		Requires: []*analysis.Analyzer{f.Analyzer},
		Run: func(pass *analysis.Pass) (any, error) {
			res := pass.ResultOf[f.Analyzer].(*facts.Result)
			defer res.Done()
			run(pass, res)
			return nil, nil
		},
	}
	a.Flags.Var(facts.ListFlag(&f.Config.NetFuncs), "netfuncs", "extra network functions, comma-separated, e.g. (*example.com/pay.Client).Charge")
	a.Flags.Var(facts.ListFlag(&f.Config.TxRunners), "txrunners", "extra functions that run their func argument inside a transaction, comma-separated")
	a.Flags.Var(facts.ListFlag(&f.Config.TxTypes), "txtypes", "extra transaction types, comma-separated, e.g. example.com/store.Tx")
	return a
}

const advice = "persist PROCESSING in its own transaction, commit, then call, and record the outcome in a second transaction"

// handoffAdvice is the remedy for a hand-off (a goroutine or a worker that
// does the I/O): the transaction itself must carry the intent.
const handoffAdvice = "write the event to an outbox table in the same transaction and deliver it from there, or hand it off after the commit"

func run(pass *analysis.Pass, res *facts.Result) {
	rep := directive.New(pass, Name)
	rep.NoRelated = res.Config().NoRelated
	for _, fn := range res.SSA.SrcFuncs {
		fl := res.Flow(fn)
		for _, b := range fn.Blocks {
			for _, instr := range b.Instrs {
				ci, ok := instr.(ssa.CallInstruction)
				if !ok {
					continue
				}
				if _, isDefer := instr.(*ssa.Defer); isDefer {
					continue // runs at return, after the deferred Commit/Rollback has been queued
				}
				c := ci.Common()
				if open := fl.OpenAt(instr); open != 0 {
					if p := res.NetCall(c); p != nil {
						_, isGo := instr.(*ssa.Go)
						report(pass, res, rep, instr.Pos(), fl.First(open), p, isGo)
						continue
					}
				}
				// A named function handed to a transaction runner.
				if call, ok := instr.(*ssa.Call); ok {
					if k := res.RunnerArg(c); k >= 0 {
						for _, cb := range callbacks(c.Args[k]) {
							if res.RunnerCall(cb) == call {
								continue // its body is checked in place
							}
							if p := res.NetCall(&ssa.CallCommon{Value: cb}); p != nil {
								report(pass, res, rep, instr.Pos(), facts.Site{Pos: call.Pos(), Call: call, Runner: true}, p, false)
								break
							}
						}
					}
				}
			}
		}
	}
}

func callbacks(v ssa.Value) []*ssa.Function {
	switch v := v.(type) {
	case *ssa.Function:
		return []*ssa.Function{v}
	case *ssa.MakeClosure:
		if f, ok := v.Fn.(*ssa.Function); ok {
			return []*ssa.Function{f}
		}
	case *ssa.ChangeType:
		return callbacks(v.X)
	}
	return nil
}

func report(pass *analysis.Pass, res *facts.Result, rep *directive.Reporter, pos token.Pos, site facts.Site, p *facts.Path, isGo bool) {
	where := "begun at " + res.PosString(rep.Start(site.Pos))
	began := "transaction begun here"
	if site.Runner {
		where = "run by the call at " + res.PosString(rep.Start(site.Pos))
		began = "transaction runner called here"
	}
	effect := facts.Effect(p)
	what := fmt.Sprintf("%s (called at %s) may do network I/O", p.Chain[0], res.PosString(rep.Start(pos)))
	if isGo {
		what = fmt.Sprintf("a goroutine started at %s runs %s, which may do network I/O,", res.PosString(rep.Start(pos)), p.Chain[0])
	}
	leaf := p.Chain[len(p.Chain)-1]
	// A channel send is where the work is handed off, not a network call
	// (the worker that receives it is out of sight).
	sent := strings.HasPrefix(leaf, "a send on a channel")
	chain := ""
	if len(p.Chain) > 1 {
		chain = fmt.Sprintf(" (%s, leaf call %s at %s)", p.String(), leaf, p.Leaf)
		if sent {
			chain = fmt.Sprintf(" (%s, at %s)", p.String(), p.Leaf)
		}
	} else if p.Leaf != "" && p.LeafPos != pos {
		chain = fmt.Sprintf(" (at %s)", p.Leaf)
	}
	msg := fmt.Sprintf("%s%s while the database transaction %s is open: "+
		"if the call times out or the transaction rolls back, %s may have happened while the database says it has not "+
		"(a retry repeats it, or it is lost), and the transaction holds its locks for the whole round trip; %s",
		what, chain, where, effectPhrase(effect), advice)
	if handoff := p.Handoff; handoff != "" || isGo {
		if isGo {
			what = strings.TrimSuffix(what, ",")
		} else {
			what = fmt.Sprintf("%s (called at %s) hands work to another goroutine (%s) that may do network I/O", p.Chain[0], res.PosString(rep.Start(pos)), handoff)
		}
		msg = fmt.Sprintf("%s%s, a hand-off before the database transaction %s commits: "+
			"%s may go out before the commit, or for a change that then rolls back (a dual write), "+
			"and is lost if the process stops before it is sent; %s",
			what, chain, where, effectPhrase(effect), handoffAdvice)
	}
	d := analysis.Diagnostic{Pos: pos, Message: msg}
	if site.Pos.IsValid() {
		d.Related = append(d.Related, analysis.RelatedInformation{Pos: site.Pos, Message: began})
	}
	switch {
	case p.LeafPos.IsValid() && p.LeafPos != pos && sent:
		d.Related = append(d.Related, analysis.RelatedInformation{Pos: p.LeafPos, Message: "work handed off here: " + leaf})
	case p.LeafPos.IsValid() && p.LeafPos != pos:
		d.Related = append(d.Related, analysis.RelatedInformation{Pos: p.LeafPos, Message: "leaf network call: " + leaf})
	case p.Decl.IsValid() && len(p.Chain) > 1 && sent:
		d.Related = append(d.Related, analysis.RelatedInformation{Pos: p.Decl, Message: fmt.Sprintf("%s is declared here; it hands work off (%s) at %s", p.Chain[0], leaf, p.Leaf)})
	case p.Decl.IsValid() && len(p.Chain) > 1:
		d.Related = append(d.Related, analysis.RelatedInformation{Pos: p.Decl, Message: fmt.Sprintf("%s is declared here; its leaf network call %s is at %s", p.Chain[0], leaf, p.Leaf)})
	}
	rep.Report(d)
}

// effectPhrase: "an email" -> "the email" (the one this call sends).
func effectPhrase(e string) string {
	if i := strings.IndexByte(e, ' '); i > 0 {
		return "the " + e[i+1:]
	}
	return e
}
