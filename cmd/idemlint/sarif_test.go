package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/testenv"
)

func loadSARIFSchema(t *testing.T) *schema {
	t.Helper()
	b, err := os.ReadFile("testdata/sarif-schema-2.1.0.json")
	if err != nil {
		t.Fatal(err)
	}
	var root map[string]any
	if err := json.Unmarshal(b, &root); err != nil {
		t.Fatal(err)
	}
	return &schema{root: root}
}

// TestSchemaValidator: the validator accepts a minimal SARIF log and
// rejects each kind of violation, so that TestSARIFSchema can fail.
func TestSchemaValidator(t *testing.T) {
	s := loadSARIFSchema(t)
	const minimal = `{"version":"2.1.0","runs":[{"tool":{"driver":{"name":"idemlint"}}}]}`
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"minimal", minimal, ""},
		{"version", `{"version":"2.0.0","runs":[]}`, "not in enum"},
		{"no runs", `{"version":"2.1.0"}`, `required property "runs" missing`},
		{"extra property", `{"version":"2.1.0","runs":[],"findings":[]}`, `property "findings" not allowed`},
		{"level", `{"version":"2.1.0","runs":[{"tool":{"driver":{"name":"x"}},"results":[{"message":{"text":"m"},"level":"fatal"}]}]}`, "not in enum"},
		{"line 0", `{"version":"2.1.0","runs":[{"tool":{"driver":{"name":"x"}},"results":[{"message":{"text":"m"},"locations":[{"physicalLocation":{"artifactLocation":{"uri":"a.go"},"region":{"startLine":0}}}]}]}]}`, "below minimum 1"},
		{"message", `{"version":"2.1.0","runs":[{"tool":{"driver":{"name":"x"}},"results":[{"message":{"txt":"m"}}]}]}`, "anyOf"},
		{"uri", `{"version":"2.1.0","runs":[{"tool":{"driver":{"name":"x","informationUri":"docs/x.md"}}}]}`, "not an absolute URI"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc, err := decodeJSON([]byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			errs := s.validate(doc)
			if tc.want == "" {
				if len(errs) > 0 {
					t.Errorf("valid document rejected: %v", errs)
				}
				return
			}
			if !strings.Contains(strings.Join(errs, "\n"), tc.want) {
				t.Errorf("errors %v, want one containing %q", errs, tc.want)
			}
		})
	}
}

// TestSARIFSchema: idemlint -sarif writes a valid SARIF 2.1.0 log, with
// the rule of each finding, its span relative to SRCROOT and its related
// locations; load errors make the run not successful.
func TestSARIFSchema(t *testing.T) {
	s := loadSARIFSchema(t)
	bin := idemlintBinary(t)
	for _, tc := range []struct {
		name       string
		dir        string
		env        []string
		code       int
		successful bool
	}{
		{"finding", writeModule(t, bad), nil, 0, true},
		{"clean", writeModule(t, good), nil, 0, true},
		{"partial", partialModule(t), []string{"GOFLAGS=" + testenv.ChildGoFlags("-mod=mod"), "GOPROXY=off"}, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := runEnv(t, tc.dir, tc.env, bin, "-sarif", "./...")
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.code, stderr)
			}
			doc, err := decodeJSON([]byte(stdout))
			if err != nil {
				t.Fatalf("-sarif output: %v\n%s", err, stdout)
			}
			if errs := s.validate(doc); len(errs) > 0 {
				t.Fatalf("-sarif output violates the SARIF 2.1.0 schema:\n%s\n%s", strings.Join(errs, "\n"), stdout)
			}
			var log struct {
				Runs []struct {
					Tool struct {
						Driver struct {
							Rules []struct{ ID, HelpURI string }
						}
					}
					Invocations []struct {
						ExecutionSuccessful        bool
						ToolExecutionNotifications []struct{ Message struct{ Text string } }
					}
					Results []struct {
						RuleID    string
						RuleIndex int
						Message   struct{ Text string }
						Locations []struct {
							PhysicalLocation struct {
								ArtifactLocation struct{ URI, URIBaseID string }
								Region           struct{ StartLine, StartColumn, EndLine, EndColumn int }
							}
						}
						RelatedLocations []json.RawMessage
					}
				}
			}
			if err := json.Unmarshal([]byte(stdout), &log); err != nil {
				t.Fatal(err)
			}
			run := log.Runs[0]
			if len(run.Tool.Driver.Rules) != 7 || run.Tool.Driver.Rules[0].ID != "txrpc" {
				t.Errorf("rules = %+v, want the seven rules, txrpc first", run.Tool.Driver.Rules)
			}
			if got := run.Invocations[0].ExecutionSuccessful; got != tc.successful {
				t.Errorf("executionSuccessful = %v, want %v", got, tc.successful)
			}
			if !tc.successful && len(run.Invocations[0].ToolExecutionNotifications) != 3 {
				t.Errorf("notifications = %+v, want the 3 load errors", run.Invocations[0].ToolExecutionNotifications)
			}
			if tc.name == "clean" {
				if len(run.Results) != 0 {
					t.Errorf("results = %+v, want none", run.Results)
				}
				return
			}
			var txrpc int
			for _, r := range run.Results {
				if r.RuleID != "txrpc" {
					continue
				}
				txrpc++
				loc := r.Locations[0].PhysicalLocation
				if r.RuleIndex != 0 || loc.ArtifactLocation.URI != "shop/shop.go" || loc.ArtifactLocation.URIBaseID != "SRCROOT" ||
					loc.Region.StartLine != 19 || loc.Region.StartColumn != 12 || loc.Region.EndLine != 19 || loc.Region.EndColumn != 27 ||
					len(r.RelatedLocations) != 2 {
					t.Errorf("txrpc result = %+v", r)
				}
			}
			if txrpc != 1 {
				t.Errorf("%d txrpc results, want 1:\n%s", txrpc, stdout)
			}
		})
	}
}

