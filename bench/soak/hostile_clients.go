package soak

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Kinds of hostile requests.
const (
	kindSlowInTime  = iota // slow upload whose body ends within the deadline
	kindSlowLate           // slow upload whose body ends after the deadline
	kindSlowStalled        // upload that stops sending
	kindBodyCut            // reset or close in the middle of the body
	kindStreamCut          // reset or close in the middle of a streamed response
	kindStreamFull         // the same stream, read to its end
	kindImpatient          // gives up within 1-100 ms
	kindFlaky              // every upstream attempt gets an endless 503
	kindEncoded            // percent-encoded variant of a path
	kindHijack             // idle upgraded connection
	numHostileKinds
)

var hostileKindNames = [numHostileKinds]string{
	"slow-upload-in-time", "slow-upload-late", "slow-upload-stalled", "cut-mid-body", "cut-mid-stream",
	"full-stream", "impatient", "flaky-upstream", "encoded-path", "hijacked-idle",
}

// encodedPaths are percent-encoded variants of the service's paths. None
// starts with a route prefix as sent, so the middleware must give each the
// default (batch) class; ServeMux routes the first two to the health and
// items handlers, the third (an encoded slash) to the catch-all.
var encodedPaths = []string{"/%68ealthz", "/%61pi/items", "/api%2Fitems", "/%62atch/export"}

// kindStats counts one kind's outcomes, as its clients saw them.
type kindStats struct {
	sent, ok, badProof, limited, shed, badGateway, notFound, switched, other atomic.Uint64
	noResponse, abandoned, hung                                              atomic.Uint64
	maxTime                                                                  atomic.Int64
}

// outcome is what a hostile client got for one request.
type outcome struct {
	status int
	proof  bool // the body carried the handler's proof for this request
	err    error
}

// hostileClients run the hostile traffic between the phases' bounds.
type hostileClients struct {
	cfg    HostileConfig
	srv    *hostileServer
	conns  connCounter
	tr     *http.Transport
	client *http.Client
	stop   chan struct{}
	seq    atomic.Uint64
	stats  [numHostileKinds]kindStats
	// encodedFrom and encodedTo delimit the encoded client's activity,
	// for the bound on what its key may get past the rate limit.
	encodedFrom, encodedTo time.Time
	// windowEnd is when the stop signal is due: a slow upload that
	// cannot end by then does not start, so that the phase after the
	// window measures the service without hostile clients.
	windowEnd time.Time
	ended     time.Time
	windDown  time.Duration // from the stop signal until every client returned
}

func newHostileClients(cfg HostileConfig, srv *hostileServer) *hostileClients {
	h := &hostileClients{cfg: cfg, srv: srv, stop: make(chan struct{})}
	h.tr = &http.Transport{DialContext: h.conns.dial, MaxIdleConnsPerHost: 16, IdleConnTimeout: 2 * time.Second, DisableCompression: true}
	h.client = &http.Client{
		Transport:     h.tr,
		Timeout:       cfg.HangBound,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return h
}

func (h *hostileClients) closeIdle() { h.tr.CloseIdleConnections() }

func (h *hostileClients) stopped() bool {
	select {
	case <-h.stop:
		return true
	default:
		return false
	}
}

func (h *hostileClients) nextID() string { return fmt.Sprintf("h%d", h.seq.Add(1)) }

// run waits for the hostile window, runs every client in it, then stops
// them and waits until all have returned (each is bounded by HangBound).
func (h *hostileClients) run(ctx context.Context, start time.Time) {
	from, to := h.cfg.phases()
	if !sleepUntil(ctx, start.Add(from)) {
		close(h.stop)
		h.ended = time.Now()
		return
	}
	h.windowEnd = start.Add(to)
	var wg sync.WaitGroup
	spawn := func(n int, f func(i int)) {
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Clients of a kind arrive spread over a request
				// deadline, not in lockstep, as real ones do.
				h.pause(time.Duration(i) * h.cfg.RequestTimeout / time.Duration(n))
				for !h.stopped() {
					f(i)
				}
			}()
		}
	}
	// Each client is a key of its own: the rate limit is not what they
	// test (the encoded one aside), and the slow uploaders all connect at
	// once, beyond one key's burst.
	spawn(h.cfg.SlowUploaders, func(i int) { h.slowUpload(kindSlowInTime+i%3, fmt.Sprintf("slow%d", i)) })
	spawn(h.cfg.Disconnectors, func(i int) { h.bodyCut(fmt.Sprintf("cut%d", i)) })
	spawn(h.cfg.Streamers, func(i int) { h.stream(fmt.Sprintf("stream%d", i)) })
	spawn(h.cfg.Impatient, func(i int) { h.impatient(fmt.Sprintf("impatient%d", i)) })
	spawn(h.cfg.Hijackers, func(i int) { h.hijack(fmt.Sprintf("ws%d", i)) })
	h.paced(&wg, h.cfg.FlakyRate, h.flaky, nil)
	h.encodedFrom = time.Now()
	h.paced(&wg, h.cfg.EncodedRate, h.encoded, func() { h.encodedTo = time.Now() })
	sleepUntil(ctx, start.Add(to))
	stopAt := time.Now()
	close(h.stop)
	wg.Wait()
	h.ended = time.Now()
	h.windDown = h.ended.Sub(stopAt)
}

