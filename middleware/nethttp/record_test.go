package nethttp_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shedkit/shedkit/middleware/internal/rectest"
	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// fakeClock advances 1 ms at every reading.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Millisecond)
	return c.t
}

func recLimiter(t *testing.T, limit int) *shed.Limiter {
	t.Helper()
	l, err := shed.New(shed.Config{Limit: limit, Classes: []shed.ClassConfig{{Name: "interactive"}, {Name: "batch"}}})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestRecorder records admitted, failed, reconciled and rejected requests
// and reads them back.
func TestRecorder(t *testing.T) {
	var buf bytes.Buffer
	rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	lim := recLimiter(t, 1)
	clk := &fakeClock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	mw, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{Limiter: lim, Clock: clk.now, Routes: map[string]string{"/api/": "interactive"}}, Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	var inner http.Handler
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/ok":
			nethttp.Reconcile(r.Context(), 7)
		case "/api/fail":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/api/nested": // the limit is 1: the nested request is rejected
			inner.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/batch", nil))
		}
	}))
	inner = h
	for _, p := range []string{"/api/ok", "/api/fail", "/api/nested"} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", p, nil))
	}
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	var reqs []record.Record
	var last *record.Tick
	rd := record.NewReader(&buf)
	for {
		r, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if r.Tick != nil {
			last = r.Tick
		} else {
			reqs = append(reqs, r)
		}
	}
	if len(reqs) != 4 || last == nil {
		t.Fatalf("%d requests, last tick %+v\n%s", len(reqs), last, buf.String())
	}
	ok, fail, rej, nested := reqs[0], reqs[1], reqs[2], reqs[3]
	if ok.ClassName != "interactive" || ok.Decision != record.Admitted || ok.Cost != 1 || ok.Actual != 7 || ok.Outcome != shed.Success ||
		ok.Status != 200 || ok.Latency != time.Millisecond || !ok.Timed {
		t.Errorf("success recorded as %+v", ok)
	}
	if fail.Outcome != shed.Dropped || fail.Status != 503 {
		t.Errorf("a 503 recorded as %+v", fail)
	}
	if rej.ClassName != "batch" || rej.Decision != record.Rejected || rej.Reason != shed.ReasonLimit || rej.Status != 503 || rej.InFlight != 1 {
		t.Errorf("rejection recorded as %+v", rej)
	}
	if nested.Latency != 2*time.Millisecond { // its own clock readings and the rejected request's one
		t.Errorf("nested request recorded as %+v", nested)
	}
	if last.Arrivals[0] != 3 || last.Arrivals[1] != 1 || last.Shed[1] != 1 || last.Done[0] != 3 || last.Limit != 1 {
		t.Errorf("last tick %+v", last)
	}
}

// stalled blocks every Write until release is closed, then keeps what
// it is given.
type stalled struct {
	release chan struct{}
	got     *bytes.Buffer
}

func (s stalled) Write(p []byte) (int, error) {
	<-s.release
	return s.got.Write(p)
}

// TestRecorderStalledWriter: a recorder whose disk stopped answering
// never holds requests up; what it cannot write it drops and counts.
// How many records the writer took before its first write blocked
// depends on the scheduler, so the test checks that every record was
// either written or counted as lost, and that most were lost.
func TestRecorderStalledWriter(t *testing.T) {
	w := stalled{make(chan struct{}), &bytes.Buffer{}}
	rec, err := record.New(record.Config{Writer: w, Buffer: 16, FlushEvery: time.Millisecond, MaxRecordsPerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	rec.Start()
	mw, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{Limiter: recLimiter(t, 1000)}, Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(app)
	const workers, each = 4, 2000
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := httptest.NewRequest("GET", "/", nil)
			for range each {
				h.ServeHTTP(&discardWriter{h: http.Header{}}, req)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	st := rec.Stats()
	close(w.release)
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	if elapsed > 10*time.Second {
		t.Errorf("%d requests took %v with the recorder's writer stalled", workers*each, elapsed)
	}
	if st.Lost < workers*each/2 {
		t.Errorf("lost %d of %d records while the writer was stalled, want most", st.Lost, workers*each)
	}
	_, reqs, _ := rectest.ReadRecording(t, w.got.Bytes())
	if lost := rec.Stats().Lost; uint64(len(reqs))+lost != workers*each {
		t.Errorf("%d records written and %d lost, want %d in all", len(reqs), lost, workers*each)
	}
}

// A limiter's class names come from the service's code. shed refuses a
// line break in one; a name longer than the format holds it accepts, and
// the recording must stay readable (the Reader refuses such a name in a
// header), with the classes unnamed rather than a report or a fitted
// scenario saying what a cut name would make it say.
func TestRecorderClassNameTheFormatCannotHold(t *testing.T) {
	if _, err := shed.New(shed.Config{Limit: 4, Classes: []shed.ClassConfig{{Name: "inter\nactive"}}}); !errors.Is(err, shed.ErrInvalidConfig) {
		t.Fatalf("shed.New with a line break in a class name: %v, want shed.ErrInvalidConfig", err)
	}
	var buf bytes.Buffer
	rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("i", record.MaxClassNameBytes+1)
	lim, err := shed.New(shed.Config{Limit: 4, Classes: []shed.ClassConfig{{Name: long}, {Name: "batch"}}})
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	mw, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{Limiter: lim, Clock: clk.now,
		Routes: map[string]string{"/api/": long}}, Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	mw(app).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/api/x", nil))
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	h, reqs, _ := rectest.ReadRecording(t, buf.Bytes())
	if len(h.Classes) != 0 || len(reqs) != 1 || reqs[0].Class != 0 || reqs[0].ClassName != "class0" {
		t.Errorf("header classes %q, records %+v, want the classes unnamed\n%s", h.Classes, reqs, buf.Bytes())
	}
}
