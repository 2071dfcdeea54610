package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/idemkit/idem/runtime"
)

const listUsage = `usage: idemctl list [store flags] [filters] [-json]

Lists the records that may need a person, in (scope, operation, key) byte
order: by default UNKNOWN and PROCESSING records. Filters combine (AND):

  idemctl list -stuck                      no one is on them: dead workers, UNKNOWN not being reconciled
  idemctl list -gave-up 20 -op Payments.Charge
                                           what a reconciler with MaxAttempts 20 gave up on
  idemctl list -state unknown -older-than 1h -scope tenant-1

All pages are read, up to -limit; a listing cut by -limit ends with the
cursor to continue from (-after), on stderr.
`

// pageSize is how many records one List call asks for.
const pageSize = 100

type listConfig struct {
	store  storeSpec
	params runtime.ListParams // Limit unused: see limit
	limit  int                // 0: no limit
	json   bool
}

func parseList(args []string, env func(string) string, stdout, stderr io.Writer) (listConfig, error) {
	fs := newFlagSet("list", listUsage, stderr)
	var sf storeFlags
	sf.register(fs)
	states := fs.String("state", "unknown,processing", "comma list of states to list: unknown, processing, success, failed")
	op := fs.String("op", "", "only records of this `operation`")
	scope := fs.String("scope", "", "only records of this `scope` (-scope '' is the unscoped namespace)")
	olderThan := fs.Duration("older-than", 0, "only records last written at least this long ago (store clock), e.g. 10m")
	gaveUp := fs.Int("gave-up", 0, "only records with at least `N` reconcile attempts: a reconciler's MaxAttempts lists what it gave up on")
	stuck := fs.Bool("stuck", false, "only records no one holds: PROCESSING whose lease expired (worker died), UNKNOWN not being reconciled")
	limit := fs.Int("limit", 1000, "most records listed, over all pages (0: all)")
	after := fs.String("after", "", "list only identities after this `scope/op/key` cursor (parts path-escaped)")
	asJSON := fs.Bool("json", false, "one JSON object per record and line")
	if err := parseFlags(fs, args, stdout); err != nil {
		return listConfig{}, err
	}
	cfg := listConfig{limit: *limit, json: *asJSON}
	var err error
	if cfg.params.States, err = parseStates(*states); err != nil {
		return listConfig{}, usageError{err}
	}
	cfg.params.Operation = *op
	if isSet(fs, "scope") {
		cfg.params.Scope = scope
	}
	switch {
	case *olderThan < 0:
		return listConfig{}, usagef("-older-than must not be negative, got %v", *olderThan)
	case *gaveUp < 0 || *gaveUp > 1<<30:
		return listConfig{}, usagef("-gave-up must be 0 to %d, got %d", 1<<30, *gaveUp)
	case *limit < 0:
		return listConfig{}, usagef("-limit must not be negative, got %d", *limit)
	}
	cfg.params.OlderThan, cfg.params.MinAttempts, cfg.params.LeaseFree = *olderThan, int32(*gaveUp), *stuck
	if *after != "" {
		id, err := parseCursor(*after)
		if err != nil {
			return listConfig{}, usagef("-after: %v", err)
		}
		cfg.params.After = &id
	}
	if cfg.store, err = sf.spec(fs, env); err != nil {
		return listConfig{}, err
	}
	return cfg, nil
}

func parseStates(s string) ([]runtime.State, error) {
	var out []runtime.State
	for name := range strings.SplitSeq(s, ",") {
		st := runtime.State(strings.ToUpper(strings.TrimSpace(name)))
		if !st.Valid() {
			return nil, fmt.Errorf("-state: unknown state %q (want unknown, processing, success or failed)", strings.TrimSpace(name))
		}
		dup := false
		for _, o := range out {
			dup = dup || o == st
		}
		if !dup {
			out = append(out, st)
		}
	}
	return out, nil
}

func runList(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseList(args, env, stdout, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.store.timeout)
	defer cancel()
	store, closeStore, err := cfg.store.open(ctx)
	if err != nil {
		return err
	}
	defer closeStore()
	recs, more, err := listAll(ctx, store, cfg.params, cfg.limit)
	if err != nil {
		return err
	}
	if cfg.json {
		enc := json.NewEncoder(stdout)
		for i := range recs {
			if err := enc.Encode(toJSON(&recs[i])); err != nil {
				return err
			}
		}
	} else if len(recs) > 0 {
		if err := writeTable(stdout, recs); err != nil {
			return err
		}
	}
	switch {
	case more:
		fmt.Fprintf(stderr, "idemctl list: %d records shown, the limit; more follow: continue with -after '%s'\n",
			len(recs), formatCursor(recs[len(recs)-1].ID))
	case len(recs) == 0 && !cfg.json:
		fmt.Fprintln(stderr, "idemctl list: no records match")
	}
	return nil
}

// listAll reads pages until the store has no more or limit records were
// read; more reports that the limit cut the listing.
func listAll(ctx context.Context, store runtime.Lister, p runtime.ListParams, limit int) (recs []runtime.Record, more bool, err error) {
	for {
		want := pageSize
		if limit > 0 {
			want = min(pageSize, limit-len(recs)+1) // one more tells whether more follow
		}
		p.Limit = want
		page, err := store.List(ctx, p)
		if err != nil {
			return recs, false, fmt.Errorf("listing records: %w", err)
		}
		recs = append(recs, page...)
		if limit > 0 && len(recs) > limit {
			return recs[:limit], true, nil
		}
		if len(page) < want {
			return recs, false, nil
		}
		last := page[len(page)-1].ID
		p.After = &last
	}
}
