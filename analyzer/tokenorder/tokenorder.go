// Package tokenorder defines an analyzer that reports an idempotency token
// deleted before the effect it guards, and an effect run after a
// non-atomic check of the token (check-then-act).
package tokenorder

import (
	"fmt"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/ssa"

	"github.com/idemkit/idem/analyzer/facts"
	"github.com/idemkit/idem/analyzer/internal/directive"
)

// Name is the analyzer's name (part of idemlint's interface).
const Name = "tokenorder"

// Doc documents the analyzer.
const Doc = `report idempotency tokens deleted before the effect, and check-then-act

An idempotency token or record (a go-redis key whose name mentions a token,
idem, dedup or nonce; a SQL table named like idempotency_keys or listed with
-tables) deleted with Del/Unlink/GetDel or DELETE before the effect it guards
(a call that may do network I/O) on the same path loses the outcome: when the
effect times out, the client's retry finds no token and is refused, or runs
the effect again. An effect that runs after a plain read of the token
(Get/Exists/SELECT) and before the token is consumed, with no atomic claim
(SET NX, SetArgs, a Lua script, INSERT .. ON CONFLICT, UPDATE .. WHERE,
SELECT .. FOR UPDATE), lets concurrent duplicates both pass the check and
both run the effect. Claim the token atomically with a PROCESSING state, run
the effect, record the outcome, and let the record expire by TTL.

Suppress with //idemlint:ignore tokenorder <reason>.`

// Config configures a tokenorder analyzer.
type Config struct {
	// Facts is the shared facts analyzer; nil means a private one.
	Facts *facts.Facts
	// TokenTables are added to the facts configuration.
	TokenTables []string
}

// Analyzer is the default tokenorder analyzer, using facts.Shared.
var Analyzer = New(Config{Facts: facts.Shared})

// New returns a tokenorder analyzer for cfg.
func New(cfg Config) *analysis.Analyzer {
	f := cfg.Facts
	if f == nil {
		f = facts.New(facts.Config{})
	}
	f.Config.TokenTables = append(f.Config.TokenTables, cfg.TokenTables...)
	a := &analysis.Analyzer{
		Name:     Name,
		Doc:      Doc,
		URL:      "https://github.com/idemkit/idem/blob/main/docs/idemlint.md#tokenorder",
		Requires: []*analysis.Analyzer{f.Analyzer},
		Run: func(pass *analysis.Pass) (any, error) {
			res := pass.ResultOf[f.Analyzer].(*facts.Result)
			defer res.Done()
			run(pass, res)
			return nil, nil
		},
	}
	a.Flags.Var(facts.ListFlag(&f.Config.TokenTables), "tables", "SQL tables holding idempotency tokens or records, comma-separated")
	a.Flags.Var(facts.ListFlag(&f.Config.TokenDels), "tokendels", "extra functions that delete an idempotency token, comma-separated, e.g. (example.com/store.Keys).Forget")
	return a
}

type event struct {
	instr ssa.Instruction
	name  string
	path  *facts.Path // effects: the network chain
}

