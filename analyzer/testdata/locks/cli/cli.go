// Package cli is a package of the module that calls no helper: a run that
// leaves it out does not cover the module, and judges helpers alone.
package cli

func Main() {}