// paced runs f at rate per second, one call at a time, until stop, then
// calls exited if set.
func (h *hostileClients) paced(wg *sync.WaitGroup, rate int, f, exited func()) {
	if rate <= 0 {
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if exited != nil {
			defer exited()
		}
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-tick.C:
				f()
			}
		}
	}()
}

// sleepUntil sleeps until t; false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// pause sleeps d, or less if the hostile window ends.
func (h *hostileClients) pause(d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-h.stop:
	}
}

// dialRaw opens a counted connection with a deadline of HangBound: every
// raw client ends by itself.
func (h *hostileClients) dialRaw() (*countedConn, error) {
	c, err := h.conns.dial(context.Background(), "tcp", h.srv.addr)
	if err != nil {
		return nil, err
	}
	cc := c.(*countedConn)
	_ = cc.SetDeadline(time.Now().Add(h.cfg.HangBound))
	return cc, nil
}

// record counts an outcome of kind k that took d.
func (h *hostileClients) record(k int, o outcome, d time.Duration) {
	st := &h.stats[k]
	for m := st.maxTime.Load(); int64(d) > m && !st.maxTime.CompareAndSwap(m, int64(d)); m = st.maxTime.Load() {
	}
	if o.err != nil {
		st.noResponse.Add(1)
		var ne net.Error
		if errors.Is(o.err, os.ErrDeadlineExceeded) || (errors.As(o.err, &ne) && ne.Timeout() && k != kindImpatient) {
			st.hung.Add(1)
		}
		return
	}
	switch o.status {
	case http.StatusOK:
		if o.proof {
			st.ok.Add(1)
		} else {
			st.badProof.Add(1)
		}
	case http.StatusSwitchingProtocols:
		st.switched.Add(1)
	case http.StatusTooManyRequests:
		st.limited.Add(1)
	case http.StatusServiceUnavailable:
		st.shed.Add(1)
	case http.StatusBadGateway:
		st.badGateway.Add(1)
	case http.StatusNotFound:
		st.notFound.Add(1)
	default:
		st.other.Add(1)
	}
}

// readOutcome reads one response from br and checks the proof for id.
func readOutcome(br *bufio.Reader, id string) outcome {
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return outcome{err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return outcome{err: err}
	}
	return outcome{status: resp.StatusCode, proof: hasProof(body, id)}
}

// hasProof reports whether body ends with the handler's proof for id.
func hasProof(body []byte, id string) bool {
	return id != "" && strings.HasSuffix(string(body), "ok "+id+"\n")
}

// uploadShape returns the announced length of a slow upload of kind k and
// how many bytes the client sends: a body that ends at a quarter of the
// deadline, one that ends at 1.5 deadlines, and 3 bytes of 1 KiB.
func (h *hostileClients) uploadShape(k int) (length, send int) {
	perDeadline := int(float64(h.cfg.UploadRate) * h.cfg.RequestTimeout.Seconds())
	switch k {
	case kindSlowInTime:
		return max(1, perDeadline/4), max(1, perDeadline/4)
	case kindSlowLate:
		return perDeadline * 3 / 2, perDeadline * 3 / 2
	}
	return 1024, 3
}

