package shed

import "context"

// PermitContextKey is the context key under which a context carries the
// permit of the work it belongs to (see [PermitFromContext]). Code that
// admits work, such as shedkit's HTTP middleware, puts the permit there,
// so that code running on behalf of that work, such as package fanout,
// can tell that it already holds capacity from a limiter instead of
// waiting for more from the same pool. Set it with [ContextWithPermit]; a
// context type of your own may instead answer Value(PermitContextKey{})
// with a *Permit, as the middleware's request state does to save an
// allocation.
type PermitContextKey struct{}

// ContextWithPermit returns a copy of ctx that carries p (see
// PermitContextKey). p must stay valid while the context is in use: the
// work it belongs to holds it until that work ends.
func ContextWithPermit(ctx context.Context, p *Permit) context.Context {
	return context.WithValue(ctx, PermitContextKey{}, p)
}

// PermitFromContext returns the permit of the work ctx belongs to, or nil
// when ctx carries none.
func PermitFromContext(ctx context.Context) *Permit {
	p, _ := ctx.Value(PermitContextKey{}).(*Permit)
	return p
}

// Holds reports whether p is a permit of l that has not been released (on
// the variable p points to). Use it on the goroutine that owns p, or
// synchronize with the code that releases it.
func (l *Limiter) Holds(p *Permit) bool {
	if p == nil || p.ref == nil {
		return false
	}
	return p.limiter() == l
}
