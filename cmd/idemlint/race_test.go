//go:build race

package main_test

func init() { raceEnabled = true }