// slowUpload sends one upload of kind k at UploadRate bytes per second on
// its own connection and reads the answer. A stalled upload is abandoned
// (the connection closed) when the hostile window ends; the others finish.
func (h *hostileClients) slowUpload(k int, tenant string) {
	length, send := h.uploadShape(k)
	takes := time.Duration(send) * time.Second / time.Duration(h.cfg.UploadRate)
	switch {
	case h.cfg.SlowWork:
		takes = h.cfg.RequestTimeout
	case k == kindSlowStalled:
		takes = 0 // abandoned at the stop
	}
	if left := time.Until(h.windowEnd); left < takes {
		h.pause(left)
		return
	}
	conn, err := h.dialRaw()
	if err != nil {
		h.record(k, outcome{err: err}, 0)
		h.pause(100 * time.Millisecond)
		return
	}
	defer conn.Close()
	h.stats[k].sent.Add(1)
	began, id := time.Now(), h.nextID()
	path := uploadPath + "?id=" + id
	if h.cfg.SlowWork {
		// The ablation: the whole body at once, and as long in the
		// handler as the upload would have taken.
		path += "&work=slow"
		send = length
	}
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: soak\r\n%s: %s\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n", path, tenantHeader, tenant, length)
	got := make(chan outcome, 1)
	go func() { got <- readOutcome(bufio.NewReader(conn), id) }()
	if h.cfg.SlowWork {
		_, _ = conn.Write([]byte(strings.Repeat("x", send)))
	} else if o, done := h.trickle(conn, k, send, got); done {
		h.record(k, o, time.Since(began))
		return
	}
	if k == kindSlowStalled && !h.cfg.SlowWork {
		select {
		case o := <-got:
			h.record(k, o, time.Since(began))
		case <-h.stop:
			conn.reset()
			<-got
			h.stats[k].abandoned.Add(1)
		}
		return
	}
	h.record(k, <-got, time.Since(began))
}

// trickle writes n bytes at UploadRate. It returns early (done) when the
// answer comes first, or when the window ends during a stalled upload.
func (h *hostileClients) trickle(conn *countedConn, k, n int, got <-chan outcome) (outcome, bool) {
	tick := time.NewTicker(time.Second / time.Duration(h.cfg.UploadRate))
	defer tick.Stop()
	for sent := 0; sent < n; {
		select {
		case o := <-got:
			return o, true
		case <-tick.C:
			if _, err := conn.Write([]byte{'x'}); err != nil {
				return <-got, true
			}
			sent++
		}
	}
	return outcome{}, false
}

// bodyCut announces a 4 KiB body, sends 64 bytes, and resets (every other
// time closes) the connection while the handler reads.
func (h *hostileClients) bodyCut(tenant string) {
	conn, err := h.dialRaw()
	if err != nil {
		h.record(kindBodyCut, outcome{err: err}, 0)
		h.pause(100 * time.Millisecond)
		return
	}
	n := h.stats[kindBodyCut].sent.Add(1)
	fmt.Fprintf(conn, "POST %s?id=%s HTTP/1.1\r\nHost: soak\r\n%s: %s\r\nContent-Length: 4096\r\n\r\n%s",
		uploadPath, h.nextID(), tenantHeader, tenant, strings.Repeat("y", 64))
	h.pause(20 * time.Millisecond)
	if n%2 == 0 {
		conn.reset()
	} else {
		_ = conn.Close()
	}
	h.pause(30 * time.Millisecond)
}

