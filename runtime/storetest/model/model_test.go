package model

import (
	"testing"
)

func TestQuick(t *testing.T) {
	for _, c := range []Config{
		{Workers: 2, Query: true, Reconciler: true, Sweeper: true, Operator: true, MaxAttempts: 2, Crashes: 1, LostReplies: 1, QueryErrors: 1, Lives: 2},
		{Workers: 2, Query: true, Network: true, Reconciler: true, Sweeper: true, Operator: true, MaxAttempts: 2, Crashes: 1, LostReplies: 1, QueryErrors: 1, Lives: 2},
		{Workers: 2, Query: false, Reconciler: true, Sweeper: true, Operator: true, MaxAttempts: 2, Crashes: 1, LostReplies: 1, Lives: 2},
		{Workers: 2, Query: false, NotHappenedFail: true, Reconciler: true, Sweeper: true, Operator: true, MaxAttempts: 2, Crashes: 1, LostReplies: 1, Lives: 2},
	} {
		res, err := Check(c, 3_000_000)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%+v", res.Stats)
		if res.Violation != nil {
			t.Error(res.Violation.Format(c))
		}
	}
}
