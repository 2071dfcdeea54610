package main

import "golang.org/x/tools/go/analysis"

// nameFindings makes each analyzer's findings end in " (rule)", as the
// direct run prints them. go vet asks its vettool for JSON (-json) in every
// unit and prints the findings as "file:line:col: message" itself, without
// the analyzer's name, so the name goes into the message: under
// go vet -json the findings stay keyed by rule, their messages end in it.
// The direct run's -json and -sarif are not affected.
func nameFindings(as []*analysis.Analyzer) {
	for _, a := range as {
		run, suffix := a.Run, " ("+a.Name+")"
		a.Run = func(pass *analysis.Pass) (any, error) {
			report := pass.Report
			pass.Report = func(d analysis.Diagnostic) {
				d.Message += suffix
				report(d)
			}
			return run(pass)
		}
	}
}
