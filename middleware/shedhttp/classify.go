package shedhttp

import (
	"net/http"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// Classification is what the middleware needs to know about a request
// before it admits it.
type Classification struct {
	// Class is the request's priority class in the shed.Limiter.
	Class shed.Class
	// Cost is what the request reserves against the limiter's cost budget,
	// for example its estimated tokens. Zero means 1. The handler may
	// correct it once known (nethttp.Reconcile, echo.Reconcile).
	Cost int64
	// Key identifies who the request is rate limited as: a tenant, an API
	// key, a client address. The default is the trusted KeyHeader when
	// configured and present, else the client's address.
	Key string
	// Tenant is who the request is held to a fair share for within its
	// class (shed.Request.Tenant): while the class is contended, a tenant
	// that holds its share is rejected (503, tenant_share), so that one
	// noisy customer cannot take every slot. Empty (the default) means no
	// fair share, unless the middleware's TenantFromKey is set: then a
	// request without a Tenant is held to the share of its Key. Set it
	// only from what the client cannot choose freely (an authenticated
	// identity, a trusted header, the address): a client that can name
	// many tenants gets a share for each.
	Tenant string
	// Deadline, when set, is when the caller stops waiting. The default is
	// the one a trusted deadline header announces (the middleware's
	// DeadlineHeader), else none. The request's deadline is the earlier
	// of this and the request context's own: the limiter rejects at once
	// (deadline_too_short) a request whose deadline has passed or that is
	// not expected to finish before it, and the handler's context ends at
	// it. Zero means the request context's deadline, if any.
	Deadline time.Time
}

// DefaultOutcome maps a finished request to the outcome of its permit; see
// the package documentation for the mapping and why. It is the default of
// the middleware's Outcome option, and custom mappings can fall back to it.
func DefaultOutcome(r *http.Request, status int) shed.Outcome {
	o := statusOutcome(status)
	if o != shed.Dropped && isUpgrade(r) {
		return shed.Ignored
	}
	return o
}

func statusOutcome(status int) shed.Outcome {
	switch {
	case status < 400:
		return shed.Success
	case status == http.StatusBadGateway, status == http.StatusServiceUnavailable, status == http.StatusGatewayTimeout:
		return shed.Dropped
	default:
		return shed.Ignored
	}
}

// isUpgrade reports whether r asks for a connection that outlives the
// request: a protocol upgrade (WebSocket over HTTP/1.1) or CONNECT
// (tunnels, WebSocket over HTTP/2).
func isUpgrade(r *http.Request) bool {
	if r == nil {
		return false
	}
	if r.Method == http.MethodConnect {
		return true
	}
	_, ok := r.Header["Upgrade"]
	return ok
}
