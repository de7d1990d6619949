//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"
)

const (
	jaegerQuery = "http://127.0.0.1:16686"
	otlpHTTP    = "http://127.0.0.1:4318"
	gatewaySvc  = "shedkit-demo-gateway"
	upstreamSvc = "shedkit-demo-upstream"
)

func repoRoot(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// jaegerClient bounds every request to Jaeger's query API, so a Jaeger
// that accepts connections but never answers fails the test within its
// deadlines instead of hanging it.
var jaegerClient = &http.Client{Timeout: 5 * time.Second}

// startJaeger starts Jaeger with in-memory storage on 127.0.0.1 and stops
// it when the test ends.
func startJaeger(t *testing.T, root string) {
	bin := os.Getenv("JAEGER_BIN")
	if bin == "" {
		t.Fatal("JAEGER_BIN is not set: run the end-to-end test with `make e2e`")
	}
	if c, err := jaegerClient.Get(jaegerQuery + "/api/services"); err == nil {
		c.Body.Close()
		t.Fatal("something already listens on 127.0.0.1:16686; stop it first")
	}
	log, err := os.Create(filepath.Join(t.TempDir(), "jaeger.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", "file:"+filepath.Join(root, "e2e", "jaeger.yaml"))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("jaeger log:\n%s", b)
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := jaegerClient.Get(jaegerQuery + "/api/services")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Jaeger did not answer on %s within 60 s: %v", jaegerQuery, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// runDemo runs a short protected demo that exports its traces to Jaeger.
// The attempt timeout is below the slowed upstream's latency, so that the
// retrying client makes several attempts per logical request.
func runDemo(t *testing.T, root string) {
	bin := filepath.Join(t.TempDir(), "demo")
	// The demo is in module cmd: build it from there, so that this works
	// with or without the repository's go.work.
	build := exec.Command("go", "build", "-o", bin, "./demo")
	build.Dir = filepath.Join(root, "cmd")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the demo: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin,
		"-mode", "protected", "-duration", "8s", "-slow-start", "2s", "-slow-for", "4s",
		"-attempt-timeout", "300ms", "-out", "", "-metrics-addr", "", "-quiet")
	// Jaeger stores traces only: metrics are not exported by OTLP.
	cmd.Env = append(os.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT="+otlpHTTP, "OTEL_METRICS_EXPORTER=none")
	out, err := cmd.CombinedOutput()
	t.Logf("demo output:\n%s", out)
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
}

// Jaeger's HTTP query API (v1 JSON).
type jaegerTraces struct {
	Data []jaegerTrace `json:"data"`
}

type jaegerTrace struct {
	TraceID   string                   `json:"traceID"`
	Spans     []jaegerSpan             `json:"spans"`
	Processes map[string]jaegerProcess `json:"processes"`
}

type jaegerSpan struct {
	TraceID       string      `json:"traceID"`
	SpanID        string      `json:"spanID"`
	OperationName string      `json:"operationName"`
	References    []jaegerRef `json:"references"`
	StartTime     int64       `json:"startTime"`
	Tags          []jaegerTag `json:"tags"`
	ProcessID     string      `json:"processID"`
}

// hasChild reports whether one of spans is named name.
func hasChild(spans []*jaegerSpan, name string) bool {
	for _, c := range spans {
		if c.OperationName == name {
			return true
		}
	}
	return false
}

type jaegerRef struct {
	RefType string `json:"refType"`
	SpanID  string `json:"spanID"`
}

type jaegerTag struct {
	Key   string `json:"key"`
	Value any    `json:"value"`
}

type jaegerProcess struct {
	ServiceName string `json:"serviceName"`
}

func (s *jaegerSpan) tag(key string) (string, bool) {
	for _, t := range s.Tags {
		if t.Key == key {
			return fmt.Sprint(t.Value), true
		}
	}
	return "", false
}

func (s *jaegerSpan) parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

func query(t *testing.T, path string, v any) {
	t.Helper()
	resp, err := jaegerClient.Get(jaegerQuery + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

func TestTracesInJaeger(t *testing.T) {
	root := repoRoot(t)
	startJaeger(t, root)
	runDemo(t, root)
	waitForServices(t)

	var traces jaegerTraces
	query(t, "/api/traces?service="+gatewaySvc+"&limit=100000&lookback=1h", &traces)
	t.Logf("%d gateway traces", len(traces.Data))

	c := spanCounts{reasons: map[string]int{}, attemptsHist: map[int]int{}}
	for _, tr := range traces.Data {
		checkTrace(t, tr, &c)
	}
	checkCounts(t, &c)
}

// waitForServices waits until Jaeger knows the gateway, then checks that it
// knows both of the demo's services.
func waitForServices(t *testing.T) {
	t.Helper()
	// The exporters flushed at exit; give the collector's batch a moment.
	var services struct {
		Data []string `json:"data"`
	}
	// Both services: the upstream's spans may reach the collector in a
	// later batch than the gateway's.
	missing := func() string {
		for _, want := range []string{gatewaySvc, upstreamSvc} {
			if !slices.Contains(services.Data, want) {
				return want
			}
		}
		return ""
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		services.Data = nil
		query(t, "/api/services", &services)
		if missing() == "" || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if want := missing(); want != "" {
		t.Fatalf("services %v, want %s", services.Data, want)
	}
}

// spanCounts adds up what the checks of all gateway traces saw, for the
// checks of the whole run in checkCounts.
type spanCounts struct {
	admitted, rejected int
	reasons            map[string]int
	logical            int
	attemptsHist       map[int]int
	upstreamChildren   int
	queued             int
	lostParents        int // logical spans whose parent is not in Jaeger
}

// spanTree is one trace with its spans indexed by ID and by parent.
type spanTree struct {
	tr       jaegerTrace
	byID     map[string]*jaegerSpan
	children map[string][]*jaegerSpan
}

func (tree *spanTree) service(s *jaegerSpan) string {
	return tree.tr.Processes[s.ProcessID].ServiceName
}

// checkTrace checks the gateway's server and logical spans of one trace.
func checkTrace(t *testing.T, tr jaegerTrace, c *spanCounts) {
	tree := &spanTree{tr: tr, byID: map[string]*jaegerSpan{}, children: map[string][]*jaegerSpan{}}
	for i := range tr.Spans {
		s := &tr.Spans[i]
		tree.byID[s.SpanID] = s
		tree.children[s.parent()] = append(tree.children[s.parent()], s)
	}
	for i := range tr.Spans {
		s := &tr.Spans[i]
		svc := tree.service(s)
		kind, _ := s.tag("span.kind")
		switch {
		case svc == gatewaySvc && kind == "server":
			checkServerSpan(t, tree, s, c)
		case svc == gatewaySvc && kind == "internal":
			checkLogicalSpan(t, tree, s, c)
		}
	}
}

// checkServerSpan checks the admission tags of a gateway server span.
func checkServerSpan(t *testing.T, tree *spanTree, s *jaegerSpan, c *spanCounts) {
	decision, _ := s.tag("shedkit.decision")
	// The demo's clients are shedkit clients of one attempt:
	// the server span says which attempt it served.
	if a, ok := s.tag("shedkit.attempt"); !ok || a != "1" {
		t.Errorf("gateway server span %s has shedkit.attempt %q (set: %v), want 1", s.SpanID, a, ok)
	}
	switch decision {
	case "admitted":
		checkAdmittedSpan(t, tree, s, c)
	case "rejected":
		c.rejected++
		reason, ok := s.tag("shedkit.reason")
		if !ok || reason == "" {
			t.Errorf("rejected server span %s has no shedkit.reason", s.SpanID)
		}
		c.reasons[reason]++
	default:
		t.Errorf("gateway server span %s has shedkit.decision %q", s.SpanID, decision)
	}
}

// checkAdmittedSpan checks the class and the queue wait of an admitted
// gateway server span.
func checkAdmittedSpan(t *testing.T, tree *spanTree, s *jaegerSpan, c *spanCounts) {
	c.admitted++
	if class, hasClass := s.tag("shedkit.class"); !hasClass || (class != "interactive" && class != "batch") {
		t.Errorf("admitted server span %s has class %q", s.SpanID, class)
	}
	wait, ok := s.tag("shedkit.queue.wait")
	if !ok {
		t.Errorf("admitted server span %s has no shedkit.queue.wait", s.SpanID)
	}
	// A request that waited shows its wait on the timeline.
	if w, _ := strconv.ParseFloat(wait, 64); w > 0 {
		c.queued++
		if !hasChild(tree.children[s.SpanID], "shedkit.queue") {
			t.Errorf("admitted server span %s waited %ss and has no shedkit.queue child", s.SpanID, wait)
		}
	}
}

// checkLogicalSpan checks a gateway INTERNAL span: the logical request of
// the retrying client, with one CLIENT child per attempt.
func checkLogicalSpan(t *testing.T, tree *spanTree, s *jaegerSpan, c *spanCounts) {
	var attempts []*jaegerSpan
	for _, a := range tree.children[s.SpanID] {
		if k, _ := a.tag("span.kind"); k == "client" {
			attempts = append(attempts, a)
		}
	}
	if len(attempts) == 0 {
		return // denied before any attempt (e.g. the deadline)
	}
	c.logical++
	c.attemptsHist[len(attempts)]++
	checkAttempts(t, tree, attempts, c)
	// An exporter drops spans when its queue is full, so a parent that the
	// span names may be missing from Jaeger: checkCounts bounds those. A
	// span that names no parent, or one of another service, is wrong.
	switch p, ok := tree.byID[s.parent()]; {
	case s.parent() == "":
		t.Errorf("logical span %s is a root: the server span's context was lost", s.SpanID)
	case !ok:
		c.lostParents++
	case tree.service(p) != gatewaySvc:
		t.Errorf("logical span %s is a child of a %s span", s.SpanID, tree.service(p))
	}
}

// checkAttempts checks the CLIENT spans of one logical request: resend count
// absent on the first and 1, 2, ... on the next ones, and counts the
// upstream spans under them.
func checkAttempts(t *testing.T, tree *spanTree, attempts []*jaegerSpan, c *spanCounts) {
	sort.Slice(attempts, func(i, j int) bool { return attempts[i].StartTime < attempts[j].StartTime })
	for i, a := range attempts {
		rc, ok := a.tag("http.request.resend_count")
		switch {
		case i == 0 && ok:
			t.Errorf("first attempt %s carries http.request.resend_count=%s", a.SpanID, rc)
		case i > 0 && rc != fmt.Sprint(i):
			t.Errorf("attempt %d (%s) has http.request.resend_count=%q, want %d", i+1, a.SpanID, rc, i)
		}
		if _, ok := a.tag("http.request.method"); !ok {
			t.Errorf("attempt span %s has no http.request.method", a.SpanID)
		}
		for _, up := range tree.children[a.SpanID] {
			if tree.service(up) == upstreamSvc {
				c.upstreamChildren++
			}
		}
	}
}

// checkCounts checks that the run as a whole showed admissions,
// rejections, retries and propagated trace context.
func checkCounts(t *testing.T, c *spanCounts) {
	t.Helper()
	t.Logf("server spans: %d admitted (%d after a wait), %d rejected %v; logical spans by attempts %v (%d with a lost parent); upstream spans under attempts %d",
		c.admitted, c.queued, c.rejected, c.reasons, c.attemptsHist, c.lostParents, c.upstreamChildren)
	if c.admitted == 0 || c.rejected == 0 {
		t.Errorf("want both admitted and rejected gateway server spans, got %d and %d", c.admitted, c.rejected)
	}
	if c.logical == 0 {
		t.Fatal("no logical INTERNAL span with CLIENT attempts")
	}
	retried := 0
	for n, count := range c.attemptsHist {
		if n > 1 {
			retried += count
		}
	}
	if retried == 0 {
		t.Errorf("no logical request was retried (attempts per logical span %v): resend counts untested", c.attemptsHist)
	}
	// A few lost parents are the exporter's load shedding; many are a
	// broken context.
	if c.lostParents*100 > c.logical {
		t.Errorf("%d of %d logical spans have a parent that is not in Jaeger", c.lostParents, c.logical)
	}
	if c.upstreamChildren == 0 {
		t.Error("no upstream server span is a child of an attempt: trace context was not propagated")
	}
}