// TestSuppressionListed (txrpc only: the module's timeoutfail finding is
// not suppressed): a finding that //idemlint:ignore suppresses is
// not reported (exit 0, no text) and is listed by -json (under
// "idemlint:ignore", with the reason as justification) and -sarif (a
// result with an inSource suppression); a directive left with the code
// action's placeholder suppresses too, but neither output gives it a
// justification, and SARIF marks it underReview rather than accepted.
func TestSuppressionListed(t *testing.T) {
	s := loadSARIFSchema(t)
	bin := idemlintBinary(t)
	const at = "\tif err := notify(ctx, id); err != nil {"
	for _, tc := range []struct {
		name, reason, justification, status string
	}{
		{"reason", "the gateway dedupes on id", "the gateway dedupes on id", "accepted"},
		{"placeholder", "TODO: say why this is safe", "", "underReview"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.Replace(bad, at, "\t//idemlint:ignore txrpc "+tc.reason+"\n"+at, 1)
			dir := writeModule(t, src)
			if stdout, stderr, code := run(t, dir, bin, "-txrpc", "./..."); code != 0 || strings.Contains(stderr, "txrpc") {
				t.Fatalf("text: exit %d, want 0 and no finding\n%s%s", code, stdout, stderr)
			}

			stdout, stderr, code := run(t, dir, bin, "-txrpc", "-json", "./...")
			if code != 0 {
				t.Fatalf("-json: exit %d\n%s", code, stderr)
			}
			var tree map[string]map[string][]struct {
				Category, Posn, Justification string
			}
			if err := json.Unmarshal([]byte(stdout), &tree); err != nil {
				t.Fatalf("-json: %v\n%s", err, stdout)
			}
			pkg := tree["example.com/shop/shop"]
			if len(pkg["txrpc"]) != 0 {
				t.Errorf("-json lists the suppressed finding as a txrpc finding:\n%s", stdout)
			}
			sup := pkg["idemlint:ignore"]
			if len(sup) != 1 || sup[0].Category != "txrpc" || !strings.HasSuffix(sup[0].Posn, "shop.go:20:12") {
				t.Fatalf("-json suppressed = %+v, want the txrpc call at shop.go:20:12\n%s", sup, stdout)
			}
			if sup[0].Justification != tc.justification {
				t.Errorf("-json justification %q, want %q", sup[0].Justification, tc.justification)
			}
			if tc.justification == "" && strings.Contains(stdout, "justification") {
				t.Errorf("-json gives the placeholder a justification:\n%s", stdout)
			}

			stdout, stderr, code = run(t, dir, bin, "-txrpc", "-sarif", "./...")
			if code != 0 {
				t.Fatalf("-sarif: exit %d\n%s", code, stderr)
			}
			doc, err := decodeJSON([]byte(stdout))
			if err != nil {
				t.Fatal(err)
			}
			if errs := s.validate(doc); len(errs) > 0 {
				t.Fatalf("-sarif output violates the SARIF 2.1.0 schema:\n%s\n%s", strings.Join(errs, "\n"), stdout)
			}
			var log struct {
				Runs []struct {
					Results []struct {
						RuleID       string
						Suppressions []map[string]string
					}
				}
			}
			if err := json.Unmarshal([]byte(stdout), &log); err != nil {
				t.Fatal(err)
			}
			var got []map[string]string
			for _, r := range log.Runs[0].Results {
				if r.RuleID == "txrpc" {
					if len(r.Suppressions) != 1 {
						t.Fatalf("txrpc result without its suppression:\n%s", stdout)
					}
					got = append(got, r.Suppressions[0])
				}
			}
			want := map[string]string{"kind": "inSource", "status": tc.status}
			if tc.justification != "" {
				want["justification"] = tc.justification
			}
			if len(got) != 1 || fmt.Sprint(got[0]) != fmt.Sprint(want) {
				t.Errorf("-sarif txrpc suppressions %v, want [%v]", got, want)
			}
		})
	}
}
