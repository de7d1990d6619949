package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/metric"

	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/retrybudget"
	"github.com/shedkit/shedkit/shed"
	"github.com/shedkit/shedkit/shed/shedotel"
)

// gateway is the service under test: it answers the load generator by
// calling the upstream. Protected, it runs behind shedkit's middleware with
// an adaptive limit, takes its clients' deadlines from deadlineHeader and
// calls the upstream through a retry budget that passes on what is left.
// Unprotected, it is what such services often look like: no limit, no
// deadline, and a hand-written loop that retries every failure three
// times.
type gateway struct {
	mode     string
	lim      *shed.Limiter
	reg      metric.Registration
	limReg   metric.Registration
	client   *http.Client
	upstream string
	inflight atomic.Int64
	served   atomic.Int64 // requests that reached the handler
	// answered counts the responses the gateway finished, late those it
	// finished after its client had given up (see giveUpHeader).
	answered, late atomic.Int64
	srv            *http.Server
	url            string
}

type gatewayConfig struct {
	protected      bool
	upstream       string
	tel            *telemetry
	initialLimit   int
	latencyCeiling time.Duration
	adm            admission // protected: the limit, classes and retry budget
	attemptTimeout time.Duration
	propagate      bool             // deadlines: read from clients, sent upstream
	recorder       *record.Recorder // protected: records the traffic (nil: none)
}

func startGateway(ctx context.Context, cfg gatewayConfig) (*gateway, error) {
	g := &gateway{mode: "unprotected", upstream: cfg.upstream}
	tp, err := cfg.tel.tracerProvider(ctx, serviceGateway)
	if err != nil {
		return nil, err
	}
	base := &http.Transport{MaxIdleConnsPerHost: 1024, IdleConnTimeout: 30 * time.Second}
	mux := http.NewServeMux()
	mux.HandleFunc("/api/", g.serve)
	var handler http.Handler = mux
	if cfg.protected {
		g.mode = "protected"
		dlHeader := ""
		if cfg.propagate {
			dlHeader = deadlineHeader
		}
		if err := g.newLimiter(cfg); err != nil {
			return nil, err
		}
		mw, err := nethttp.New(nethttp.Config{
			Options: shedhttp.Options{
				Limiter:   g.lim,
				Routes:    map[string]string{classPaths[interactive]: "interactive", classPaths[batch]: "batch"},
				SkipPaths: []string{"/healthz"},
				// The load generator is the demo's own client: trusted.
				DeadlineHeader: dlHeader,
			},
			Recorder: cfg.recorder,
		})
		if err != nil {
			return nil, err
		}
		handler = mw(mux)
		budget, err := cfg.adm.newBudget()
		if err != nil {
			return nil, err
		}
		rt, err := retrybudget.NewTransport(retrybudget.TransportConfig{
			Base:           base,
			Name:           "gateway-upstream",
			MaxAttempts:    3,
			AttemptTimeout: cfg.attemptTimeout,
			DeadlineHeader: dlHeader,
			Budget:         budget,
			TracerProvider: tp,
			MeterProvider:  cfg.tel.meters,
		})
		if err != nil {
			return nil, err
		}
		g.client = &http.Client{Transport: rt}
	} else {
		g.client = &http.Client{Transport: otelhttp.NewTransport(base, otelhttp.WithTracerProvider(tp))}
	}
	// The server span comes first, so the middleware can tag it.
	handler = otelhttp.NewHandler(handler, "gateway",
		otelhttp.WithTracerProvider(tp), otelhttp.WithMeterProvider(cfg.tel.meters),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " " + r.URL.Path }))
	handler = g.countLate(handler)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g.url = "http://" + ln.Addr().String()
	g.srv = &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = g.srv.Serve(ln) }()
	return g, nil
}

// newLimiter makes the protected gateway's limiter from cfg's admission
// settings, with its metrics registered.
func (g *gateway) newLimiter(cfg gatewayConfig) error {
	limit, err := cfg.adm.newLimit(cfg.initialLimit, cfg.latencyCeiling)
	if err != nil {
		return err
	}
	metrics, err := shedotel.New(shedotel.Config{MeterProvider: cfg.tel.meters, Name: "gateway"})
	if err != nil {
		return err
	}
	g.lim, err = shed.New(shed.Config{
		Source:   limit,
		Classes:  cfg.adm.shedClasses(),
		Observer: metrics,
	})
	if err != nil {
		return err
	}
	if g.reg, err = metrics.Register(g.lim); err != nil {
		return err
	}
	g.limReg, err = metrics.RegisterLimit(limit)
	return err
}

// deadlineHeader carries a client's remaining time to the protected
// gateway, and the gateway's to the upstream (which ignores it).
const deadlineHeader = retrybudget.ConnectTimeoutHeader

// countLate counts the answers next finishes, and those it finishes after
// the client gave up on them: work whose result nobody reads.
func (g *gateway) countLate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r)
		g.answered.Add(1)
		if ns, err := strconv.ParseInt(r.Header.Get(giveUpHeader), 10, 64); err == nil && time.Now().UnixNano() > ns {
			g.late.Add(1)
		}
	})
}

// serve calls the upstream for one request.
func (g *gateway) serve(w http.ResponseWriter, r *http.Request) {
	g.served.Add(1)
	g.inflight.Add(1)
	defer g.inflight.Add(-1)
	attempts := 1
	if g.lim == nil {
		attempts = 3 // the unprotected gateway's hand-written retry loop
	}
	status := http.StatusBadGateway
	for i := 0; i < attempts; i++ {
		ctx, cancel := r.Context(), context.CancelFunc(func() {})
		if g.lim == nil {
			ctx, cancel = context.WithTimeout(r.Context(), time.Second)
		}
		status = g.call(ctx, r.URL.Path)
		cancel()
		if status == http.StatusOK || r.Context().Err() != nil {
			break
		}
	}
	if status != http.StatusOK {
		http.Error(w, http.StatusText(status), status)
		return
	}
	_, _ = io.WriteString(w, "ok\n")
}

func (g *gateway) call(ctx context.Context, path string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.upstream+path, nil)
	if err != nil {
		return http.StatusInternalServerError
	}
	resp, err := g.client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, retrybudget.ErrAttemptTimeout) {
			return http.StatusGatewayTimeout
		}
		return http.StatusBadGateway
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode
	}
	return http.StatusOK
}

// gauges are the gateway's admission figures at one moment.
type gauges struct {
	limit, inflight int // limit 0: none
	admitted        int // cumulative
	rejected        [shed.NumReasons]int
}

func (g *gateway) gauges() gauges {
	if g.lim == nil {
		return gauges{inflight: int(g.inflight.Load()), admitted: int(g.served.Load())}
	}
	s := g.lim.Snapshot()
	out := gauges{limit: s.Limit, inflight: s.InFlight}
	for _, c := range s.Classes {
		out.admitted += int(c.Admitted)
		for r, n := range c.Rejected {
			out.rejected[r] += int(n)
		}
	}
	return out
}

func (g *gateway) close(ctx context.Context) error {
	err := g.srv.Shutdown(ctx)
	if g.limReg != nil {
		err = errors.Join(err, g.limReg.Unregister())
	}
	if g.reg != nil {
		err = errors.Join(err, g.reg.Unregister())
	}
	g.client.CloseIdleConnections()
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	return nil
}
