package soak

import (
	"net/http"
	"net/url"
	"runtime"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// Connection kinds, as HostileReport counts them.
const (
	connServer         = iota // the service's side
	connClients               // the normal and hostile clients' side
	connUpstream              // the upstream's side
	connUpstreamClient        // the service's retrying client's side
	numConnKinds
)

var connKindNames = [numConnKinds]string{"server", "clients", "upstream", "upstream-client"}

// normalStats counts the normal requests by phase (of their send time)
// and outcome. A 200 must carry the handler's proof for its own id.
type normalStats struct {
	sent, ok, badProof, limited, shed, badGateway, other, noResponse [numHostilePhases]uint64
	maxLatency                                                       time.Duration
	samples                                                          []string
}

func (s *normalStats) add(cfg HostileConfig, start time.Time, r *vegeta.Result) {
	p := cfg.phaseOf(r.Timestamp.Sub(start))
	s.sent[p]++
	s.maxLatency = max(s.maxLatency, r.Latency)
	switch r.Code {
	case 0:
		s.noResponse[p]++
		s.sample("no response: " + portRE.ReplaceAllString(r.Error, ":PORT"))
	case http.StatusOK:
		if hasProof(r.Body, idOf(r.URL)) {
			s.ok[p]++
		} else {
			s.badProof[p]++
			s.sample("200 without proof: " + r.URL + " " + string(r.Body))
		}
	case http.StatusTooManyRequests:
		s.limited[p]++
	case http.StatusServiceUnavailable:
		s.shed[p]++
	case http.StatusBadGateway:
		s.badGateway[p]++
	default:
		s.other[p]++
		s.sample(http.StatusText(int(r.Code)) + ": " + r.URL)
	}
}

func (s *normalStats) sample(msg string) {
	if len(s.samples) < 8 {
		s.samples = append(s.samples, msg)
	}
}

func idOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Query().Get("id")
}

// HostileSample is one resource sample of the hostile soak.
type HostileSample struct {
	T            time.Duration
	Goroutines   int
	HeapInuse    uint64
	Limit        int
	InFlight     int
	Conns        [numConnKinds]int64
	HijackedOpen int64
}

// hostileSampler samples every cfg.SampleEvery, after a collection.
type hostileSampler struct {
	cfg     HostileConfig
	start   time.Time
	srv     *hostileServer
	normal  *normalTraffic
	hc      *hostileClients
	samples []HostileSample
	// limitMin and windows are per phase: the lowest limit, read every
	// 10 ms (a window may cut it and recover between two samples), and
	// the Gradient's windows, which must close for the limit to mean
	// anything.
	limitMin [numHostilePhases]int
	windows  [numHostilePhases]uint64
	// cuts counts the falls of the limit seen by the watcher.
	cuts      [numHostilePhases]int
	lastLimit int
}

func newHostileSampler(cfg HostileConfig, start time.Time, srv *hostileServer, normal *normalTraffic, hc *hostileClients) *hostileSampler {
	s := &hostileSampler{cfg: cfg, start: start, srv: srv, normal: normal, hc: hc}
	for p := range s.limitMin {
		s.limitMin[p] = -1
	}
	return s
}

// watchLimit records the limit's minimum and the windows in the phase of
// now.
func (s *hostileSampler) watchLimit(now time.Time, lastWindows *uint64) {
	p := s.cfg.phaseOf(now.Sub(s.start))
	l := s.srv.lim.Limit()
	if s.limitMin[p] < 0 || l < s.limitMin[p] {
		s.limitMin[p] = l
	}
	if s.lastLimit > 0 && l < s.lastLimit {
		s.cuts[p]++
	}
	s.lastLimit = l
	w := s.srv.grad.State().Windows
	s.windows[p] += w - *lastWindows
	*lastWindows = w
}

func (s *hostileSampler) run(stop <-chan struct{}) {
	t := time.NewTicker(s.cfg.SampleEvery)
	defer t.Stop()
	fast := time.NewTicker(10 * time.Millisecond)
	defer fast.Stop()
	var ms runtime.MemStats
	var windows uint64
	for {
		select {
		case <-stop:
			s.watchLimit(time.Now(), &windows)
			return
		case now := <-fast.C:
			s.watchLimit(now, &windows)
		case now := <-t.C:
			runtime.GC()
			runtime.ReadMemStats(&ms)
			smp := HostileSample{
				T:          now.Sub(s.start),
				Goroutines: runtime.NumGoroutine(),
				HeapInuse:  ms.HeapInuse,
				Limit:      s.srv.lim.Limit(),
				InFlight:   s.srv.lim.InFlight(),
				Conns: [numConnKinds]int64{
					s.srv.conns.open.Load(), s.normal.conns.open.Load() + s.hc.conns.open.Load(),
					s.srv.up.conns.open.Load(), s.srv.upClient.open.Load(),
				},
				HijackedOpen: s.srv.hijackedOpen.Load(),
			}
			s.samples = append(s.samples, smp)
			if s.cfg.Logf != nil {
				s.cfg.Logf("t=%5.1fs %-8s limit=%3d inflight=%3d goroutines=%4d heap=%5.1fMiB conns server/clients/upstream/upstream-client=%d/%d/%d/%d hijacked=%d",
					smp.T.Seconds(), hostilePhaseNames[s.cfg.phaseOf(smp.T)], smp.Limit, smp.InFlight, smp.Goroutines,
					float64(smp.HeapInuse)/(1<<20), smp.Conns[0], smp.Conns[1], smp.Conns[2], smp.Conns[3], smp.HijackedOpen)
			}
		}
	}
}

// PhaseLevel summarizes the samples of a stretch of the run.
type PhaseLevel struct {
	Samples             int
	Goroutines, HeapMiB float64 // means
	LimitMin            int
	LimitMean           float64
	ConnsMax            [numConnKinds]int64
}

// level summarizes the samples with from <= T < to; LimitMin is -1 when
// there are none.
func level(samples []HostileSample, from, to time.Duration) PhaseLevel {
	l := PhaseLevel{LimitMin: -1}
	for _, s := range samples {
		if s.T < from || s.T >= to {
			continue
		}
		l.Samples++
		l.Goroutines += float64(s.Goroutines)
		l.HeapMiB += float64(s.HeapInuse) / (1 << 20)
		l.LimitMean += float64(s.Limit)
		if l.LimitMin < 0 || s.Limit < l.LimitMin {
			l.LimitMin = s.Limit
		}
		for k, n := range s.Conns {
			l.ConnsMax[k] = max(l.ConnsMax[k], n)
		}
	}
	if l.Samples > 0 {
		n := float64(l.Samples)
		l.Goroutines, l.HeapMiB, l.LimitMean = l.Goroutines/n, l.HeapMiB/n, l.LimitMean/n
	}
	return l
}
