package main

import (
	"encoding/json"
	"io"
	"net/url"
	"path/filepath"
	"strings"

	"golang.org/x/tools/go/analysis"
)

// SARIF 2.1.0 (OASIS), the subset idemlint writes: one run, the rules that
// ran, a result per finding with its span and related locations, and the
// load errors as tool execution notifications.
type (
	sarifLog struct {
		Version string     `json:"version"`
		Schema  string     `json:"$schema"`
		Runs    []sarifRun `json:"runs"`
	}
	sarifRun struct {
		Tool               sarifTool                   `json:"tool"`
		Invocations        []sarifInvocation           `json:"invocations"`
		OriginalURIBaseIDs map[string]sarifArtifactLoc `json:"originalUriBaseIds,omitempty"`
		Results            []sarifResult               `json:"results"`
	}
	sarifTool struct {
		Driver sarifDriver `json:"driver"`
	}
	sarifDriver struct {
		Name           string      `json:"name"`
		InformationURI string      `json:"informationUri"`
		Rules          []sarifRule `json:"rules"`
	}
	sarifRule struct {
		ID               string       `json:"id"`
		Name             string       `json:"name"`
		ShortDescription sarifMessage `json:"shortDescription"`
		FullDescription  sarifMessage `json:"fullDescription"`
		HelpURI          string       `json:"helpUri"`
	}
	sarifMessage struct {
		Text string `json:"text"`
	}
	sarifInvocation struct {
		ExecutionSuccessful        bool                `json:"executionSuccessful"`
		ToolExecutionNotifications []sarifNotification `json:"toolExecutionNotifications,omitempty"`
	}
	sarifNotification struct {
		Level   string       `json:"level"`
		Message sarifMessage `json:"message"`
	}
	sarifResult struct {
		RuleID           string          `json:"ruleId"`
		RuleIndex        int             `json:"ruleIndex"`
		Level            string          `json:"level"`
		Message          sarifMessage    `json:"message"`
		Locations        []sarifLocation `json:"locations"`
		RelatedLocations []sarifLocation `json:"relatedLocations,omitempty"`
		Suppressions     []sarifSuppress `json:"suppressions,omitempty"`
	}
	// sarifSuppress is a result's suppression: an in-source directive,
	// "accepted" with its reason as justification, or "underReview" with
	// none when the reason is still the code action's placeholder.
	sarifSuppress struct {
		Kind          string `json:"kind"`
		Status        string `json:"status"`
		Justification string `json:"justification,omitempty"`
	}
	sarifLocation struct {
		ID               *int          `json:"id,omitempty"`
		PhysicalLocation sarifPhysical `json:"physicalLocation"`
		Message          *sarifMessage `json:"message,omitempty"`
	}
	sarifPhysical struct {
		ArtifactLocation sarifArtifactLoc `json:"artifactLocation"`
		Region           *sarifRegion     `json:"region,omitempty"`
	}
	sarifArtifactLoc struct {
		URI       string `json:"uri"`
		URIBaseID string `json:"uriBaseId,omitempty"`
	}
	sarifRegion struct {
		StartLine   int `json:"startLine"`
		StartColumn int `json:"startColumn,omitempty"`
		EndLine     int `json:"endLine,omitempty"`
		EndColumn   int `json:"endColumn,omitempty"`
	}
)

const (
	sarifSchema = "https://json.schemastore.org/sarif-2.1.0.json"
	repoURL     = "https://github.com/idemkit/idem"
	srcRoot     = "SRCROOT"
)

// ruleHelp is the page that documents a rule.
func ruleHelp(name string) string {
	switch name {
	case "txrpc", "timeoutfail", "tokenorder":
		return repoURL + "/blob/main/docs/idemlint.md#" + name
	}
	return repoURL + "/blob/main/docs/rules/" + name + ".md"
}

