package serverkey

import (
	"fmt"
	"go/ast"
	"go/types"

	"golang.org/x/tools/go/analysis"

	"github.com/idemkit/idem/analyzer/internal/rulekit"
)

// The idem client transports: idemhttp.Transport and idemgrpc's
// interceptor send the key of the request's context (WithKey) on every
// attempt they make, and mint one (NewKey) per logical request without
// one. A retry loop around them is correct when the key is fixed before
// it; a loop that mints the key of WithKey, or a NewKey header, anew on
// each of its attempts is the per-attempt key this rule reports.
const (
	pkgIdemHTTP = "github.com/idemkit/idem/runtime/idemhttp"
	pkgIdemGRPC = "github.com/idemkit/idem/runtime/idemgrpc"
)

func clientPkg(p string) bool { return p == pkgIdemHTTP || p == pkgIdemGRPC }

// clientMint: the transports' own key minting, idemhttp.NewKey() and
// idemgrpc.NewKey(), is a fresh value like uuid.NewString().
func clientMint(call *ast.CallExpr, fn *types.Func) *mint {
	if clientPkg(rulekit.PkgPath(fn)) && fn.Name() == "NewKey" {
		return &mint{call, rulekit.ShortName(fn) + "()"}
	}
	return nil
}

// clientKey checks idemhttp.WithKey(ctx, key) and idemgrpc.WithKey: a key
// minted inside the retry loop that holds the call is reported, as a
// header would be; a key minted before the loop is reused on every attempt
// and is not. It reports whether call was such a call.
func (c *checker) clientKey(call *ast.CallExpr, fn *types.Func, stack rulekit.Stack) bool {
	if !clientPkg(rulekit.PkgPath(fn)) || (fn.Name() != "WithKey" && fn.Name() != "WithNewKey") {
		return false
	}
	var m *mint
	if fn.Name() == "WithNewKey" {
		m = &mint{call, "a new key"}
	} else if len(call.Args) == 2 {
		m = c.fresh(call.Args[1])
	}
	if m == nil {
		return true
	}
	loops := c.loops(stack)
	if len(loops) == 0 {
		return true // one key per logical request
	}
	if l := loops[0]; l.Pos() <= m.call.Pos() && m.call.End() <= l.End() {
		c.report(m, call, fmt.Sprintf("the key of %s is %s, minted inside a retry loop: each attempt of the loop is a new logical request with a new key, so the server cannot tell them apart and a retry after a lost reply runs the effect twice; "+
			"set the key once before the loop (and persist it with the intent), or drop the loop: the transport already retries with one key", rulekit.ShortName(fn), m.what),
			analysis.RelatedInformation{Pos: l.Pos(), Message: "the retry loop"})
	}
	return true
}
