package main_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
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
	bin := buildIdemlint(t)
	for _, tc := range []struct {
		name       string
		dir        string
		env        []string
		code       int
		successful bool
	}{
		{"finding", writeModule(t, bad), nil, 0, true},
		{"clean", writeModule(t, good), nil, 0, true},
		{"partial", partialModule(t), []string{"GOFLAGS=-mod=mod", "GOPROXY=off"}, 1, false},
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