// printSARIF writes the findings as a SARIF 2.1.0 log. Paths below the
// working directory are relative to SRCROOT (the working directory), so
// that GitHub code scanning, run from the repository root, places them.
// loadErrs, when any, mark the run as not fully successful.
//
// A diagnostic that a //idemlint:ignore directive suppresses is a result
// with an inSource suppression (GitHub code scanning shows it as
// dismissed): its status is "accepted" and its justification the
// directive's reason, or "underReview" without a justification when the
// reason is the code action's placeholder.
func printSARIF(w io.Writer, rules []*analysis.Analyzer, fs, suppressed []finding, loadErrs []string) error {
	run := sarifRun{
		Tool:        sarifTool{Driver: sarifDriver{Name: "idemlint", InformationURI: repoURL + "/blob/main/docs/idemlint.md", Rules: []sarifRule{}}},
		Invocations: []sarifInvocation{{ExecutionSuccessful: len(loadErrs) == 0}},
		OriginalURIBaseIDs: map[string]sarifArtifactLoc{
			srcRoot: {URI: (&url.URL{Scheme: "file", Path: filepath.ToSlash(cwd) + "/"}).String()},
		},
		Results: []sarifResult{},
	}
	index := map[string]int{}
	for _, a := range rules {
		short, _, _ := strings.Cut(a.Doc, "\n")
		index[a.Name] = len(run.Tool.Driver.Rules)
		run.Tool.Driver.Rules = append(run.Tool.Driver.Rules, sarifRule{
			ID: a.Name, Name: a.Name,
			ShortDescription: sarifMessage{short},
			FullDescription:  sarifMessage{strings.TrimSpace(a.Doc)},
			HelpURI:          ruleHelp(a.Name),
		})
	}
	for _, e := range loadErrs {
		run.Invocations[0].ToolExecutionNotifications = append(run.Invocations[0].ToolExecutionNotifications,
			sarifNotification{Level: "error", Message: sarifMessage{e}})
	}
	for _, f := range append(fs[:len(fs):len(fs)], suppressed...) {
		r := sarifResult{
			RuleID: f.rule, RuleIndex: index[f.rule], Level: "warning",
			Message:   sarifMessage{f.msg},
			Locations: []sarifLocation{{PhysicalLocation: physical(f.posn, f.end)}},
		}
		for i, rel := range f.related {
			id := i + 1
			r.RelatedLocations = append(r.RelatedLocations, sarifLocation{ID: &id, PhysicalLocation: physical(rel.posn, ""), Message: &sarifMessage{rel.msg}})
		}
		if f.suppressed {
			s := sarifSuppress{Kind: "inSource", Status: "accepted", Justification: f.reason}
			if f.reason == "" {
				s.Status = "underReview"
			}
			r.Suppressions = []sarifSuppress{s}
		}
		run.Results = append(run.Results, r)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(sarifLog{Version: "2.1.0", Schema: sarifSchema, Runs: []sarifRun{run}})
}

// physical turns "file:line:col" positions (as rel prints them) into a
// SARIF location. Columns are Go's: bytes, 1-based.
func physical(posn, end string) sarifPhysical {
	file, line, col := splitPosn(posn)
	loc := sarifArtifactLoc{URI: (&url.URL{Path: filepath.ToSlash(file)}).String(), URIBaseID: srcRoot}
	if filepath.IsAbs(file) {
		loc = sarifArtifactLoc{URI: (&url.URL{Scheme: "file", Path: filepath.ToSlash(file)}).String()}
	}
	p := sarifPhysical{ArtifactLocation: loc}
	if line > 0 {
		p.Region = &sarifRegion{StartLine: line, StartColumn: col}
		if efile, eline, ecol := splitPosn(end); efile == file && eline > 0 {
			p.Region.EndLine, p.Region.EndColumn = eline, ecol
		}
	}
	return p
}

// splitPosn splits "file:line:col" (or "file:line", or "file").
func splitPosn(posn string) (file string, line, col int) {
	file = posn
	nums := []int{}
	for range 2 {
		i := strings.LastIndexByte(file, ':')
		if i < 0 {
			break
		}
		n, ok := atoi(file[i+1:])
		if !ok {
			break
		}
		nums = append(nums, n)
		file = file[:i]
	}
	switch len(nums) {
	case 2:
		return file, nums[1], nums[0]
	case 1:
		return file, nums[0], 0
	}
	return file, 0, 0
}

func atoi(s string) (int, bool) {
	if s == "" {
		return 0, false
	}
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}
