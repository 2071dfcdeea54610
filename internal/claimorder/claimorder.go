// Package claimorder guesses, from the claims a store made lately, whether
// its next claim finds a record (a replay, a duplicate in flight) or creates
// one (a first call), so that the store can send the cheaper first step for
// the likely case: a plain read of the record, or the claim itself.
//
// A wrong guess costs one more step, never a wrong answer: a read that finds
// nothing (or a record that may be taken over) is followed by the atomic
// claim, and a claim that finds a record returns it.
package claimorder

import "sync/atomic"

// Weights of the guess: a found record adds FoundWeight to the score, up to
// MaxScore; a created one takes one off. Claims read first while the score
// is positive, that is once more than about one claim in FoundWeight+1
// found a record. A burst of duplicates (a retry storm) turns reads on at
// its first replay; MaxScore first calls in a row turn them off.
const (
	FoundWeight = 2
	MaxScore    = 64
)

// Guess is the guess of one store. Its zero value claims first (a new
// store expects first calls). It is safe for concurrent use; concurrent
// updates may be lost, which only delays the guess.
type Guess struct {
	score atomic.Int32
	fixed atomic.Int32 // > 0 always reads first, < 0 always claims first
}

// ReadFirst reports whether the next claim should read the record first.
func (g *Guess) ReadFirst() bool {
	if f := g.fixed.Load(); f != 0 {
		return f > 0
	}
	return g.score.Load() > 0
}

// Found records a claim that found a record it did not take.
func (g *Guess) Found() {
	if v := g.score.Load(); v < MaxScore {
		g.score.CompareAndSwap(v, min(v+FoundWeight, MaxScore))
	}
}

// Created records a claim that created or took a record.
func (g *Guess) Created() {
	if v := g.score.Load(); v > 0 {
		g.score.CompareAndSwap(v, v-1)
	}
}

// Fix overrides the guess, for tests that run every order: order > 0
// always reads first, order < 0 always claims first, 0 guesses again.
func (g *Guess) Fix(order int) {
	g.fixed.Store(int32(max(-1, min(1, order))))
}

// Score is the current score, for tests and diagnostics.
func (g *Guess) Score() int32 { return g.score.Load() }
