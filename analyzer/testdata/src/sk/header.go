package sk

import (
	"net/http"
	"strconv"
	"time"

	"github.com/avast/retry-go"
	"github.com/google/uuid"

	"skhelper"
)

// 10. A fresh Idempotency-Key per attempt of a for loop.
func post(c *http.Client, req *http.Request) (*http.Response, error) {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		req.Header.Set("Idempotency-Key", uuid.NewString()) // want `the Idempotency-Key header is set from uuid.NewString\(\) at header\.go:18:37 inside a retry loop`
		var resp *http.Response
		if resp, err = c.Do(req); err == nil {
			return resp, nil
		}
	}
	return nil, err
}

func postOnce(c *http.Client, req *http.Request) (*http.Response, error) {
	key := uuid.NewString()
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		req.Header.Set("Idempotency-Key", key)
		var resp *http.Response
		if resp, err = c.Do(req); err == nil {
			return resp, nil
		}
	}
	return nil, err
}

// 11. Range over an int, the header map written directly.
func postRange(c *http.Client, req *http.Request) error {
	for range 3 {
		req.Header["Idempotency-Key"] = []string{uuid.New().String()} // want `the Idempotency-Key header is set from uuid.New\(\) at header\.go:43:44 inside a retry loop`
		if _, err := c.Do(req); err == nil {
			return nil
		}
	}
	return nil
}

// A batch: one request per order, each its own key.
func postBatch(c *http.Client, reqs []*http.Request) {
	for _, req := range reqs {
		req.Header.Set("Idempotency-Key", uuid.NewString())
		c.Do(req)
	}
}

// 12. A retry helper's closure.
func postRetry(c *http.Client, req *http.Request) error {
	return retry.Do(func() error {
		req.Header.Add("X-Idempotency-Key", strconv.FormatInt(time.Now().UnixNano(), 10)) // want `the Idempotency-Key header is set from time.Now\(\) at header\.go:62:57 inside a retry loop`
		_, err := c.Do(req)
		return err
	})
}

func postRetryOnce(c *http.Client, req *http.Request) error {
	key := strconv.FormatInt(time.Now().UnixNano(), 10)
	return retry.Do(func() error {
		req.Header.Add("X-Idempotency-Key", key)
		_, err := c.Do(req)
		return err
	})
}

// 13. for {} until success.
func postForever(c *http.Client, req *http.Request) *http.Response {
	for {
		id, _ := uuid.NewRandom()
		req.Header.Set("Idempotency-Key", id.String()) // want `the Idempotency-Key header is set from uuid.NewRandom\(\) at header\.go:80:12 inside a retry loop`
		if resp, err := c.Do(req); err == nil {
			return resp
		}
	}
}

// One request, no retry: the client mints its key once. Correct.
func postSingle(c *http.Client, req *http.Request) (*http.Response, error) {
	req.Header.Set("Idempotency-Key", uuid.NewString())
	return c.Do(req)
}

// newAttemptKey is this package's own key helper.
func newAttemptKey() string { // want newAttemptKey:`fresh\(time.Now\(\)\)`
	return strconv.FormatInt(time.Now().UnixNano(), 10)
}

// 14. A key helper of this package, called inside the retry loop.
func postHelper(c *http.Client, req *http.Request) error {
	for attempt := 0; attempt < 3; attempt++ {
		req.Header.Set("Idempotency-Key", newAttemptKey()) // want `the Idempotency-Key header is set from sk.newAttemptKey\(\) \(time.Now\(\)\) at header\.go:102:37 inside a retry loop`
		if _, err := c.Do(req); err == nil {
			return nil
		}
	}
	return nil
}

func postHelperOnce(c *http.Client, req *http.Request) error {
	key := newAttemptKey()
	for attempt := 0; attempt < 3; attempt++ {
		req.Header.Set("Idempotency-Key", key)
		if _, err := c.Do(req); err == nil {
			return nil
		}
	}
	return nil
}

// 15. A key helper of another package, known through its fact.
func postImported(c *http.Client, req *http.Request) error {
	for range 3 {
		req.Header.Set("Idempotency-Key", skhelper.NewKey()) // want `the Idempotency-Key header is set from skhelper.NewKey\(\) \(uuid.NewString\(\)\) at header\.go:124:37 inside a retry loop`
		if _, err := c.Do(req); err == nil {
			return nil
		}
	}
	return nil
}

// A derived key, or one fresh on one path only, is not minted.
func postDerived(c *http.Client, req *http.Request, orderID string) error {
	for range 3 {
		req.Header.Set("Idempotency-Key", skhelper.OrderKey(orderID))
		req.Header.Set("X-Idempotency-Key", skhelper.StampedKey(orderID, false))
		if _, err := c.Do(req); err == nil {
			return nil
		}
	}
	return nil
}

// A loop over a collection by index: one key per item.
func postEach(c *http.Client, reqs []*http.Request) {
	n := len(reqs)
	for i := 0; i < n; i++ {
		reqs[i].Header.Set("Idempotency-Key", uuid.NewString())
		c.Do(reqs[i])
	}
}
