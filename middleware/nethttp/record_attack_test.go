package nethttp_test

import (
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/record"
)

// Over real loopback: requests with paths and headers made to break JSON
// lines keep coming while the recorder is stopped under them; nothing
// panics or races, the recording on disk reads back whole, and every
// record is accounted for.
func TestRecorderStoppedUnderLoad(t *testing.T) {
	dir := t.TempDir()
	rec, err := record.New(record.Config{Dir: dir, MaxFileBytes: 4096, MaxFiles: 1000, MaxRecordsPerSecond: -1, FlushEvery: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	mw, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{Limiter: recLimiter(t, 4), Routes: map[string]string{"/api/": "interactive"}}, Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("s") != "" {
			w.WriteHeader(599)
		}
		time.Sleep(time.Millisecond)
	})))
	defer srv.Close()
	paths := []string{"/api/" + url.PathEscape(`"},{"k":"header","v":9}`), "/api/%0A%0D{}", "/api/x?s=1", "/" + url.PathEscape("\x00\xff"), "/api/ok"}
	stop := time.Now().Add(400 * time.Millisecond)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stop); i++ {
				req, _ := http.NewRequest("GET", srv.URL+paths[(g+i)%len(paths)], nil)
				req.Header.Set("X-Evil", `"},{"k":"req","t":-1}\u2028`)
				resp, err := srv.Client().Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	recs, err := record.ReadAll(dir)
	if err != nil {
		t.Fatalf("reading the recording back: %v (stats %+v)", err, rec.Stats())
	}
	st := rec.Stats()
	if st.Err != nil {
		t.Errorf("Stats.Err %v", st.Err)
	}
	if uint64(len(recs)) != st.Written {
		t.Errorf("read %d records, Stats.Written %d", len(recs), st.Written)
	}
	if st.Lost == 0 {
		t.Error("requests after Stop were not counted as lost")
	}
	if rec.Pending() != 0 {
		t.Errorf("%d records pending after Stop", rec.Pending())
	}
}