// stream reads a streamed response: every fourth to its end (the proof
// must be there), the others for 1-4 KiB before a reset or a close. Every
// third stream holds its permit while it streams.
func (h *hostileClients) stream(tenant string) {
	conn, err := h.dialRaw()
	if err != nil {
		h.record(kindStreamCut, outcome{err: err}, 0)
		h.pause(100 * time.Millisecond)
		return
	}
	defer conn.Close()
	n := h.seq.Add(1)
	id := fmt.Sprintf("h%d", n)
	k := kindStreamCut
	if n%4 == 0 {
		k = kindStreamFull
	}
	h.stats[k].sent.Add(1)
	began := time.Now()
	hold := ""
	if n%3 == 0 {
		hold = "&hold=1"
	}
	fmt.Fprintf(conn, "GET %s?id=%s%s HTTP/1.1\r\nHost: soak\r\n%s: %s\r\n\r\n", streamPath, id, hold, tenantHeader, tenant)
	br := bufio.NewReader(conn)
	if k == kindStreamFull {
		h.record(k, readOutcome(br, id), time.Since(began))
		return
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		h.record(k, outcome{err: err}, time.Since(began))
		return
	}
	_, _ = io.CopyN(io.Discard, resp.Body, int64(1+n%4)<<10)
	// What the client got before it left: the status; no proof expected.
	h.record(k, outcome{status: resp.StatusCode, proof: true}, time.Since(began))
	if n%2 == 0 {
		conn.reset()
	}
}

// get sends a GET through the hostile http.Client and reads the outcome.
func (h *hostileClients) get(ctx context.Context, path, tenant, id string) outcome {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.srv.url+path, nil)
	if err != nil {
		return outcome{err: err}
	}
	req.Header.Set(tenantHeader, tenant)
	resp, err := h.client.Do(req)
	if err != nil {
		return outcome{err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return outcome{err: err}
	}
	return outcome{status: resp.StatusCode, proof: hasProof(body, id)}
}

// impatient gives up on a request after 1-100 ms: in the queue, in the
// upstream call, or (every other request, flaky) in its retries.
func (h *hostileClients) impatient(tenant string) {
	n := h.stats[kindImpatient].sent.Add(1)
	id := h.nextID()
	path := itemsPath + "?id=" + id
	if n%2 == 0 {
		path += "&fail=all"
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+rand.IntN(100))*time.Millisecond)
	defer cancel()
	began := time.Now()
	h.record(kindImpatient, h.get(ctx, path, tenant, id), time.Since(began))
	h.pause(10 * time.Millisecond)
}

// flaky sends a request whose every upstream attempt gets an endless 503:
// the service must answer 502 (the retrying client returned the last 503
// promptly), not a timeout.
func (h *hostileClients) flaky() {
	h.stats[kindFlaky].sent.Add(1)
	id := h.nextID()
	began := time.Now()
	h.record(kindFlaky, h.get(context.Background(), itemsPath+"?fail=all&id="+id, "flaky", id), time.Since(began))
}

// encoded sends the next percent-encoded variant, all from one key.
func (h *hostileClients) encoded() {
	n := h.stats[kindEncoded].sent.Add(1)
	id := h.nextID()
	path := encodedPaths[int(n)%len(encodedPaths)] + "?id=" + id
	if u, err := url.Parse(h.srv.url + path); err != nil || u.RawPath == "" {
		panic(fmt.Sprintf("soak: %s does not keep its encoding (%v)", path, err))
	}
	began := time.Now()
	h.record(kindEncoded, h.get(context.Background(), path, "enc", id), time.Since(began))
}

// hijack upgrades a connection, holds it idle for a second (less if the
// window ends), then closes it.
func (h *hostileClients) hijack(tenant string) {
	conn, err := h.dialRaw()
	if err != nil {
		h.record(kindHijack, outcome{err: err}, 0)
		h.pause(100 * time.Millisecond)
		return
	}
	defer conn.Close()
	h.stats[kindHijack].sent.Add(1)
	began := time.Now()
	fmt.Fprintf(conn, "GET %s?id=%s HTTP/1.1\r\nHost: soak\r\nConnection: Upgrade\r\nUpgrade: soak\r\n%s: %s\r\n\r\n", wsPath, h.nextID(), tenantHeader, tenant)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		h.record(kindHijack, outcome{err: err}, time.Since(began))
		return
	}
	h.record(kindHijack, outcome{status: resp.StatusCode}, time.Since(began))
	if resp.StatusCode == http.StatusSwitchingProtocols {
		h.pause(time.Second)
	}
}
