package shedhttp

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// Errors carried by Rejection.Err for rejections that do not come from the
// shed.Limiter (those carry its *shed.Rejection).
var (
	// ErrRateLimited: the request's key exceeded its rate (429).
	ErrRateLimited = errors.New("shedhttp: rate limited")
	// ErrBodyTooLarge: the request's Content-Length exceeds the maximum
	// body size (413).
	ErrBodyTooLarge = errors.New("shedhttp: request body too large")
	// ErrNoPermit is returned by the middleware's Reconcile when the
	// context carries no permit (the request was skipped, or the context
	// is not a request's).
	ErrNoPermit = errors.New("shedhttp: no permit in context")
)

// Rejection describes a request that the middleware answered itself instead
// of passing it to the handler. It is server-side information, for logs
// and custom responses; what the client sees by default is WriteProblem's
// sanitized body.
type Rejection struct {
	// Status is the HTTP status to answer with: 429 (rate limited), 503
	// (not admitted), 413 (body or cost too large) or 500 (the request was
	// classified into a class or cost the limiter does not accept: a
	// configuration bug).
	Status int
	// Reason is shed.ReasonRateLimited for a 429, the limiter's reason for
	// a 503 or a cost-too-large 413, and shed.ReasonNone otherwise (among
	// them the 503 to a request whose context ended while it was queued).
	Reason shed.Reason
	// RetryAfter is the delay announced in Retry-After, a whole number of
	// seconds, at least 1 s; zero when the response carries none (413, 500).
	RetryAfter time.Duration
	// Class is the class the request was classified into.
	Class shed.Class
	// Err is the cause: a *shed.Rejection, ErrRateLimited, ErrBodyTooLarge,
	// an error wrapping shed.ErrInvalidRequest, or the request context's
	// error (context.Canceled, context.DeadlineExceeded) when the context
	// ended while the request was queued.
	Err error
}

// RejectFunc answers a rejected request. The middleware has already set
// the protocol headers (Retry-After, and the retrybudget no-retry header on
// 429 and 503 but a draining replica's) on w; the function writes the
// status and a body.
type RejectFunc func(w http.ResponseWriter, r *http.Request, rej Rejection)

// ProblemContentType is the media type of the default rejection body.
const ProblemContentType = "application/problem+json"

// problem is one pre-encoded RFC 9457 response.
type problem struct {
	body   []byte
	length []string
}

var (
	contentTypeValue = []string{ProblemContentType}[:1:1]
	problems         = map[int]*problem{
		http.StatusTooManyRequests:       newProblem(http.StatusTooManyRequests, "Too many requests from this client. Retry after the number of seconds in the Retry-After header."),
		http.StatusServiceUnavailable:    newProblem(http.StatusServiceUnavailable, "The server is overloaded. Retry after the number of seconds in the Retry-After header."),
		http.StatusRequestEntityTooLarge: newProblem(http.StatusRequestEntityTooLarge, "The request is larger than the server accepts."),
		http.StatusInternalServerError:   newProblem(http.StatusInternalServerError, "The server could not process the request."),
	}
)

// ProblemBody returns the RFC 9457 body WriteProblem sends for status:
// type "about:blank", the status text as title, the status, and a generic
// detail. It never names internal state.
func ProblemBody(status int) []byte {
	if p := problems[status]; p != nil {
		return p.body
	}
	return newProblem(status, "The request was not processed.").body
}

func newProblem(status int, detail string) *problem {
	title := http.StatusText(status)
	if title == "" {
		title = "Error"
	}
	body, err := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{"about:blank", title, status, detail})
	if err != nil {
		panic(err) // cannot happen: the struct holds only strings and an int
	}
	return &problem{body: body, length: []string{strconv.Itoa(len(body))}[:1:1]}
}

// WriteProblem is the default RejectFunc: it answers with rej.Status and
// its RFC 9457 body (see ProblemBody). For the statuses the middleware uses
// it allocates nothing.
func WriteProblem(w http.ResponseWriter, r *http.Request, rej Rejection) {
	p := problems[rej.Status]
	if p == nil {
		p = newProblem(rej.Status, "The request was not processed.")
	}
	h := w.Header()
	h["Content-Type"] = contentTypeValue
	h["Content-Length"] = p.length
	w.WriteHeader(rej.Status)
	if r == nil || r.Method != http.MethodHead {
		_, _ = w.Write(p.body)
	}
}

// RetryAfterSeconds is the Retry-After value for d: whole seconds, rounded
// up, at least 1.
func RetryAfterSeconds(d time.Duration) int64 {
	if d > math.MaxInt64-time.Second {
		return int64(d / time.Second)
	}
	s := int64((d + time.Second - 1) / time.Second)
	return max(s, 1)
}

// retryAfterValues holds ready-made header values for the common delays,
// so that setting Retry-After allocates nothing. Capacity 1: a later Add
// reallocates instead of writing into the shared array.
var retryAfterValues = func() [301][]string {
	var vs [301][]string
	for i := 1; i < len(vs); i++ {
		vs[i] = []string{strconv.Itoa(i)}[:1:1]
	}
	return vs
}()

// RetryAfterValue returns the Retry-After header value for d, as a slice to
// assign to an http.Header entry. Do not modify it: it may be shared.
func RetryAfterValue(d time.Duration) []string {
	s := RetryAfterSeconds(d)
	if s < int64(len(retryAfterValues)) {
		return retryAfterValues[s]
	}
	return []string{strconv.FormatInt(s, 10)}
}
