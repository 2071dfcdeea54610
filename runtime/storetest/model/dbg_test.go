package model

import "testing"

func TestDbg(t *testing.T) {
	c := Config{Workers: 2, Query: false, Reconciler: true, Sweeper: true, Operator: true, MaxAttempts: 2, Crashes: 1, LostReplies: 1, Lives: 2}
	res, err := Check(c, 3_000_000)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res.Stats)
	if res.Violation != nil {
		t.Error(res.Violation.Format(c))
	}
}
