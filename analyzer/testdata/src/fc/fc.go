package fc

import "net/http"

func Post(req *http.Request) error { // want Post:`netio\(\(\*http\.Client\)\.Do\)`
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

func Pure(x int) int { return x * 2 }