func run(pass *analysis.Pass, res *facts.Result) {
	rep := directive.New(pass, Name)
	rep.NoRelated = res.Config().NoRelated
	for _, fn := range res.SSA.SrcFuncs {
		var deletes, checks, effects, consumes, claims []event
		for _, b := range fn.Blocks {
			for _, instr := range b.Instrs {
				call, ok := instr.(*ssa.Call) // deferred and go calls do not order the path
				if !ok {
					continue
				}
				c := &call.Call
				name := calleeName(c)
				redisOp, sqlOp := facts.RedisTokenOp(c), res.SQLTokenOp(c)
				if redisOp == "" && sqlOp == "" {
					redisOp = res.GenericTokenOp(c) // same vocabulary: check, write, claim, delete
				}
				switch {
				case res.TokenDeleteCall(c) != nil:
					p := res.TokenDeleteCall(c)
					deletes = append(deletes, event{instr, p.String(), nil})
					consumes = append(consumes, event{instr, p.String(), nil})
				case redisOp == "check" || sqlOp == "select":
					checks = append(checks, event{instr, name, nil})
				case redisOp == "write":
					consumes = append(consumes, event{instr, name, nil})
				case res.ClaimCall(c) || res.CASClaim(call):
					// Before the effect it claims; after the effect it consumes.
					claims = append(claims, event{instr, name, nil})
					consumes = append(consumes, event{instr, name, nil})
				case redisOp == "" && sqlOp == "":
					if p := res.NetCall(c); p != nil && !isRedis(p) {
						effects = append(effects, event{instr, p.String(), p})
					}
				}
			}
		}
		if len(effects) == 0 {
			continue
		}
		// Deleted before the effect.
		for _, d := range deletes {
			for _, e := range effects {
				if reaches(d.instr, e.instr) {
					msg := fmt.Sprintf("the idempotency token is deleted at %s (%s) before the effect it guards (%s at %s, %s): "+
						"if the effect times out, the client's retry finds no token and is refused or runs the effect again, so its outcome is lost or it happens twice; "+
						"claim the token atomically with a PROCESSING state (SET NX / INSERT .. ON CONFLICT DO NOTHING), run the effect, then record the outcome and let the record expire by TTL",
						res.PosString(rep.Start(d.instr.Pos())), d.name, e.name, res.PosString(rep.Start(e.instr.Pos())), facts.Effect(e.path))
					rep.Report(analysis.Diagnostic{Pos: d.instr.Pos(), Message: msg, Related: []analysis.RelatedInformation{
						{Pos: e.instr.Pos(), Message: "the effect: " + e.name},
					}})
					break
				}
			}
		}
		// Check-then-act.
	effect:
		for _, e := range effects {
			for _, a := range append(claims, deletes...) {
				if reaches(a.instr, e.instr) {
					continue effect // claimed (or consumed) atomically before the effect
				}
			}
			for _, ch := range checks {
				if !reaches(ch.instr, e.instr) {
					continue
				}
				for _, w := range consumes {
					if !reaches(e.instr, w.instr) {
						continue
					}
					msg := fmt.Sprintf("the effect at %s (%s, %s) runs after a non-atomic check of the idempotency token (%s at %s) and before the token is consumed (%s at %s): "+
						"concurrent duplicates both pass the check and both run the effect, so it happens twice; "+
						"claim the token atomically first (SET NX, or INSERT .. ON CONFLICT DO NOTHING and check the rows affected), then run the effect and record the outcome",
						res.PosString(rep.Start(e.instr.Pos())), e.name, facts.Effect(e.path), ch.name, res.PosString(rep.Start(ch.instr.Pos())), w.name, res.PosString(rep.Start(w.instr.Pos())))
					rep.Report(analysis.Diagnostic{Pos: e.instr.Pos(), Message: msg, Related: []analysis.RelatedInformation{
						{Pos: ch.instr.Pos(), Message: "the non-atomic check: " + ch.name},
						{Pos: w.instr.Pos(), Message: "the token is consumed here: " + w.name},
					}})
					continue effect
				}
			}
		}
	}
}

func calleeName(c *ssa.CallCommon) string {
	if fn := facts.CalleeObj(c); fn != nil {
		return facts.FuncName(fn)
	}
	return "call"
}

// isRedis: the effect's leaf is a go-redis command (a cache or the token
// store itself, not the guarded effect).
func isRedis(p *facts.Path) bool {
	leaf := p.Chain[len(p.Chain)-1]
	return strings.HasPrefix(leaf, "(redis.") || strings.HasPrefix(leaf, "(*redis.")
}

// reaches reports whether to can run after from in the same call, on a path
// that does not go around a loop back to a block that dominates from.
func reaches(from, to ssa.Instruction) bool {
	fb, tb := from.Block(), to.Block()
	if fb == tb {
		for _, in := range fb.Instrs {
			if in == from {
				break
			}
			if in == to {
				goto search // to is before from in the block: only via a loop
			}
		}
		return true
	}
search:
	seen := map[*ssa.BasicBlock]bool{}
	work := append([]*ssa.BasicBlock(nil), fb.Succs...)
	for len(work) > 0 {
		b := work[len(work)-1]
		work = work[:len(work)-1]
		if seen[b] || b.Dominates(fb) {
			continue
		}
		seen[b] = true
		if b == tb {
			return true
		}
		work = append(work, b.Succs...)
	}
	return false
}
